/* safetensors.c: the safetensors reader (see safetensors.h), and what it
 * shares with the writer (safetensors_write.c, safetensors_internal.h):
 * the dtypes, their conversion, messages.
 *
 * The reader parses the header with cJSON, checks every entry, then sorts the entries twice:
 * by name (duplicates, and st_find's binary search) and by offset
 * (overlaps); the __metadata__ keys are sorted too (duplicates, and
 * st_metadata's binary search).  Every check is linear or n log n in the
 * header's size: a header may hold hundreds of thousands of keys, and a
 * quadratic check turned a 5.6 MB header (200,000 keys) into a 64 s
 * stall.  Nothing here exits or prints: errors are returned in err.
 * Float dtypes convert with half.h's functions (convert below), never
 * with code of their own.
 */
#include "safetensors.h"
#include "safetensors_internal.h"

#include "cpu/half.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#if !defined(__BYTE_ORDER__) || __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "safetensors.c copies tensor bytes as they are: it needs a little-endian host"
#endif

/* st_dtype's numbers are ir_dtype's and half.h's: one can be passed as the other. */
_Static_assert((int)ST_F32 == HALF_DT_F32 && (int)ST_I32 == HALF_DT_I32 && (int)ST_F16 == HALF_DT_F16 &&
                   (int)ST_BF16 == HALF_DT_BF16,
               "st_dtype and half.h's HALF_DT_* disagree");

/* Every dtype the format defines that has a whole number of bytes per
 * element.  The four of st_dtype load; the rest are known, so a file with
 * them opens, and st_get says -1 for those tensors. */
typedef struct {
    const char *name;
    int size; /* bytes per element             */
    int st;   /* its st_dtype, -1 not loadable */
} dtype_info;

static const dtype_info dtypes[] = {
    { "F32", 4, ST_F32 }, { "I32", 4, ST_I32 }, { "F16", 2, ST_F16 }, { "BF16", 2, ST_BF16 }, { "BOOL", 1, -1 },
    { "U8", 1, -1 },      { "I8", 1, -1 },      { "F8_E5M2", 1, -1 }, { "F8_E4M3", 1, -1 },   { "F8_E8M0", 1, -1 },
    { "I16", 2, -1 },     { "U16", 2, -1 },     { "U32", 4, -1 },     { "I64", 8, -1 },       { "U64", 8, -1 },
    { "F64", 8, -1 },     { "C64", 8, -1 },
};
#define N_DTYPES    ((int)(sizeof dtypes / sizeof dtypes[0]))
#define N_ST_DTYPES 4 /* dtypes[st] is st_dtype st's entry */
#define SUPPORTED   "F32, F16, BF16, I32"

const char *st_dtype_name(st_dtype d) { return (unsigned)d < N_ST_DTYPES ? dtypes[d].name : "?"; }
int st_dtype_size(st_dtype d) { return (unsigned)d < N_ST_DTYPES ? dtypes[d].size : 0; }

static int is_float(st_dtype d) { return d == ST_F32 || d == ST_F16 || d == ST_BF16; }

int st_converts(st_dtype from, st_dtype to) { return from == to || (is_float(from) && is_float(to)); }

void st_convert(void *to, st_dtype dt, const void *from, st_dtype df, int64_t n)
{
    if (dt == df)
        memcpy(to, from, (size_t)n * (size_t)st_dtype_size(dt));
    else if (dt == ST_F32)
        half_to_f32(to, from, n, (int)df);
    else if (df == ST_F32)
        half_from_f32(to, from, n, (int)dt);
    else {
        float block[1024];
        for (int64_t at = 0; at < n; at += 1024) {
            int64_t k = n - at < 1024 ? n - at : 1024;
            half_to_f32(block, (const uint16_t *)from + at, k, (int)df);
            half_from_f32((uint16_t *)to + at, block, k, (int)dt);
        }
    }
}

#define DATA_ALIGN 64

void st_set_err(char *err, size_t err_size, const char *fmt, ...)
{
    if (!err || err_size == 0)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, err_size, fmt, ap);
    va_end(ap);
}

int st_utf8_valid(const unsigned char *s, size_t n, size_t *bad)
{
    size_t i = 0;
    while (i < n) {
        unsigned c = s[i];
        size_t len;
        unsigned lo = 0x80, hi = 0xBF; /* bounds of the second byte */
        if (c < 0x80)
            len = 1;
        else if (c >= 0xC2 && c <= 0xDF)
            len = 2;
        else if (c >= 0xE0 && c <= 0xEF) {
            len = 3;
            if (c == 0xE0)
                lo = 0xA0;
            if (c == 0xED)
                hi = 0x9F;
        } else if (c >= 0xF0 && c <= 0xF4) {
            len = 4;
            if (c == 0xF0)
                lo = 0x90;
            if (c == 0xF4)
                hi = 0x8F;
        } else
            goto fail;
        if (len > n - i)
            goto fail;
        for (size_t k = 1; k < len; k++) {
            unsigned b = s[i + k];
            if (k == 1 ? (b < lo || b > hi) : (b < 0x80 || b > 0xBF))
                goto fail;
        }
        i += len;
    }
    return 1;
fail:
    if (bad)
        *bad = i;
    return 0;
}

/* "[2,3]", "[]" for a scalar. */
static void shape_str(char *buf, size_t size, int rank, const int64_t *dim)
{
    size_t at = 0;
    at += (size_t)snprintf(buf, size, "[");
    for (int i = 0; i < rank && at < size; i++)
        at += (size_t)snprintf(buf + at, size - at, "%s%lld", i ? "," : "", (long long)dim[i]);
    if (at < size)
        snprintf(buf + at, size - at, "]");
}

int64_t st_tensor_nbytes(int rank, const int64_t *dim, int elem_size)
{
    int64_t n = elem_size;
    for (int i = 0; i < rank; i++)
        if (__builtin_mul_overflow(n, dim[i], &n))
            return -1;
    return n;
}

/* Reads exactly n bytes; -1 with errno set on error, or errno 0 at an
 * unexpected end of file. */
static int read_all(int fd, void *buf, size_t n)
{
    char *p = buf;
    while (n > 0) {
        size_t chunk = n < ((size_t)1 << 30) ? n : ((size_t)1 << 30);
        ssize_t r = read(fd, p, chunk);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0) {
            if (r == 0)
                errno = 0;
            return -1;
        }
        p += r;
        n -= (size_t)r;
    }
    return 0;
}

/* ---- Reader ------------------------------------------------------------ */

typedef struct {
    char name[ST_NAME_MAX];
    int dtype; /* index into dtypes[]             */
    int rank;
    int64_t dim[ST_MAX_RANK];
    int64_t begin, end; /* bytes into the data section     */
    const char *data;   /* aligned for the dtype           */
} st_entry;

/* One __metadata__ pair; both strings point into st_file.meta_text. */
typedef struct {
    const char *key, *value;
} st_meta;

struct st_file {
    char *path; /* for st_load's messages            */
    int n;
    st_entry *entry;    /* header order                     */
    st_entry **by_name; /* sorted by name, for st_find       */
    int n_meta;
    st_meta *meta;    /* sorted by key, for st_metadata;
                                       non-NULL once __metadata__ is seen */
    char *meta_text;  /* every key and value, NUL-terminated */
    int64_t trailing; /* data bytes after the last tensor's end */
    char *data;       /* the data section, DATA_ALIGN-aligned   */
    char *aside;      /* copies of misaligned tensors fusion reads */
};

static int cmp_entry_name(const void *a, const void *b)
{
    return strcmp((*(const st_entry *const *)a)->name, (*(const st_entry *const *)b)->name);
}

static int cmp_entry_offset(const void *a, const void *b)
{
    const st_entry *x = *(const st_entry *const *)a, *y = *(const st_entry *const *)b;
    if (x->begin != y->begin)
        return x->begin < y->begin ? -1 : 1;
    return (x->end > y->end) - (x->end < y->end);
}

/* A JSON number that is an exact integer in [0, 2^53]: 1 with *v set. */
static int json_uint(const cJSON *item, int64_t *v)
{
    if (!cJSON_IsNumber(item))
        return 0;
    double d = item->valuedouble;
    if (!(d >= 0 && d <= ST_JSON_INT_MAX) || d != (double)(int64_t)d)
        return 0;
    *v = (int64_t)d;
    return 1;
}

/* One tensor's entry: fills e, or returns -1 with err set. */
static int parse_entry(const char *path, const cJSON *item, int64_t data_len, st_entry *e, char *err, size_t err_size)
{
    const char *name = item->string;
    size_t name_len = strlen(name);
    if (name_len >= ST_NAME_MAX) {
        st_set_err(err, err_size, "%s: tensor '%.40s...': name of %zu bytes is longer than ST_NAME_MAX - 1 (%d)", path,
                   name, name_len, ST_NAME_MAX - 1);
        return -1;
    }
    memcpy(e->name, name, name_len + 1);
    if (!cJSON_IsObject(item)) {
        st_set_err(err, err_size, "%s: tensor '%s': entry is not an object", path, name);
        return -1;
    }

    const cJSON *dtype = cJSON_GetObjectItemCaseSensitive(item, "dtype");
    const cJSON *shape = cJSON_GetObjectItemCaseSensitive(item, "shape");
    const cJSON *offsets = cJSON_GetObjectItemCaseSensitive(item, "data_offsets");
    const char *missing = !dtype ? "dtype" : !shape ? "shape" : !offsets ? "data_offsets" : NULL;
    if (missing) {
        st_set_err(err, err_size, "%s: tensor '%s': missing \"%s\"", path, name, missing);
        return -1;
    }

    if (!cJSON_IsString(dtype)) {
        st_set_err(err, err_size, "%s: tensor '%s': \"dtype\" is not a string", path, name);
        return -1;
    }
    e->dtype = -1;
    for (int i = 0; i < N_DTYPES; i++)
        if (strcmp(dtype->valuestring, dtypes[i].name) == 0)
            e->dtype = i;
    if (e->dtype < 0) {
        st_set_err(err, err_size,
                   "%s: tensor '%s': unknown dtype \"%s\" (not a safetensors dtype; fusion reads " SUPPORTED ")", path,
                   name, dtype->valuestring);
        return -1;
    }

    if (!cJSON_IsArray(shape)) {
        st_set_err(err, err_size, "%s: tensor '%s': \"shape\" is not an array", path, name);
        return -1;
    }
    int rank = cJSON_GetArraySize(shape);
    if (rank > ST_MAX_RANK) {
        st_set_err(err, err_size, "%s: tensor '%s': rank %d is more than ST_MAX_RANK (%d)", path, name, rank,
                   ST_MAX_RANK);
        return -1;
    }
    e->rank = rank;
    int d = 0;
    for (const cJSON *x = shape->child; x; x = x->next, d++) {
        if (cJSON_IsNumber(x) && x->valuedouble < 0) {
            st_set_err(err, err_size, "%s: tensor '%s': negative dim %g in shape", path, name, x->valuedouble);
            return -1;
        }
        if (!json_uint(x, &e->dim[d])) {
            st_set_err(err, err_size, "%s: tensor '%s': shape[%d] is not an integer in [0, 2^53]", path, name, d);
            return -1;
        }
    }

    if (!cJSON_IsArray(offsets) || cJSON_GetArraySize(offsets) != 2 || !json_uint(offsets->child, &e->begin) ||
        !json_uint(offsets->child->next, &e->end)) {
        st_set_err(err, err_size, "%s: tensor '%s': \"data_offsets\" is not [begin, end], two integers in [0, 2^53]",
                   path, name);
        return -1;
    }
    if (e->end < e->begin) {
        st_set_err(err, err_size, "%s: tensor '%s': data_offsets [%lld, %lld) end before they begin", path, name,
                   (long long)e->begin, (long long)e->end);
        return -1;
    }
    if (e->end > data_len) {
        st_set_err(err, err_size,
                   "%s: tensor '%s': data_offsets [%lld, %lld) run past the end of the data (%lld bytes)", path, name,
                   (long long)e->begin, (long long)e->end, (long long)data_len);
        return -1;
    }
    int64_t need = st_tensor_nbytes(e->rank, e->dim, dtypes[e->dtype].size);
    if (need != e->end - e->begin) {
        char sh[ST_MAX_RANK * 21 + 3];
        shape_str(sh, sizeof sh, e->rank, e->dim);
        if (need < 0)
            st_set_err(err, err_size, "%s: tensor '%s': %s %s is too large", path, name, dtypes[e->dtype].name, sh);
        else
            st_set_err(err, err_size, "%s: tensor '%s': data_offsets [%lld, %lld) hold %lld bytes but %s %s needs %lld",
                       path, name, (long long)e->begin, (long long)e->end, (long long)(e->end - e->begin),
                       dtypes[e->dtype].name, sh, (long long)need);
        return -1;
    }
    return 0;
}

static int cmp_meta_key(const void *a, const void *b)
{
    return strcmp(((const st_meta *)a)->key, ((const st_meta *)b)->key);
}

/* __metadata__ into f->meta, sorted by key.  Duplicates are found as
 * neighbours after the sort, and st_metadata bisects the same array: n log n
 * for both, with no allocation per key (one array of pairs, one block of
 * text).  A hash table (uthash) would be linear but adds a dependency and
 * per-key nodes for a table that never changes after st_open; the tensor
 * names (check_entries) use the same sort-and-bisect. */
static int parse_metadata(const char *path, st_file *f, const cJSON *meta, char *err, size_t err_size)
{
    if (f->meta) {
        st_set_err(err, err_size, "%s: \"__metadata__\" appears twice in the header", path);
        return -1;
    }
    if (!cJSON_IsObject(meta)) {
        st_set_err(err, err_size, "%s: \"__metadata__\" is not an object", path);
        return -1;
    }
    /* Count and size in one pass (cJSON_GetArraySize would be a second walk). */
    size_t n = 0, text = 0;
    for (const cJSON *kv = meta->child; kv; kv = kv->next, n++) {
        if (!cJSON_IsString(kv)) {
            st_set_err(err, err_size, "%s: \"__metadata__\" value of '%s' is not a string", path, kv->string);
            return -1;
        }
        text += strlen(kv->string) + 1 + strlen(kv->valuestring) + 1;
    }
    if (n > INT_MAX) {
        st_set_err(err, err_size, "%s: \"__metadata__\" has %zu keys, more than %d", path, n, INT_MAX);
        return -1;
    }
    f->meta = calloc(n + 1, sizeof *f->meta);
    f->meta_text = malloc(text + 1);
    if (!f->meta || !f->meta_text) {
        st_set_err(err, err_size, "%s: out of memory", path);
        return -1;
    }
    char *at = f->meta_text;
    for (const cJSON *kv = meta->child; kv; kv = kv->next) {
        size_t kn = strlen(kv->string) + 1, vn = strlen(kv->valuestring) + 1;
        f->meta[f->n_meta].key = memcpy(at, kv->string, kn);
        f->meta[f->n_meta].value = memcpy(at + kn, kv->valuestring, vn);
        at += kn + vn;
        f->n_meta++;
    }
    qsort(f->meta, n, sizeof *f->meta, cmp_meta_key);
    for (int i = 1; i < f->n_meta; i++)
        if (strcmp(f->meta[i - 1].key, f->meta[i].key) == 0) {
            st_set_err(err, err_size, "%s: \"__metadata__\" key '%s' appears twice", path, f->meta[i].key);
            return -1;
        }
    return 0;
}

/* Parse and check the header; fills f->entry, f->n and the metadata. */
static int parse_header(const char *path, st_file *f, const char *hdr, size_t hdr_len, int64_t data_len, char *err,
                        size_t err_size)
{
    size_t bad;
    if (!st_utf8_valid((const unsigned char *)hdr, hdr_len, &bad)) {
        st_set_err(err, err_size, "%s: header is not valid UTF-8 (byte %zu of the JSON)", path, bad);
        return -1;
    }
    const char *end = NULL;
    cJSON *root = cJSON_ParseWithLengthOpts(hdr, hdr_len, &end, 0);
    if (!root) {
        size_t at = end && end >= hdr ? (size_t)(end - hdr) : 0;
        st_set_err(err, err_size, "%s: header is not valid JSON (at byte %zu of %zu: \"%.20s\")", path, at, hdr_len,
                   at < hdr_len ? hdr + at : "");
        return -1;
    }
    int rc = -1;
    for (const char *p = end; p < hdr + hdr_len; p++)
        if (*p != ' ' && *p != '\t' && *p != '\n' && *p != '\r') {
            st_set_err(err, err_size, "%s: header has bytes after its JSON (at byte %zu of %zu)", path,
                       (size_t)(p - hdr), hdr_len);
            goto out;
        }
    if (!cJSON_IsObject(root)) {
        st_set_err(err, err_size, "%s: header JSON is not an object", path);
        goto out;
    }
    int n = 0;
    for (const cJSON *item = root->child; item; item = item->next)
        n += strcmp(item->string, "__metadata__") != 0;
    f->entry = calloc((size_t)n + 1, sizeof *f->entry);
    if (!f->entry) {
        st_set_err(err, err_size, "%s: out of memory", path);
        goto out;
    }
    for (const cJSON *item = root->child; item; item = item->next) {
        if (strcmp(item->string, "__metadata__") == 0) {
            if (parse_metadata(path, f, item, err, err_size) != 0)
                goto out;
        } else {
            if (parse_entry(path, item, data_len, &f->entry[f->n], err, err_size) != 0)
                goto out;
            f->n++;
        }
    }
    rc = 0;
out:
    cJSON_Delete(root);
    return rc;
}

/* Duplicate names and overlapping tensors, once every entry is known to be
 * well formed; builds f->by_name. */
static int check_entries(const char *path, st_file *f, char *err, size_t err_size)
{
    f->by_name = malloc(((size_t)f->n + 1) * sizeof *f->by_name);
    st_entry **by_offset = malloc(((size_t)f->n + 1) * sizeof *by_offset);
    int rc = -1;
    if (!f->by_name || !by_offset) {
        st_set_err(err, err_size, "%s: out of memory", path);
        goto out;
    }
    int n_nonempty = 0;
    for (int i = 0; i < f->n; i++) {
        f->by_name[i] = &f->entry[i];
        if (f->entry[i].end > f->entry[i].begin) /* an empty tensor overlaps nothing */
            by_offset[n_nonempty++] = &f->entry[i];
    }
    qsort(f->by_name, (size_t)f->n, sizeof *f->by_name, cmp_entry_name);
    for (int i = 1; i < f->n; i++)
        if (strcmp(f->by_name[i - 1]->name, f->by_name[i]->name) == 0) {
            st_set_err(err, err_size, "%s: tensor '%s' appears twice in the header", path, f->by_name[i]->name);
            goto out;
        }
    qsort(by_offset, (size_t)n_nonempty, sizeof *by_offset, cmp_entry_offset);
    for (int i = 1; i < n_nonempty; i++) {
        const st_entry *a = by_offset[i - 1], *b = by_offset[i];
        if (b->begin < a->end) {
            st_set_err(err, err_size, "%s: tensors '%s' [%lld, %lld) and '%s' [%lld, %lld) overlap", path, a->name,
                       (long long)a->begin, (long long)a->end, b->name, (long long)b->begin, (long long)b->end);
            goto out;
        }
    }
    rc = 0;
out:
    free(by_offset);
    return rc;
}

/* Point every entry at its data; tensors fusion reads whose offset is not a
 * multiple of their element size get an aligned copy (only files from other
 * writers). */
static int place_data(const char *path, st_file *f, char *err, size_t err_size)
{
    size_t aside = 0;
    for (int i = 0; i < f->n; i++) {
        const st_entry *e = &f->entry[i];
        if (dtypes[e->dtype].st >= 0 && e->begin % dtypes[e->dtype].size != 0)
            aside += ((size_t)(e->end - e->begin) + DATA_ALIGN - 1) / DATA_ALIGN * DATA_ALIGN;
    }
    if (aside > 0 && !(f->aside = aligned_alloc(DATA_ALIGN, aside))) {
        st_set_err(err, err_size, "%s: out of memory (%zu bytes)", path, aside);
        return -1;
    }
    size_t at = 0;
    for (int i = 0; i < f->n; i++) {
        st_entry *e = &f->entry[i];
        e->data = f->data + e->begin;
        if (dtypes[e->dtype].st >= 0 && e->begin % dtypes[e->dtype].size != 0) {
            memcpy(f->aside + at, e->data, (size_t)(e->end - e->begin));
            e->data = f->aside + at;
            at += ((size_t)(e->end - e->begin) + DATA_ALIGN - 1) / DATA_ALIGN * DATA_ALIGN;
        }
    }
    return 0;
}

st_file *st_open(const char *path, char *err, size_t err_size)
{
    if (!path) {
        st_set_err(err, err_size, "st_open: path is NULL");
        return NULL;
    }
    st_file *f = calloc(1, sizeof *f);
    char *hdr = NULL;
    int fd = -1;
    if (f && !(f->path = strdup(path))) {
        free(f);
        f = NULL;
    }
    if (!f) {
        st_set_err(err, err_size, "%s: out of memory", path);
        return NULL;
    }
    fd = open(path, O_RDONLY | O_CLOEXEC);
    struct stat st;
    if (fd < 0 || fstat(fd, &st) != 0) {
        st_set_err(err, err_size, "%s: cannot open: %s", path, strerror(errno));
        goto fail;
    }
    if (!S_ISREG(st.st_mode)) {
        st_set_err(err, err_size, "%s: not a regular file", path);
        goto fail;
    }
    int64_t size = (int64_t)st.st_size;
    unsigned char len8[8];
    if (size < 8) {
        st_set_err(err, err_size, "%s: truncated: %lld bytes, fewer than the 8-byte header length", path,
                   (long long)size);
        goto fail;
    }
    if (read_all(fd, len8, 8) != 0)
        goto read_error;
    uint64_t hdr_len = 0;
    for (int i = 0; i < 8; i++)
        hdr_len |= (uint64_t)len8[i] << (8 * i);
    if (hdr_len > (uint64_t)(size - 8)) {
        st_set_err(err, err_size, "%s: header length %llu runs past the end of the file (%lld bytes after the length)",
                   path, (unsigned long long)hdr_len, (long long)(size - 8));
        goto fail;
    }
    hdr = malloc((size_t)hdr_len + 1);
    if (!hdr) {
        st_set_err(err, err_size, "%s: out of memory (header of %llu bytes)", path, (unsigned long long)hdr_len);
        goto fail;
    }
    if (read_all(fd, hdr, (size_t)hdr_len) != 0)
        goto read_error;
    hdr[hdr_len] = '\0';
    int64_t data_len = size - 8 - (int64_t)hdr_len;
    if (parse_header(path, f, hdr, (size_t)hdr_len, data_len, err, err_size) != 0 ||
        check_entries(path, f, err, err_size) != 0)
        goto fail;
    int64_t last_end = 0; /* every end is within data_len (parse_entry) */
    for (int i = 0; i < f->n; i++)
        if (f->entry[i].end > last_end)
            last_end = f->entry[i].end;
    f->trailing = data_len - last_end;
    free(hdr);
    hdr = NULL;

    size_t alloc = ((size_t)data_len + DATA_ALIGN - 1) / DATA_ALIGN * DATA_ALIGN;
    f->data = aligned_alloc(DATA_ALIGN, alloc ? alloc : DATA_ALIGN);
    if (!f->data) {
        st_set_err(err, err_size, "%s: out of memory (%lld bytes of data)", path, (long long)data_len);
        goto fail;
    }
    if (read_all(fd, f->data, (size_t)data_len) != 0)
        goto read_error;
    if (place_data(path, f, err, err_size) != 0)
        goto fail;
    close(fd);
    return f;

read_error:
    if (errno)
        st_set_err(err, err_size, "%s: read failed: %s", path, strerror(errno));
    else
        st_set_err(err, err_size, "%s: file shrank while being read", path);
fail:
    if (fd >= 0)
        close(fd);
    free(hdr);
    st_close(f);
    return NULL;
}

int st_count(const st_file *f) { return f ? f->n : 0; }

/* Fills out from e; 0, or -1 when its dtype does not load. */
static int entry_tensor(const st_entry *e, st_tensor *out)
{
    memset(out, 0, sizeof *out);
    memcpy(out->name, e->name, sizeof out->name);
    out->rank = e->rank;
    memcpy(out->dim, e->dim, sizeof out->dim);
    if (dtypes[e->dtype].st < 0)
        return -1;
    out->dtype = (st_dtype)dtypes[e->dtype].st;
    out->data = e->data;
    return 0;
}

int st_get(const st_file *f, int i, st_tensor *out)
{
    if (!f || i < 0 || i >= f->n) {
        memset(out, 0, sizeof *out);
        return -1;
    }
    return entry_tensor(&f->entry[i], out);
}

static int cmp_name_key(const void *key, const void *elem)
{
    return strcmp((const char *)key, (*(const st_entry *const *)elem)->name);
}

int st_find(const st_file *f, const char *name, st_tensor *out)
{
    if (!f || !name || f->n == 0)
        return 0;
    st_entry **hit = bsearch(name, f->by_name, (size_t)f->n, sizeof *f->by_name, cmp_name_key);
    if (!hit)
        return 0;
    return entry_tensor(*hit, out) == 0 ? 1 : -1;
}

/* Can target t be loaded from f?  Its entry in *e, or -1 with err set. */
static int check_target(const st_file *f, const st_target *t, const st_entry **e, char *err, size_t err_size)
{
    if (!t->name) {
        st_set_err(err, err_size, "%s: st_load: a target has no name", f->path);
        return -1;
    }
    st_entry **hit = f->n ? bsearch(t->name, f->by_name, (size_t)f->n, sizeof *f->by_name, cmp_name_key) : NULL;
    if (!hit) {
        st_set_err(err, err_size, "%s: has no tensor '%s'", f->path, t->name);
        return -1;
    }
    *e = *hit;
    const dtype_info *in = &dtypes[(*e)->dtype];
    if (in->st < 0) {
        st_set_err(err, err_size, "%s: tensor '%s': dtype %s is not supported (fusion reads " SUPPORTED ")", f->path,
                   t->name, in->name);
        return -1;
    }
    if (st_dtype_size(t->dtype) == 0) {
        st_set_err(err, err_size, "%s: tensor '%s': target dtype %d is none of ST_F32, ST_I32, ST_F16, ST_BF16",
                   f->path, t->name, (int)t->dtype);
        return -1;
    }
    if (!st_converts((st_dtype)in->st, t->dtype)) {
        st_set_err(err, err_size,
                   "%s: tensor '%s': %s in the file does not load as %s (floats convert among F32, F16, "
                   "BF16; I32 loads only as I32)",
                   f->path, t->name, in->name, st_dtype_name(t->dtype));
        return -1;
    }
    int same = t->rank == (*e)->rank;
    for (int k = 0; same && k < t->rank; k++)
        same = t->dim[k] == (*e)->dim[k];
    if (!same) {
        char in_file[ST_MAX_RANK * 21 + 3], wanted[ST_MAX_RANK * 21 + 3];
        shape_str(in_file, sizeof in_file, (*e)->rank, (*e)->dim);
        if (t->rank < 0 || t->rank > ST_MAX_RANK)
            snprintf(wanted, sizeof wanted, "rank %d", t->rank);
        else
            shape_str(wanted, sizeof wanted, t->rank, t->dim);
        st_set_err(err, err_size, "%s: tensor '%s': shape %s in the file, %s wanted", f->path, t->name, in_file,
                   wanted);
        return -1;
    }
    if ((*e)->end > (*e)->begin && !t->dst) {
        st_set_err(err, err_size, "%s: tensor '%s': target dst is NULL", f->path, t->name);
        return -1;
    }
    return 0;
}

int st_load(const st_file *f, const st_target *targets, int n, char *err, size_t err_size)
{
    if (!f || n < 0 || (n > 0 && !targets)) {
        st_set_err(err, err_size, "st_load: %s", !f ? "no file" : "no targets");
        return -1;
    }
    for (int i = 0; i < n; i++) { /* everything checked before anything is written */
        const st_entry *e;
        if (check_target(f, &targets[i], &e, err, err_size) != 0)
            return -1;
    }
    for (int i = 0; i < n; i++) {
        const st_entry *e = NULL;
        check_target(f, &targets[i], &e, NULL, 0);
        int64_t numel = st_tensor_nbytes(e->rank, e->dim, 1); /* the file's bytes fit: it fits */
        if (numel > 0)
            st_convert(targets[i].dst, targets[i].dtype, e->data, (st_dtype)dtypes[e->dtype].st, numel);
    }
    return 0;
}

const char *st_metadata(const st_file *f, const char *key)
{
    if (!f || !key || f->n_meta == 0)
        return NULL;
    const st_meta want = { .key = key };
    const st_meta *hit = bsearch(&want, f->meta, (size_t)f->n_meta, sizeof *f->meta, cmp_meta_key);
    return hit ? hit->value : NULL;
}

int64_t st_trailing_bytes(const st_file *f) { return f ? f->trailing : -1; }

void st_close(st_file *f)
{
    if (!f)
        return;
    free(f->meta);
    free(f->meta_text);
    free(f->entry);
    free(f->by_name);
    free(f->data);
    free(f->aside);
    free(f->path);
    free(f);
}
