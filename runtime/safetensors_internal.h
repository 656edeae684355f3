/* safetensors_internal.h: what the reader (safetensors.c) and the writer
 * (safetensors_write.c) share; not for users of safetensors.h. */
#ifndef FUSION_RT_SAFETENSORS_INTERNAL_H
#define FUSION_RT_SAFETENSORS_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "safetensors.h"

/* JSON numbers are doubles: integers are exact up to 2^53. */
#define ST_JSON_INT_MAX 9007199254740992.0

/* Does data of dtype from convert to dtype to?  Floats among themselves,
 * I32 only to itself. */
int st_converts(st_dtype from, st_dtype to);
/* to (n of dtype dt) = from (n of dtype df), for dtypes that convert: a
 * copy when they are the same, else through half.h (exact to F32, rounded
 * to nearest even from it; F16 <-> BF16 through an exact fp32 block). */
void st_convert(void *to, st_dtype dt, const void *from, st_dtype df, int64_t n);
/* err = the formatted message (nothing when err is NULL or empty). */
void st_set_err(char *err, size_t err_size, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* Valid UTF-8 (no overlong forms, surrogates or code points past
 * U+10FFFF)?  On failure *bad is the offset of the first bad byte. */
int st_utf8_valid(const unsigned char *s, size_t n, size_t *bad);
/* Bytes of a tensor, or -1 when they overflow int64. */
int64_t st_tensor_nbytes(int rank, const int64_t *dim, int elem_size);

#endif
