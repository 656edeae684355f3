/* safetensors_write.c: the safetensors writer (see safetensors.h).
 *
 * It builds the header JSON by hand (cJSON would print large offsets as
 * 1e+15, and we want its exact bytes under test), writes to a temporary
 * name, fsyncs, renames, and fsyncs the folder.  Float tensors are written
 * in the dtype asked for through st_convert (half.h), a block at a time.
 */
#include "safetensors.h"
#include "safetensors_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static int write_all(int fd, const void *buf, size_t n)
{
    const char *p = buf;
    while (n > 0) {
        size_t chunk = n < ((size_t)1 << 30) ? n : ((size_t)1 << 30);
        ssize_t w = write(fd, p, chunk);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return -1;
        p += w;
        n -= (size_t)w;
    }
    return 0;
}

/* ---- Writer ------------------------------------------------------------ */

/* A growing string; oom sticks once an allocation fails. */
typedef struct {
    char *p;
    size_t len, cap;
    int oom;
} sbuf;

static void sb_put(sbuf *b, const char *s, size_t n)
{
    if (b->oom)
        return;
    if (b->len + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (b->len + n + 1 > cap)
            cap *= 2;
        char *p = realloc(b->p, cap);
        if (!p) {
            b->oom = 1;
            return;
        }
        b->p = p;
        b->cap = cap;
    }
    memcpy(b->p + b->len, s, n);
    b->len += n;
    b->p[b->len] = '\0';
}

static void sb_puts(sbuf *b, const char *s) { sb_put(b, s, strlen(s)); }

static void sb_printf(sbuf *b, const char *fmt, ...)
{
    char tmp[128];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    sb_put(b, tmp, (size_t)n); /* only short numbers go through here */
}

/* A JSON string literal: quotes, backslashes and control characters
 * escaped, other UTF-8 as is. */
static void sb_json_string(sbuf *b, const char *s)
{
    sb_puts(b, "\"");
    for (const unsigned char *c = (const unsigned char *)s; *c; c++) {
        if (*c == '"')
            sb_puts(b, "\\\"");
        else if (*c == '\\')
            sb_puts(b, "\\\\");
        else if (*c == '\n')
            sb_puts(b, "\\n");
        else if (*c == '\t')
            sb_puts(b, "\\t");
        else if (*c < 0x20)
            sb_printf(b, "\\u%04x", *c);
        else
            sb_put(b, (const char *)c, 1);
    }
    sb_puts(b, "\"");
}

static int cmp_tensor_name(const void *a, const void *b)
{
    return strcmp((*(const st_tensor *const *)a)->name, (*(const st_tensor *const *)b)->name);
}

/* The dtype tensor i is stored as in the file. */
static st_dtype file_dtype(const st_tensor *t, const st_dtype *as, int i) { return as ? as[i] : t[i].dtype; }

/* Checks the tensors, their file dtypes and the metadata; 0, or -1 with err set. */
static int check_write_args(const char *path, const st_tensor *t, int n, const st_dtype *as, const char *const *meta,
                            char *err, size_t err_size)
{
    if (n < 0 || (n > 0 && !t)) {
        st_set_err(err, err_size, "%s: %d tensors%s", path, n, n > 0 ? " but no array" : "");
        return -1;
    }
    for (int i = 0; i < n; i++) {
        const char *name = t[i].name;
        size_t bad;
        if (!memchr(name, '\0', ST_NAME_MAX)) {
            st_set_err(err, err_size, "%s: tensor %d: name is not NUL-terminated within ST_NAME_MAX (%d) bytes", path,
                       i, ST_NAME_MAX);
            return -1;
        }
        const char *why = !name[0]                            ? "empty"
                          : strcmp(name, "__metadata__") == 0 ? "reserved for the metadata"
                          : !st_utf8_valid((const unsigned char *)name, strlen(name), &bad) ? "not valid UTF-8"
                                                                                            : NULL;
        if (why) {
            st_set_err(err, err_size, "%s: tensor %d: name '%s' is %s", path, i, name, why);
            return -1;
        }
        if (st_dtype_size(t[i].dtype) == 0) {
            st_set_err(err, err_size, "%s: tensor '%s': dtype %d is none of ST_F32, ST_I32, ST_F16, ST_BF16", path,
                       name, (int)t[i].dtype);
            return -1;
        }
        st_dtype to = file_dtype(t, as, i);
        if (st_dtype_size(to) == 0) {
            st_set_err(err, err_size, "%s: tensor '%s': file dtype %d is none of ST_F32, ST_I32, ST_F16, ST_BF16", path,
                       name, (int)to);
            return -1;
        }
        if (!st_converts(t[i].dtype, to)) {
            st_set_err(err, err_size,
                       "%s: tensor '%s': %s data cannot be written as %s (floats convert among F32, "
                       "F16, BF16; I32 stays I32)",
                       path, name, st_dtype_name(t[i].dtype), st_dtype_name(to));
            return -1;
        }
        if (t[i].rank < 0 || t[i].rank > ST_MAX_RANK) {
            st_set_err(err, err_size, "%s: tensor '%s': rank %d is outside [0, %d]", path, name, t[i].rank,
                       ST_MAX_RANK);
            return -1;
        }
        for (int d = 0; d < t[i].rank; d++)
            if (t[i].dim[d] < 0) {
                st_set_err(err, err_size, "%s: tensor '%s': dim %d is %lld, negative", path, name, d,
                           (long long)t[i].dim[d]);
                return -1;
            }
        /* The data's bytes bound the file's: no 16-bit dtype is wider. */
        int64_t nbytes = st_tensor_nbytes(t[i].rank, t[i].dim,
                                          st_dtype_size(t[i].dtype) > st_dtype_size(to) ? st_dtype_size(t[i].dtype)
                                                                                        : st_dtype_size(to));
        if (nbytes < 0 || (double)nbytes > ST_JSON_INT_MAX) {
            st_set_err(err, err_size, "%s: tensor '%s': too large", path, name);
            return -1;
        }
        if (nbytes > 0 && !t[i].data) {
            st_set_err(err, err_size, "%s: tensor '%s': data is NULL", path, name);
            return -1;
        }
    }
    if (n > 1) {
        const st_tensor **sorted = malloc((size_t)n * sizeof *sorted);
        if (!sorted) {
            st_set_err(err, err_size, "%s: out of memory", path);
            return -1;
        }
        for (int i = 0; i < n; i++)
            sorted[i] = &t[i];
        qsort(sorted, (size_t)n, sizeof *sorted, cmp_tensor_name);
        for (int i = 1; i < n; i++)
            if (strcmp(sorted[i - 1]->name, sorted[i]->name) == 0) {
                st_set_err(err, err_size, "%s: tensor name '%s' given twice", path, sorted[i]->name);
                free(sorted);
                return -1;
            }
        free(sorted);
    }
    for (int i = 0; meta && meta[i]; i += 2) {
        size_t bad;
        if (!meta[i + 1]) {
            st_set_err(err, err_size, "%s: metadata key '%s' has no value (the list is key, value, ..., NULL)", path,
                       meta[i]);
            return -1;
        }
        if (!st_utf8_valid((const unsigned char *)meta[i], strlen(meta[i]), &bad) ||
            !st_utf8_valid((const unsigned char *)meta[i + 1], strlen(meta[i + 1]), &bad)) {
            st_set_err(err, err_size, "%s: metadata '%s' is not valid UTF-8", path, meta[i]);
            return -1;
        }
        for (int j = 0; j < i; j += 2)
            if (strcmp(meta[j], meta[i]) == 0) {
                st_set_err(err, err_size, "%s: metadata key '%s' given twice", path, meta[i]);
                return -1;
            }
    }
    return 0;
}

/* The header: "__metadata__" first (as Hugging Face writes it), then the
 * tensors in the order given, keys dtype, shape, data_offsets; no spaces
 * except the padding to a multiple of 8 bytes. */
static void build_header(sbuf *b, const st_tensor *t, int n, const st_dtype *as, const char *const *meta)
{
    sb_puts(b, "{");
    int first = 1;
    if (meta && meta[0]) {
        sb_puts(b, "\"__metadata__\":{");
        for (int i = 0; meta[i]; i += 2) {
            if (i)
                sb_puts(b, ",");
            sb_json_string(b, meta[i]);
            sb_puts(b, ":");
            sb_json_string(b, meta[i + 1]);
        }
        sb_puts(b, "}");
        first = 0;
    }
    int64_t offset = 0;
    for (int i = 0; i < n; i++) {
        int64_t nbytes = st_tensor_nbytes(t[i].rank, t[i].dim, st_dtype_size(file_dtype(t, as, i)));
        if (!first)
            sb_puts(b, ",");
        first = 0;
        sb_json_string(b, t[i].name);
        sb_puts(b, ":{\"dtype\":");
        sb_json_string(b, st_dtype_name(file_dtype(t, as, i)));
        sb_puts(b, ",\"shape\":[");
        for (int d = 0; d < t[i].rank; d++)
            sb_printf(b, "%s%lld", d ? "," : "", (long long)t[i].dim[d]);
        sb_printf(b, "],\"data_offsets\":[%lld,%lld]}", (long long)offset, (long long)(offset + nbytes));
        offset += nbytes;
    }
    sb_puts(b, "}");
    while (b->len % 8 != 0)
        sb_puts(b, " ");
}

/* fsync the directory holding path, so the rename itself is durable. */
static int fsync_parent_dir(const char *path)
{
    const char *slash = strrchr(path, '/');
    char *dir = slash ? strndup(path, slash == path ? 1 : (size_t)(slash - path)) : strdup(".");
    if (!dir)
        return -1;
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    free(dir);
    if (fd < 0)
        return -1;
    int rc = fsync(fd);
    int saved = errno;
    /* Some file systems cannot fsync a directory; the rename stands. */
    if (rc != 0 && (saved == EINVAL || saved == EROFS))
        rc = 0;
    close(fd);
    errno = saved;
    return rc;
}

/* Elements converted at a time when a tensor's file dtype is not its own. */
#define WRITE_BLOCK ((int64_t)1 << 18)

/* Tensor t's data to fd in dtype to: as is, or a block at a time through
 * block (WRITE_BLOCK elements of 4 bytes). */
static int write_tensor(int fd, const st_tensor *t, st_dtype to, void *block)
{
    int64_t numel = st_tensor_nbytes(t->rank, t->dim, 1);
    if (numel == 0)
        return 0;
    if (to == t->dtype)
        return write_all(fd, t->data, (size_t)numel * (size_t)st_dtype_size(to));
    for (int64_t at = 0; at < numel; at += WRITE_BLOCK) {
        int64_t k = numel - at < WRITE_BLOCK ? numel - at : WRITE_BLOCK;
        st_convert(block, to, (const char *)t->data + at * st_dtype_size(t->dtype), t->dtype, k);
        if (write_all(fd, block, (size_t)k * (size_t)st_dtype_size(to)) != 0)
            return -1;
    }
    return 0;
}

int st_write(const char *path, const st_tensor *tensors, int n, const char *const *metadata, char *err, size_t err_size)
{
    return st_write_as(path, tensors, n, NULL, metadata, err, err_size);
}

int st_write_as(const char *path, const st_tensor *tensors, int n, const st_dtype *as, const char *const *metadata,
                char *err, size_t err_size)
{
    if (!path) {
        st_set_err(err, err_size, "st_write: path is NULL");
        return -1;
    }
    if (check_write_args(path, tensors, n, as, metadata, err, err_size) != 0)
        return -1;

    sbuf header = { 0 };
    build_header(&header, tensors, n, as, metadata);
    size_t tmp_size = strlen(path) + 32;
    char *tmp = malloc(tmp_size);
    int converting = 0;
    for (int i = 0; i < n; i++)
        converting |= file_dtype(tensors, as, i) != tensors[i].dtype;
    void *block = converting ? malloc((size_t)WRITE_BLOCK * 4) : NULL;
    if (header.oom || !tmp || (converting && !block)) {
        st_set_err(err, err_size, "%s: out of memory", path);
        free(header.p);
        free(tmp);
        free(block);
        return -1;
    }
    snprintf(tmp, tmp_size, "%s.tmp.%ld", path, (long)getpid());

    int rc = -1, closed;
    const char *what = NULL;
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) {
        st_set_err(err, err_size, "%s: cannot create %s: %s", path, tmp, strerror(errno));
        goto out;
    }
    unsigned char len8[8];
    for (int i = 0; i < 8; i++)
        len8[i] = (unsigned char)((uint64_t)header.len >> (8 * i));
    if (write_all(fd, len8, 8) != 0 || write_all(fd, header.p, header.len) != 0) {
        what = "write";
        goto fail;
    }
    for (int i = 0; i < n; i++)
        if (write_tensor(fd, &tensors[i], file_dtype(tensors, as, i), block) != 0) {
            what = "write";
            goto fail;
        }
    if (fsync(fd) != 0) {
        what = "fsync";
        goto fail;
    }
    closed = close(fd);
    fd = -1;
    if (closed != 0) {
        what = "close";
        goto fail;
    }
    if (rename(tmp, path) != 0) {
        what = "rename";
        goto fail;
    }
    if (fsync_parent_dir(path) != 0) {
        /* The file is in place and whole; only its durability is in doubt. */
        st_set_err(err, err_size, "%s: written, but fsync of its directory failed: %s", path, strerror(errno));
        goto out;
    }
    rc = 0;
    goto out;

fail:
    st_set_err(err, err_size, "%s: %s failed: %s", path, what, strerror(errno));
    if (fd >= 0)
        close(fd);
    unlink(tmp);
out:
    free(tmp);
    free(header.p);
    free(block);
    return rc;
}
