/* safetensors.h: reading and writing tensors in Hugging Face's safetensors
 * format, for checkpoints, for initial weights loaded by parameter name, and
 * for gradients that tests compare with PyTorch.
 *
 * The format: 8 bytes, a little-endian uint64 N; N bytes of UTF-8 JSON, an
 * object mapping each tensor name to
 *     {"dtype":"F32","shape":[2,3],"data_offsets":[begin,end]}
 * (byte offsets into the data, end exclusive) plus an optional
 * "__metadata__": {"key":"value",...}; then the data, little-endian and
 * row-major.  The writer pads the JSON with spaces to a multiple of 8 bytes,
 * so the data starts 8-aligned, and puts the tensors back to back.
 *
 * Writing:
 *
 *     float   w[6] = {...};
 *     int32_t step = 42;
 *     st_tensor t[2] = {
 *         {.name = "h.0.w", .dtype = ST_F32, .rank = 2, .dim = {2, 3}, .data = w},
 *         {.name = "step",  .dtype = ST_I32, .rank = 0, .data = &step},   // a scalar
 *     };
 *     const char *meta[] = {"format", "pt", NULL};
 *     char err[512];
 *     if (st_write("ckpt.safetensors", t, 2, meta, err, sizeof err) != 0)
 *         fprintf(stderr, "%s\n", err);
 *
 * The file appears whole or not at all: st_write writes <path>.tmp.<pid>,
 * fsyncs it, renames it over path and fsyncs the directory; on failure it
 * removes the temporary file.
 *
 * Reading:
 *
 *     st_file *f = st_open("ckpt.safetensors", err, sizeof err);
 *     if (!f) { fprintf(stderr, "%s\n", err); return -1; }
 *     st_tensor w;
 *     switch (st_find(f, "h.0.w", &w)) {
 *     case 1:  memcpy(param, w.data, 6 * sizeof(float)); break;   // check w.dtype, w.rank, w.dim first
 *     case 0:  ... absent ...
 *     case -1: ... present, but in a dtype fusion does not load (F16, ...) ...
 *     }
 *     const char *fmt = st_metadata(f, "format");   // NULL when absent
 *     st_close(f);                                 // w.data dangles from here on
 *
 * st_open reads the whole file and validates all of it before returning, so
 * nothing after it can fail on bad bytes: the header length fits the file,
 * the header is UTF-8 and a JSON object, every entry has a known dtype, a
 * shape of at most ST_MAX_RANK non-negative dims and data_offsets [begin,
 * end) inside the data whose size is the shape's, no two entries overlap or
 * share a name, and __metadata__ maps strings to strings.  Gaps between
 * tensors and bytes after the last one are allowed.  Every message names the
 * path and what is wrong.
 *
 * Data is copied in and out as is: little-endian fp32 and int32, the host's
 * own layout (the build refuses a big-endian host).  A tensor's data as the
 * reader gives it is aligned for its dtype even when the file's offsets are
 * not (such tensors are copied aside at st_open).
 *
 * What it deliberately is not: a general tensor library.  It loads F32 and
 * I32 only; the other dtypes safetensors defines (F16, BF16, F64, I64, U8,
 * BOOL, ...) are recognised, so a file holding them opens, but asking for
 * such a tensor answers -1.  Names are at most ST_NAME_MAX - 1 bytes and
 * ranks at most ST_MAX_RANK; a file beyond either is rejected with a message.
 * The whole file is read into memory (no mmap): fusion's checkpoints fit.
 */
#ifndef FUSION_RT_SAFETENSORS_H
#define FUSION_RT_SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>

typedef enum { ST_F32, ST_I32 } st_dtype;   /* "F32", "I32" in the file */

#define ST_NAME_MAX 256                     /* bytes, with the terminating NUL */
#define ST_MAX_RANK 8

typedef struct {
    char        name[ST_NAME_MAX];
    st_dtype    dtype;
    int         rank;                 /* 0 for a scalar                         */
    int64_t     dim[ST_MAX_RANK];     /* dim[0..rank)                           */
    const void *data;                 /* writer: the values (may be NULL when a
                                         dim is 0); reader: points into the
                                         loaded file, valid until st_close      */
} st_tensor;

/* Write tensors[0..n) to path, in that order, with metadata: a
 * NULL-terminated list of strings key, value, key, value, ..., or NULL for
 * none.  Names must be non-empty, UTF-8, unique, shorter than ST_NAME_MAX and
 * not "__metadata__"; metadata keys unique.  Writes to path.tmp.<pid> first,
 * fsyncs it, renames it to path and fsyncs the directory, so a crash never
 * leaves a half-written file, and a failure leaves no temporary file.
 * Returns 0, or -1 with a one-line reason naming path in err (which may be
 * NULL). */
int st_write(const char *path, const st_tensor *tensors, int n, const char *const *metadata,
             char *err, size_t err_size);

typedef struct st_file st_file;

/* Read and validate the whole file.  Returns NULL with a one-line reason in
 * err naming the path and what is wrong, e.g.
 *   "model.safetensors: tensor 'h.0.w': data_offsets [0, 12) hold 12 bytes but F32 [2,3] needs 24" */
st_file    *st_open(const char *path, char *err, size_t err_size);

/* Tensors in the file, __metadata__ not counted. */
int         st_count(const st_file *f);

/* Tensor i, in header order.  Returns 0; or -1 when i is out of range, or the
 * tensor's dtype is one fusion does not load (then out->name, rank and dim
 * are filled in and out->data is NULL, so the caller can say which). */
int         st_get(const st_file *f, int i, st_tensor *out);

/* The tensor called name.  Returns 1 found; 0 absent; -1 present but in a
 * dtype fusion does not load (out filled in as by st_get). */
int         st_find(const st_file *f, const char *name, st_tensor *out);

/* The __metadata__ value for key, NULL when absent; valid until st_close. */
const char *st_metadata(const st_file *f, const char *key);

/* Free everything st_open allocated; NULL is a no-op. */
void        st_close(st_file *f);

#endif
