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
 * Dtypes.  fusion reads and writes four: F32, F16 (IEEE binary16), BF16 and
 * I32 (st_dtype; the same numbers as ir_dtype and half.h's HALF_DT_*).  The
 * three float dtypes convert into one another on the way in and out, with
 * half.h's conversions: to F32 exactly; from F32 (or from the other 16-bit
 * format, through F32) rounded to nearest, ties to even, as torch's
 * .to(dtype) rounds (F16 overflows to inf past 65504).  A dtype that meets
 * itself is copied byte for byte.  I32 loads and writes only as I32.
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
 * writes each tensor in its own dtype; to store w as BF16 (half the bytes)
 * while it stays fp32 in memory, give the file's dtypes one per tensor:
 *
 *     const st_dtype as[2] = {ST_BF16, ST_I32};
 *     st_write_as("ckpt.safetensors", t, 2, as, meta, err, sizeof err);
 *
 * The file appears whole or not at all: st_write writes <path>.tmp.<pid>,
 * fsyncs it, renames it over path and fsyncs the directory; on failure it
 * removes the temporary file.
 *
 * Reading:
 *
 *     st_file *f = st_open("ckpt.safetensors", err, sizeof err);
 *     if (!f) { fprintf(stderr, "%s\n", err); return -1; }
 *     float param[6];                                  // fp32, whatever the file holds
 *     st_target want[1] = {
 *         {.name = "h.0.w", .dtype = ST_F32, .rank = 2, .dim = {2, 3}, .dst = param},
 *     };
 *     if (st_load(f, want, 1, err, sizeof err) != 0)   // absent, another shape, F64, ...
 *         fprintf(stderr, "%s\n", err);
 *     const char *fmt = st_metadata(f, "format");      // NULL when absent
 *     st_close(f);
 *
 * st_load checks every target (present, same shape, a dtype that converts
 * to the target's) before it writes any, so on failure the caller's memory
 * is as it was.  st_find and st_get give a tensor's bytes as they are in the
 * file instead, with its dtype, for callers that look before they copy.
 *
 * st_open reads the whole file and validates all of it before returning, so
 * nothing after it can fail on bad bytes: the header length fits the file,
 * the header is UTF-8 and a JSON object, every entry has a dtype the format
 * defines, a shape of at most ST_MAX_RANK non-negative dims and data_offsets
 * [begin, end) inside the data whose size is the dtype's size times the
 * shape's elements, no two entries overlap or share a name, and __metadata__
 * maps strings to strings.  Gaps between tensors and bytes after the last
 * one are allowed (Hugging Face's files may have them); st_trailing_bytes
 * counts the latter, for callers such as checkpoints that refuse them.
 * Every message names the path and what is wrong.
 *
 * Data is little-endian, the host's own layout (the build refuses a
 * big-endian host).  A tensor's data as the reader gives it is aligned for
 * its dtype even when the file's offsets are not (such tensors are copied
 * aside at st_open).
 *
 * What it deliberately is not: a general tensor library.  The other dtypes
 * safetensors defines (F64, I64, U8, I8, BOOL, F8_E4M3, ...) are recognised,
 * so a file holding them opens (Hugging Face checkpoints carry int64 and
 * bool buffers that fusion never asks for), but st_load of such a tensor is
 * an error naming it, its dtype and the four fusion reads (st_find answers
 * -1); a dtype the format does not define fails st_open.  Names are at most ST_NAME_MAX - 1 bytes and
 * ranks at most ST_MAX_RANK; a file beyond either is rejected with a message.
 * The whole file is read into memory (no mmap): fusion's checkpoints fit.
 */
#ifndef FUSION_RT_SAFETENSORS_H
#define FUSION_RT_SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>

/* "F32", "I32", "F16", "BF16" in the file; the numbers are ir_dtype's. */
typedef enum { ST_F32 = 0, ST_I32 = 1, ST_F16 = 2, ST_BF16 = 3 } st_dtype;

#define ST_NAME_MAX 256 /* bytes, with the terminating NUL */
#define ST_MAX_RANK 8

/* "F32", "I32", "F16", "BF16"; "?" for a value outside st_dtype. */
const char *st_dtype_name(st_dtype d);
/* Bytes of one element: 4, 4, 2, 2; 0 for a value outside st_dtype. */
int st_dtype_size(st_dtype d);

typedef struct {
    char name[ST_NAME_MAX];
    st_dtype dtype;           /* of data                                */
    int rank;                 /* 0 for a scalar                         */
    int64_t dim[ST_MAX_RANK]; /* dim[0..rank)                           */
    const void *data;         /* writer: the values (may be NULL when a
                                         dim is 0); reader: points into the
                                         loaded file, valid until st_close      */
} st_tensor;

/* Write tensors[0..n) to path, in that order, each in its own dtype, with
 * metadata: a NULL-terminated list of strings key, value, key, value, ...,
 * or NULL for none.  Names must be non-empty, UTF-8, unique, shorter than
 * ST_NAME_MAX and not "__metadata__"; metadata keys unique.  Writes to
 * path.tmp.<pid> first, fsyncs it, renames it to path and fsyncs the
 * directory, so a crash never leaves a half-written file, and a failure
 * leaves no temporary file.  Returns 0, or -1 with a one-line reason naming
 * path in err (which may be NULL). */
int st_write(const char *path, const st_tensor *tensors, int n, const char *const *metadata, char *err,
             size_t err_size);

/* st_write, with tensors[i] stored in the file as as[i] (as NULL: each in
 * its own dtype, which is st_write): F32, F16 and BF16 data convert to any of
 * the three, rounded to nearest even; I32 only to I32, anything else is an
 * error naming the tensor.  The data is converted a block at a time, never
 * whole. */
int st_write_as(const char *path, const st_tensor *tensors, int n, const st_dtype *as, const char *const *metadata,
                char *err, size_t err_size);

typedef struct st_file st_file;

/* Read and validate the whole file.  Returns NULL with a one-line reason in
 * err naming the path and what is wrong, e.g.
 *   "model.safetensors: tensor 'h.0.w': data_offsets [0, 12) hold 12 bytes but F32 [2,3] needs 24" */
st_file *st_open(const char *path, char *err, size_t err_size);

/* Tensors in the file, __metadata__ not counted. */
int st_count(const st_file *f);

/* Tensor i, in header order, as it is in the file (out->dtype, out->data).
 * Returns 0; or -1 when i is out of range, or the tensor's dtype is not one
 * of st_dtype's (then out->name, rank and dim are filled in and out->data is
 * NULL, so the caller can say which). */
int st_get(const st_file *f, int i, st_tensor *out);

/* The tensor called name, as st_get gives it.  Returns 1 found; 0 absent;
 * -1 present but in a dtype that is not one of st_dtype's. */
int st_find(const st_file *f, const char *name, st_tensor *out);

/* Where st_load puts one tensor: the caller's memory and what it holds. */
typedef struct {
    const char *name; /* the tensor in the file                  */
    st_dtype dtype;   /* of dst: the file's dtype converts to it */
    int rank;         /* the shape the file's tensor must have   */
    int64_t dim[ST_MAX_RANK];
    void *dst; /* numel elements of dtype; may be NULL
                                         when numel is 0                         */
} st_target;

/* Copy tensors targets[0..n) from f into their dst, converting from the
 * file's dtype (see the top of this file).  All targets are checked first:
 * present, the same rank and dims, a file dtype fusion reads that converts
 * to the target's; only then is anything written.  Returns 0; or -1 with a
 * one-line reason naming the file, the tensor and what is wrong, e.g.
 *   "ckpt.safetensors: tensor 'h.0.w': dtype F64 is not supported (fusion reads F32, F16, BF16, I32)"
 *   "ckpt.safetensors: tensor 'h.0.w': shape [3,2] in the file, [2,3] wanted"
 * and the targets' memory untouched. */
int st_load(const st_file *f, const st_target *targets, int n, char *err, size_t err_size);

/* The __metadata__ value for key, NULL when absent; valid until st_close.
 * A binary search: st_open sorts the keys. */
const char *st_metadata(const st_file *f, const char *key);

/* Bytes of the file after the end of the last tensor's data (the largest
 * data_offsets end of any entry; with no tensors, every byte after the
 * header); -1 when f is NULL.  st_open accepts such bytes, and st_write
 * never writes them, so a checkpoint reader that wants the file exactly as
 * written refuses anything but 0:
 *
 *     if (st_trailing_bytes(f) != 0) ...   // appended to or not ours */
int64_t st_trailing_bytes(const st_file *f);

/* Free everything st_open allocated; NULL is a no-op. */
void st_close(st_file *f);

#endif
