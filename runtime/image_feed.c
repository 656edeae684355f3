/* image_feed.c: a loaded image set's batches (image_data.h): shuffled
 * epochs, the model's channels and size, augmentation, normalisation,
 * and the next step's rows made on a thread of their own. */
#include "image_data.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "data.h" /* rt_rng */

#define PERM_TAG    0x5E9A11E5ull /* the epochs' permutations' stream */
#define AUGMENT_TAG 0xA0C3E27Bull /* the crops' and flips' stream     */
#define CROP_PAD    4             /* --augment standard: pixels padded before the random crop */
#define MAX_JOBS    16            /* rows made ahead: a replica's micro-batches, at most */

typedef struct {
    int64_t epoch; /* -1: none yet */
    int64_t *perm; /* [n] */
} perm_cache;

typedef enum { JOB_FREE, JOB_PENDING, JOB_WORKING, JOB_READY } job_state;

struct rt_image_job {
    job_state state;
    int64_t step, row0, B;
    int want_images, want_labels;
    float *images;
    int32_t *labels;
};

/* Pixel (ch, y, x) of image i, 0..255, in the model's channels. */
static float pixel(const rt_images *d, int32_t model_c, int64_t i, int32_t ch, int32_t y, int32_t x)
{
    size_t plane = (size_t)d->h * d->w, at = (size_t)y * d->w + x;
    const uint8_t *img = d->pixels + (size_t)i * d->c * plane;
    if (d->c == model_c)
        return img[(size_t)ch * plane + at];
    if (d->c == 1) /* gray to RGB: each channel the gray */
        return img[at];
    /* RGB to gray: luminance, ITU-R BT.601 (PIL's convert("L")) */
    return 0.299f * img[at] + 0.587f * img[plane + at] + 0.114f * img[2 * plane + at];
}

int rt_image_feed_init(rt_image_feed *f, const rt_images *d, const rt_image_feed *stats, int32_t c, int32_t h,
                       int32_t w, int augment, int64_t global_rows, uint64_t seed, char *err, size_t err_size)
{
    memset(f, 0, sizeof *f);
    if (c != 1 && c != 3) {
        snprintf(err, err_size, "the model's images have %d channels: image data feeds 1 or 3", c);
        return -1;
    }
    if (d->pixels && (d->h > h || d->w > w)) {
        snprintf(err, err_size, "%s: images of %dx%d do not fit the model's %dx%d", d->source, d->h, d->w, h, w);
        return -1;
    }
    f->d = d, f->c = c, f->h = h, f->w = w, f->augment = augment, f->global_rows = global_rows, f->seed = seed;
    f->perm_epoch = -1;
    if (stats) {
        memcpy(f->mean, stats->mean, sizeof f->mean);
        memcpy(f->std, stats->std, sizeof f->std);
    } else if (d->pixels) { /* the set's own, over every pixel of every image, in double */
        for (int32_t ch = 0; ch < c; ch++) {
            double s = 0, s2 = 0;
            for (int64_t i = 0; i < d->n; i++)
                for (int32_t y = 0; y < d->h; y++)
                    for (int32_t x = 0; x < d->w; x++) {
                        double v = pixel(d, c, i, ch, y, x) / 255.0;
                        s += v, s2 += v * v;
                    }
            double count = (double)d->n * d->h * d->w, mean = s / count, var = s2 / count - mean * mean;
            f->mean[ch] = (float)mean;
            f->std[ch] = var > 1e-12 ? (float)sqrt(var) : 1.0f;
        }
    } else {
        for (int32_t ch = 0; ch < c; ch++)
            f->mean[ch] = 0.0f, f->std[ch] = 1.0f;
    }
    pthread_mutex_init(&f->lock, NULL);
    pthread_cond_init(&f->wake, NULL);
    pthread_cond_init(&f->done, NULL);
    return 0;
}

int64_t rt_image_feed_epoch_steps(const rt_image_feed *f) { return (f->d->n + f->global_rows - 1) / f->global_rows; }

/* Epoch e's order of the n samples: Fisher-Yates from (seed, e). */
static int perm_for(const rt_image_feed *f, perm_cache *pc, int64_t epoch)
{
    int64_t n = f->d->n;
    if (pc->epoch == epoch)
        return 0;
    if (!pc->perm && !(pc->perm = malloc((size_t)n * sizeof *pc->perm)))
        return -1;
    rt_rng r = rt_rng_seeded(f->seed, PERM_TAG, (uint64_t)epoch);
    for (int64_t i = 0; i < n; i++)
        pc->perm[i] = i;
    for (int64_t i = n - 1; i > 0; i--) {
        int64_t j = (int64_t)(rt_rng_next(&r) % (uint64_t)(i + 1)), t = pc->perm[i];
        pc->perm[i] = pc->perm[j], pc->perm[j] = t;
    }
    pc->epoch = epoch;
    return 0;
}

/* Sample i into out (c,h,w), as torchvision's RandomCrop(padding) then
 * RandomHorizontalFlip: out(y, x) is the sample placed in the middle of
 * the model's image at (y + dy, x' + dx), x' = w-1-x if flip else x;
 * black where the sample does not reach; normalised. */
static void place(const rt_image_feed *f, int64_t i, int dy, int dx, int flip, float *out)
{
    const rt_images *d = f->d;
    int off_y = (f->h - d->h) / 2, off_x = (f->w - d->w) / 2;
    for (int32_t ch = 0; ch < f->c; ch++) {
        float inv = 1.0f / f->std[ch], black = -f->mean[ch] * inv;
        for (int32_t y = 0; y < f->h; y++)
            for (int32_t x = 0; x < f->w; x++) {
                int sy = y + dy - off_y, sx = (flip ? f->w - 1 - x : x) + dx - off_x;
                out[((size_t)ch * f->h + y) * f->w + x] =
                    sy >= 0 && sy < d->h && sx >= 0 && sx < d->w
                        ? (pixel(d, f->c, i, ch, sy, sx) / 255.0f - f->mean[ch]) * inv
                        : black;
            }
    }
}

/* Rows row0 .. row0+B-1 of step's batch. */
static int make_rows(const rt_image_feed *f, perm_cache *pc, int64_t step, int64_t row0, int64_t B, float *images,
                     int32_t *labels)
{
    size_t plane = (size_t)f->c * f->h * f->w;
    for (int64_t b = 0; b < B; b++) {
        int64_t g = (step - 1) * f->global_rows + row0 + b;
        if (perm_for(f, pc, g / f->d->n))
            return -1;
        int64_t i = pc->perm[g % f->d->n];
        if (labels)
            labels[b] = f->d->labels[i];
        if (!images)
            continue;
        int dy = 0, dx = 0, flip = 0;
        if (f->augment) {
            rt_rng r = rt_rng_seeded(f->seed ^ AUGMENT_TAG, (uint64_t)step, (uint64_t)(row0 + b));
            dy = (int)(rt_rng_next(&r) % (2 * CROP_PAD + 1)) - CROP_PAD;
            dx = (int)(rt_rng_next(&r) % (2 * CROP_PAD + 1)) - CROP_PAD;
            flip = (int)(rt_rng_next(&r) & 1);
        }
        place(f, i, dy, dx, flip, images + (size_t)b * plane);
    }
    return 0;
}

static void *worker(void *arg)
{
    rt_image_feed *f = arg;
    perm_cache pc = { .epoch = -1 };
    pthread_mutex_lock(&f->lock);
    while (!f->stop) {
        struct rt_image_job *job = NULL;
        for (int32_t k = 0; k < f->n_jobs && !job; k++)
            if (f->jobs[k].state == JOB_PENDING)
                job = &f->jobs[k];
        if (!job) {
            pthread_cond_wait(&f->wake, &f->lock);
            continue;
        }
        job->state = JOB_WORKING;
        pthread_mutex_unlock(&f->lock);
        int rc = make_rows(f, &pc, job->step, job->row0, job->B, job->want_images ? job->images : NULL,
                           job->want_labels ? job->labels : NULL);
        pthread_mutex_lock(&f->lock);
        job->state = rc == 0 ? JOB_READY : JOB_FREE; /* out of memory: the caller makes them itself */
        pthread_cond_broadcast(&f->done);
    }
    pthread_mutex_unlock(&f->lock);
    free(pc.perm);
    return NULL;
}

/* Under the lock: the job for (step, row0, B), waited for if in the works;
 * NULL if there is none. */
static struct rt_image_job *ready_job(rt_image_feed *f, int64_t step, int64_t row0, int64_t B)
{
    for (int32_t k = 0; k < f->n_jobs; k++) {
        struct rt_image_job *j = &f->jobs[k];
        if (j->state == JOB_FREE || j->step != step || j->row0 != row0 || j->B != B)
            continue;
        while (j->state == JOB_PENDING || j->state == JOB_WORKING)
            pthread_cond_wait(&f->done, &f->lock);
        return j->state == JOB_READY ? j : NULL;
    }
    return NULL;
}

/* Under the lock: ask the worker for (step, row0, B). */
static void schedule(rt_image_feed *f, int64_t step, int64_t row0, int64_t B, int want_images, int want_labels)
{
    struct rt_image_job *j = NULL;
    for (int32_t k = 0; k < f->n_jobs && !j; k++)
        if (f->jobs[k].state == JOB_FREE && f->jobs[k].B == B)
            j = &f->jobs[k];
    if (!j && f->n_jobs < MAX_JOBS) {
        if (!f->jobs && !(f->jobs = calloc(MAX_JOBS, sizeof *f->jobs)))
            return;
        struct rt_image_job *fresh = &f->jobs[f->n_jobs];
        fresh->images = malloc((size_t)B * f->c * f->h * f->w * sizeof(float));
        fresh->labels = malloc((size_t)B * sizeof(int32_t));
        if (!fresh->images || !fresh->labels) {
            free(fresh->images), free(fresh->labels);
            fresh->images = NULL, fresh->labels = NULL;
            return;
        }
        fresh->B = B;
        j = fresh;
        f->n_jobs++;
    }
    if (!j)
        return;
    if (!f->running) {
        if (pthread_create(&f->worker, NULL, worker, f) != 0)
            return;
        f->running = 1;
    }
    j->step = step, j->row0 = row0, j->want_images = want_images, j->want_labels = want_labels;
    j->state = JOB_PENDING;
    pthread_cond_signal(&f->wake);
}

void rt_image_feed_batch(rt_image_feed *f, int64_t step, int64_t row0, int64_t B, float *images, int32_t *labels)
{
    pthread_mutex_lock(&f->lock);
    struct rt_image_job *j = ready_job(f, step, row0, B);
    int made = 0;
    if (j && (!images || j->want_images) && (!labels || j->want_labels)) {
        if (images)
            memcpy(images, j->images, (size_t)B * f->c * f->h * f->w * sizeof(float));
        if (labels)
            memcpy(labels, j->labels, (size_t)B * sizeof(int32_t));
        made = 1;
    }
    if (j)
        j->state = JOB_FREE;
    pthread_mutex_unlock(&f->lock);
    if (!made) {
        perm_cache pc = { .epoch = f->perm_epoch, .perm = f->perm };
        if (make_rows(f, &pc, step, row0, B, images, labels) != 0) { /* out of memory: labels 0, images black */
            if (images)
                memset(images, 0, (size_t)B * f->c * f->h * f->w * sizeof(float));
            if (labels)
                memset(labels, 0, (size_t)B * sizeof(int32_t));
        }
        f->perm = pc.perm, f->perm_epoch = pc.epoch;
    }
    pthread_mutex_lock(&f->lock);
    schedule(f, step + 1, row0, B, images != NULL, labels != NULL);
    pthread_mutex_unlock(&f->lock);
}

void rt_image_feed_rows(rt_image_feed *f, int64_t first, int64_t B, float *images, int32_t *labels)
{
    size_t plane = (size_t)f->c * f->h * f->w;
    for (int64_t b = 0; b < B; b++) {
        int64_t i = (first + b) % f->d->n;
        if (labels)
            labels[b] = f->d->labels[i];
        if (images)
            place(f, i, 0, 0, 0, images + (size_t)b * plane);
    }
}

void rt_image_feed_free(rt_image_feed *f)
{
    if (!f->d)
        return;
    if (f->running) {
        pthread_mutex_lock(&f->lock);
        f->stop = 1;
        pthread_cond_broadcast(&f->wake);
        pthread_mutex_unlock(&f->lock);
        pthread_join(f->worker, NULL);
    }
    for (int32_t k = 0; k < f->n_jobs; k++)
        free(f->jobs[k].images), free(f->jobs[k].labels);
    free(f->jobs), free(f->perm);
    pthread_mutex_destroy(&f->lock);
    pthread_cond_destroy(&f->wake);
    pthread_cond_destroy(&f->done);
    f->d = NULL;
}
