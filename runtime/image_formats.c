/* image_formats.c: reading IDX, CIFAR binary and ImageFolder datasets
 * into rt_images (image_data.h says what each format is).  IDX and CIFAR
 * files are read through zlib's gzread, which reads a gzipped file and a
 * plain one alike; images are decoded by stb_image and resized by
 * stb_image_resize (Debian's libstb-dev). */
#include "image_data.h"

#include <dirent.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <zlib.h>

#include <stb_image.h>
#include <stb_image_resize.h>

#define MAX_FILES 4096 /* the most files a folder format lists */

static int set_err(char *err, size_t n, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, n, fmt, ap);
    va_end(ap);
    return -1;
}

static int is_dir(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

static int is_file(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 && S_ISREG(st.st_mode);
}

/* dir/name, or dir/name.gz, whichever is a file; 0 if neither. */
static int find_file(char *out, size_t n, const char *dir, const char *name)
{
    snprintf(out, n, "%s/%s", dir, name);
    if (is_file(out))
        return 1;
    snprintf(out, n, "%s/%s.gz", dir, name);
    return is_file(out);
}

/* The whole of path, gunzipped if it is gzipped.  Returns 0, or -1. */
static int read_all(const char *path, uint8_t **out, size_t *len, char *err, size_t n)
{
    gzFile f = gzopen(path, "rb");
    if (!f)
        return set_err(err, n, "%s: cannot open: %s", path, strerror(errno));
    size_t cap = 1 << 20, used = 0;
    uint8_t *buf = malloc(cap);
    for (;;) {
        if (!buf) {
            gzclose(f);
            return set_err(err, n, "%s: out of memory", path);
        }
        if (used == cap) {
            uint8_t *bigger = realloc(buf, cap * 2);
            if (!bigger)
                free(buf);
            buf = bigger, cap *= 2;
            continue;
        }
        int got = gzread(f, buf + used, (unsigned)(cap - used > (1u << 30) ? (1u << 30) : cap - used));
        if (got < 0) {
            int code;
            const char *why = gzerror(f, &code);
            set_err(err, n, "%s: cannot read it: %s", path, why);
            free(buf);
            gzclose(f);
            return -1;
        }
        if (got == 0)
            break;
        used += (size_t)got;
    }
    /* A gzip stream cut short reads as its beginning: gzclose says so. */
    if (gzclose(f) != Z_OK) {
        free(buf);
        return set_err(err, n, "%s: its gzip stream is cut short", path);
    }
    *out = buf, *len = used;
    return 0;
}

static uint32_t be32(const uint8_t *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

/* Resize d's images to h x w (each larger than wanted in some dimension). */
static int shrink(rt_images *d, int32_t h, int32_t w, char *err, size_t n)
{
    size_t in = (size_t)d->c * d->h * d->w, out = (size_t)d->c * h * w;
    uint8_t *to = malloc((size_t)d->n * out), *plane_in = malloc(in), *plane_out = malloc(out);
    if (!to || !plane_in || !plane_out) {
        free(to), free(plane_in), free(plane_out);
        return set_err(err, n, "%s: out of memory resizing its images", d->source);
    }
    for (int64_t i = 0; i < d->n; i++) {
        /* planar (c,h,w) to interleaved (h,w,c) and back: stb resizes interleaved pixels */
        const uint8_t *src = d->pixels + (size_t)i * in;
        for (int32_t c = 0; c < d->c; c++)
            for (int32_t k = 0; k < d->h * d->w; k++)
                plane_in[(size_t)k * d->c + c] = src[(size_t)c * d->h * d->w + k];
        stbir_resize_uint8(plane_in, d->w, d->h, 0, plane_out, w, h, 0, d->c);
        uint8_t *dst = to + (size_t)i * out;
        for (int32_t c = 0; c < d->c; c++)
            for (int32_t k = 0; k < h * w; k++)
                dst[(size_t)c * h * w + k] = plane_out[(size_t)k * d->c + c];
    }
    free(plane_in), free(plane_out), free(d->pixels);
    d->pixels = to, d->h = h, d->w = w;
    return 0;
}

/* ---- IDX ------------------------------------------------------------------ */

static int load_idx(rt_images *d, const char *images, const char *labels, int pixels, char *err, size_t n)
{
    uint8_t *im = NULL, *lb = NULL;
    size_t im_len = 0, lb_len = 0;
    int rc = read_all(labels, &lb, &lb_len, err, n);
    if (rc == 0 && pixels)
        rc = read_all(images, &im, &im_len, err, n);
    if (rc == 0 && (lb_len < 8 || be32(lb) != 0x00000801))
        rc = set_err(err, n, "%s: not an IDX labels file (its first 4 bytes should be 00 00 08 01)", labels);
    if (rc == 0 && pixels && (im_len < 16 || be32(im) != 0x00000803))
        rc = set_err(err, n, "%s: not an IDX images file (its first 4 bytes should be 00 00 08 03)", images);
    int64_t count = rc == 0 ? be32(lb + 4) : 0;
    if (rc == 0 && lb_len != 8 + (size_t)count)
        rc = set_err(err, n, "%s: %zu bytes, but an IDX file of %lld labels has %lld: it is %s", labels, lb_len,
                     (long long)count, (long long)(8 + count), lb_len < 8 + (size_t)count ? "cut short" : "too long");
    if (rc == 0 && pixels) {
        int64_t k = be32(im + 4), rows = be32(im + 8), cols = be32(im + 12);
        if (rows < 1 || cols < 1 || rows > 4096 || cols > 4096)
            rc = set_err(err, n, "%s: images of %lld x %lld pixels", images, (long long)rows, (long long)cols);
        else if (im_len != 16 + (size_t)(k * rows * cols))
            rc = set_err(err, n, "%s: %zu bytes, but an IDX file of %lld images of %lld x %lld has %lld: it is %s",
                         images, im_len, (long long)k, (long long)rows, (long long)cols,
                         (long long)(16 + k * rows * cols),
                         im_len < 16 + (size_t)(k * rows * cols) ? "cut short" : "too long");
        else if (k != count)
            rc = set_err(err, n, "%s: %lld labels, but %s has %lld images", labels, (long long)count, images,
                         (long long)k);
        if (rc == 0) {
            d->c = 1, d->h = (int32_t)rows, d->w = (int32_t)cols;
            d->pixels = malloc((size_t)(k * rows * cols) + 1);
            if (!d->pixels)
                rc = set_err(err, n, "%s: out of memory", images);
            else
                memcpy(d->pixels, im + 16, (size_t)(k * rows * cols));
        }
    }
    if (rc == 0) {
        d->n = count;
        d->labels = malloc(((size_t)count + 1) * sizeof *d->labels);
        if (!d->labels)
            rc = set_err(err, n, "%s: out of memory", labels);
        for (int64_t i = 0; rc == 0 && i < count; i++)
            d->labels[i] = lb[8 + i];
    }
    free(im), free(lb);
    snprintf(d->format, sizeof d->format, "IDX");
    snprintf(d->source, sizeof d->source, "%s", images);
    return rc;
}

/* The labels file beside an images file, and the other way round. */
static int idx_pair(const char *given, char *images, char *labels, size_t n)
{
    char path[1024]; /* given may be images or labels */
    snprintf(path, sizeof path, "%s", given);
    const char *slash = strrchr(path, '/'), *base = slash ? slash + 1 : path;
    const char *at = strstr(base, "images-idx3"), *lat = strstr(base, "labels-idx1");
    if (!at && !lat)
        return 0;
    size_t pre = (size_t)((at ? at : lat) - path);
    snprintf(images, n, "%.*simages-idx3%s", (int)pre, path, path + pre + 11);
    snprintf(labels, n, "%.*slabels-idx1%s", (int)pre, path, path + pre + 11);
    return 1;
}

/* ---- CIFAR ---------------------------------------------------------------- */

static int load_cifar(rt_images *d, char files[][1024], int n_files, int hundred, int pixels, char *err, size_t n)
{
    size_t record = (size_t)(hundred ? 2 : 1) + 3072;
    d->c = 3, d->h = 32, d->w = 32, d->n = 0;
    for (int f = 0; f < n_files; f++) {
        uint8_t *buf;
        size_t len;
        if (read_all(files[f], &buf, &len, err, n))
            return -1;
        if (len == 0 || len % record) {
            free(buf);
            return set_err(
                err, n,
                "%s: %zu bytes is not a whole number of CIFAR-%d records of %zu bytes: it is cut short or not "
                "CIFAR-%d",
                files[f], len, hundred ? 100 : 10, record, hundred ? 100 : 10);
        }
        int64_t k = (int64_t)(len / record);
        int32_t *labels = realloc(d->labels, ((size_t)(d->n + k) + 1) * sizeof *labels);
        uint8_t *px = pixels ? realloc(d->pixels, (size_t)(d->n + k) * 3072 + 1) : NULL;
        if (labels)
            d->labels = labels;
        if (px)
            d->pixels = px;
        if (!labels || (pixels && !px)) {
            free(buf);
            return set_err(err, n, "%s: out of memory", files[f]);
        }
        for (int64_t i = 0; i < k; i++) {
            const uint8_t *r = buf + (size_t)i * record;
            int32_t label = hundred ? r[1] : r[0];
            if (label >= (hundred ? 100 : 10)) {
                free(buf);
                return set_err(err, n, "%s: record %lld has label %d: not CIFAR-%d", files[f], (long long)i, label,
                               hundred ? 100 : 10);
            }
            d->labels[d->n + i] = label;
            if (pixels)
                memcpy(d->pixels + (size_t)(d->n + i) * 3072, r + record - 3072, 3072);
        }
        d->n += k;
        free(buf);
    }
    snprintf(d->format, sizeof d->format, "CIFAR-%d", hundred ? 100 : 10);
    snprintf(d->source, sizeof d->source, "%.*s", (int)sizeof d->source - 1, files[0]);
    return 0;
}

/* ---- ImageFolder ---------------------------------------------------------- */

static int by_name(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

/* The names in dir (not . or ..., nor hidden ones), sorted; dirs 1: the
 * folders, 0: the files.  Returns the count, or -1. */
static int list_dir(const char *dir, int dirs, char ***out, char *err, size_t n)
{
    DIR *dp = opendir(dir);
    if (!dp)
        return set_err(err, n, "%s: cannot list it: %s", dir, strerror(errno));
    char **names = NULL;
    int count = 0;
    struct dirent *e;
    while ((e = readdir(dp)) != NULL) {
        if (e->d_name[0] == '.')
            continue;
        char path[2048];
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        if (is_dir(path) != dirs)
            continue;
        char **more = realloc(names, (size_t)(count + 1) * sizeof *names);
        if (!more || !(more[count] = strdup(e->d_name))) {
            closedir(dp);
            free(more ? more : names);
            return set_err(err, n, "%s: out of memory", dir);
        }
        names = more, count++;
    }
    closedir(dp);
    qsort(names, (size_t)count, sizeof *names, by_name);
    *out = names;
    return count;
}

static void free_names(char **names, int n)
{
    for (int i = 0; i < n; i++)
        free(names[i]);
    free(names);
}

typedef struct {
    rt_images *d;
    char **paths;
    int64_t next, failed_at;
    pthread_mutex_t lock;
} decode_job;

/* One image: decoded to d->c channels, the shorter side resized to the
 * image's size, the centre cropped, stored planar. */
static int decode_one(const rt_images *d, const char *path, uint8_t *dst)
{
    int w, h, got;
    uint8_t *img = stbi_load(path, &w, &h, &got, d->c);
    if (!img)
        return -1;
    double s = (double)d->h / (h < w ? h : w);
    int rw = (int)(w * s + 0.5), rh = (int)(h * s + 0.5);
    rw = rw < d->w ? d->w : rw, rh = rh < d->h ? d->h : rh;
    uint8_t *sized = malloc((size_t)rw * rh * d->c);
    if (!sized || !stbir_resize_uint8(img, w, h, 0, sized, rw, rh, 0, d->c)) {
        free(sized), stbi_image_free(img);
        return -2;
    }
    int x0 = (rw - d->w) / 2, y0 = (rh - d->h) / 2;
    for (int c = 0; c < d->c; c++)
        for (int y = 0; y < d->h; y++)
            for (int x = 0; x < d->w; x++)
                dst[((size_t)c * d->h + y) * d->w + x] = sized[((size_t)(y0 + y) * rw + x0 + x) * d->c + c];
    free(sized), stbi_image_free(img);
    return 0;
}

static void *decode_worker(void *arg)
{
    decode_job *j = arg;
    size_t bytes = (size_t)j->d->c * j->d->h * j->d->w;
    for (;;) {
        pthread_mutex_lock(&j->lock);
        int64_t i = j->failed_at >= 0 ? j->d->n : j->next++;
        pthread_mutex_unlock(&j->lock);
        if (i >= j->d->n)
            return NULL;
        if (decode_one(j->d, j->paths[i], j->d->pixels + (size_t)i * bytes)) {
            pthread_mutex_lock(&j->lock);
            if (j->failed_at < 0 || i < j->failed_at)
                j->failed_at = i;
            pthread_mutex_unlock(&j->lock);
        }
    }
}

static int load_folder(rt_images *d, const char *root, int32_t c, int32_t h, int32_t w, int pixels, int threads,
                       char *err, size_t n)
{
    char **classes;
    int n_classes = list_dir(root, 1, &classes, err, n);
    if (n_classes < 0)
        return -1;
    if (n_classes == 0)
        return set_err(err, n, "%s: no class folders in it (an ImageFolder is a folder of class folders of images)",
                       root);
    char **paths = NULL;
    int64_t count = 0;
    int rc = 0;
    for (int k = 0; k < n_classes && rc == 0; k++) {
        char dir[2048], **files;
        snprintf(dir, sizeof dir, "%s/%s", root, classes[k]);
        int m = list_dir(dir, 0, &files, err, n);
        if (m < 0) {
            rc = -1;
            break;
        }
        char **more = realloc(paths, (size_t)(count + m + 1) * sizeof *paths);
        int32_t *labels = realloc(d->labels, (size_t)(count + m + 1) * sizeof *labels);
        if (more)
            paths = more;
        if (labels)
            d->labels = labels;
        for (int i = 0; i < m && more && labels; i++) {
            char path[4096];
            snprintf(path, sizeof path, "%s/%s", dir, files[i]);
            if (!(paths[count] = strdup(path)))
                break;
            d->labels[count++] = k;
        }
        free_names(files, m);
        if (!more || !labels)
            rc = set_err(err, n, "%s: out of memory", dir);
    }
    d->n = count, d->c = c, d->h = h, d->w = w, d->classes = n_classes;
    free_names(classes, n_classes);
    if (rc == 0 && count == 0)
        rc = set_err(err, n, "%s: its class folders hold no files", root);
    if (rc == 0 && pixels && !(d->pixels = malloc((size_t)count * c * h * w + 1)))
        rc = set_err(err, n, "%s: out of memory for %lld images", root, (long long)count);
    if (rc == 0 && pixels) {
        decode_job job = { .d = d, .paths = paths, .failed_at = -1 };
        pthread_mutex_init(&job.lock, NULL);
        pthread_t t[64];
        int started = 0;
        for (int i = 0; i < (threads < 1 ? 1 : threads > 64 ? 64 : threads); i++)
            started += pthread_create(&t[started], NULL, decode_worker, &job) == 0;
        if (started == 0)
            decode_worker(&job);
        for (int i = 0; i < started; i++)
            pthread_join(t[i], NULL);
        pthread_mutex_destroy(&job.lock);
        if (job.failed_at >= 0)
            rc = set_err(err, n,
                         "%s: not an image that can be decoded (PNG, JPEG, BMP, GIF, TGA, PNM or PSD): the class "
                         "folders of the ImageFolder %s hold images only",
                         paths[job.failed_at], root);
    }
    for (int64_t i = 0; i < count; i++)
        free(paths[i]);
    free(paths);
    snprintf(d->format, sizeof d->format, "ImageFolder");
    snprintf(d->source, sizeof d->source, "%s", root);
    return rc;
}

/* ---- detection and loading ------------------------------------------------ */

typedef enum { FMT_NONE, FMT_IDX, FMT_CIFAR10, FMT_CIFAR100, FMT_FOLDER } image_format;

static int ends_with(const char *s, const char *tail)
{
    size_t a = strlen(s), b = strlen(tail);
    return a >= b && strcmp(s + a - b, tail) == 0;
}

static image_format format_of(const char *path)
{
    char a[1024], b[1024];
    if (is_dir(path)) {
        if (find_file(a, sizeof a, path, "train-images-idx3-ubyte") ||
            find_file(a, sizeof a, path, "t10k-images-idx3-ubyte"))
            return FMT_IDX;
        if (find_file(a, sizeof a, path, "data_batch_1.bin") || find_file(a, sizeof a, path, "test_batch.bin"))
            return FMT_CIFAR10;
        if (find_file(a, sizeof a, path, "train.bin") || find_file(a, sizeof a, path, "test.bin"))
            return FMT_CIFAR100;
        return FMT_FOLDER; /* a folder that is no other format: class folders, checked as it loads */
    }
    const char *slash = strrchr(path, '/'), *base = slash ? slash + 1 : path;
    if (idx_pair(path, a, b, sizeof a))
        return FMT_IDX;
    if (ends_with(base, ".bin") || ends_with(base, ".bin.gz")) {
        if (strncmp(base, "data_batch_", 11) == 0 || strncmp(base, "test_batch", 10) == 0)
            return FMT_CIFAR10;
        if (strncmp(base, "train.bin", 9) == 0 || strncmp(base, "test.bin", 8) == 0)
            return FMT_CIFAR100;
    }
    return FMT_NONE;
}

int rt_images_detect(const char *path) { return format_of(path) != FMT_NONE; }

int rt_images_load(rt_images *d, const char *path, int test, int32_t want_c, int32_t want_h, int32_t want_w, int pixels,
                   int threads, char *err, size_t err_size)
{
    memset(d, 0, sizeof *d);
    char images[1024], labels[1024], files[8][1024];
    int rc = -1, n_files = 0;
    image_format fmt = format_of(path);
    switch (fmt) {
    case FMT_NONE: {
        struct stat st;
        if (stat(path, &st) != 0)
            return set_err(err, err_size, "%s: cannot open it: %s", path, strerror(errno));
        return set_err(err, err_size, "%s: not an image dataset (IDX, CIFAR binary batches or an ImageFolder)", path);
    }
    case FMT_IDX:
        if (is_dir(path)) {
            const char *split = test ? "t10k" : "train";
            char name[64];
            snprintf(name, sizeof name, "%s-images-idx3-ubyte", split);
            if (!find_file(images, sizeof images, path, name))
                return set_err(err, err_size, "%s: no %s[.gz] in it (the %s split of an IDX dataset)", path, name,
                               test ? "test" : "training");
        } else {
            snprintf(images, sizeof images, "%s", path);
        }
        idx_pair(images, images, labels, sizeof images);
        if (!is_file(labels))
            return set_err(err, err_size, "%s: its labels file %s is missing", images, labels);
        if (pixels && !is_file(images))
            return set_err(err, err_size, "%s: its images file %s is missing", labels, images);
        rc = load_idx(d, images, labels, pixels, err, err_size);
        break;
    case FMT_CIFAR10:
    case FMT_CIFAR100:
        if (is_dir(path)) {
            if (fmt == FMT_CIFAR10 && !test)
                for (int i = 1; i <= 5; i++) {
                    char name[32];
                    snprintf(name, sizeof name, "data_batch_%d.bin", i);
                    if (!find_file(files[n_files], sizeof files[0], path, name))
                        return set_err(err, err_size,
                                       "%s: %s[.gz] is missing (CIFAR-10's training split is "
                                       "data_batch_1.bin to data_batch_5.bin)",
                                       path, name);
                    n_files++;
                }
            else if (!find_file(files[n_files++], sizeof files[0], path,
                                fmt == FMT_CIFAR10 ? "test_batch.bin"
                                : test             ? "test.bin"
                                                   : "train.bin"))
                return set_err(err, err_size, "%s: %s[.gz] is missing", path,
                               fmt == FMT_CIFAR10 ? "test_batch.bin"
                               : test             ? "test.bin"
                                                  : "train.bin");
        } else {
            snprintf(files[n_files++], sizeof files[0], "%s", path);
        }
        rc = load_cifar(d, files, n_files, fmt == FMT_CIFAR100, pixels, err, err_size);
        break;
    case FMT_FOLDER: {
        char split[1024];
        snprintf(split, sizeof split, "%s/%s", path, test ? "test" : "train");
        if (test && !is_dir(split))
            snprintf(split, sizeof split, "%s/val", path);
        char other[1024];
        snprintf(other, sizeof other, "%s/train", path);
        if (test && !is_dir(split) && is_dir(other))
            return set_err(err, err_size,
                           "%s: it has train/ but no test/ or val/ (the held-out split of an ImageFolder)", path);
        rc = load_folder(d, is_dir(split) ? split : path, want_c, want_h, want_w, pixels, threads, err, err_size);
        break;
    }
    }
    if (rc == 0 && fmt != FMT_FOLDER)
        for (int64_t i = 0; i < d->n; i++)
            d->classes = d->labels[i] + 1 > d->classes ? d->labels[i] + 1 : d->classes;
    if (rc == 0 && pixels && (d->h > want_h || d->w > want_w) && fmt != FMT_FOLDER)
        rc = shrink(d, d->h > want_h ? want_h : d->h, d->w > want_w ? want_w : d->w, err, err_size);
    if (rc != 0)
        rt_images_free(d);
    return rc;
}

void rt_images_free(rt_images *d)
{
    free(d->pixels), free(d->labels);
    d->pixels = NULL, d->labels = NULL, d->n = 0;
}
