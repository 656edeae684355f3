/* train_images.c: an image classifier's data on one device
 * (train_images.h). */
#include "train_images.h"

#include <stdio.h>
#include <string.h>

void train_images_find(const program *p, int32_t *images_at, int32_t *labels_at)
{
    *images_at = *labels_at = -1;
    for (int32_t i = 0; i < p->manifest.n_tensors; i++) {
        if (p->tensors[i].role != ROLE_INPUT)
            continue;
        if (p->tensors[i].feed == RT_FEED_IMAGES)
            *images_at = i;
        else if (p->tensors[i].feed == RT_FEED_LABELS)
            *labels_at = i;
    }
}

/* Every label below the model's classes (0: no op here scores them). */
static int check_labels(const rt_images *d, int64_t classes, char *err, size_t err_size)
{
    for (int64_t i = 0; classes > 0 && i < d->n; i++)
        if (d->labels[i] >= classes) {
            snprintf(err, err_size, "%s: image %lld has label %d, outside the model's %lld classes (set classes)",
                     d->source, (long long)i, d->labels[i], (long long)classes);
            return -1;
        }
    return 0;
}

static void describe(const char *what, const rt_images *d, const rt_image_feed *f)
{
    printf("fusion: %s: %s %s, %lld images", what, d->format, d->source, (long long)d->n);
    if (d->pixels) {
        printf(" %dx%dx%d, fed as %dx%dx%d, normalised by mean", d->c, d->h, d->w, f->c, f->h, f->w);
        for (int32_t c = 0; c < f->c; c++)
            printf(" %.4f", f->mean[c]);
        printf(" std");
        for (int32_t c = 0; c < f->c; c++)
            printf(" %.4f", f->std[c]);
    }
    printf(", %d classes\n", d->classes);
}

int train_images_open(train_images *ti, const program *p, const run_options *o, int64_t classes, char *err,
                      size_t err_size)
{
    memset(ti, 0, sizeof *ti);
    ti->images_at = ti->labels_at = -1;
    train_images_find(p, &ti->images_at, &ti->labels_at);
    const rt_manifest *mf = &p->manifest;
    if (o->n_data != 1) {
        snprintf(err, err_size, "an image classifier takes one --data (a dataset's file or folder), not %d", o->n_data);
        return -1;
    }
    if (o->n_val_data > 1) {
        snprintf(err, err_size, "an image classifier takes one --val-data, not %d", o->n_val_data);
        return -1;
    }
    /* The model's image (B,C,H,W) where this device holds it; a stage of
     * labels alone reads no pixel and needs no size. */
    int32_t c = 1, h = 28, w = 28, pixels = ti->images_at >= 0;
    if (pixels) {
        const rt_tensor *t = &p->tensors[ti->images_at].t;
        c = (int32_t)t->dim[1], h = (int32_t)t->dim[2], w = (int32_t)t->dim[3];
    }
    /* The global batch's images: all sites' under --sync diloco, whose rows
     * start at this site's row_offset. */
    int64_t global = mf->diloco.global_rows > 0 ? mf->diloco.global_rows : mf->tokens_per_step;
    if (mf->diloco.sync == RT_SYNC_DILOCO && o->n_val_data > 0) {
        snprintf(err, err_size, "an image classifier's --val-data under --sync diloco: not supported yet");
        return -1;
    }
    int threads = o->threads > 0 ? o->threads : 1;
    if (ti->images_at < 0 && ti->labels_at < 0) {
        /* A stage between the images and the labels: no training data, but
         * the held-out set's size (its labels alone), so that it runs as
         * many validation batches as the others. */
        if (o->n_val_data == 1 &&
            (rt_images_load(&ti->val, o->val_data[0], 1, c, h, w, 0, threads, err, err_size) ||
             rt_image_feed_init(&ti->val_feed, &ti->val, NULL, c, h, w, 0, global, o->seed, err, err_size)))
            return -1;
        return 0;
    }
    if (rt_images_load(&ti->train, o->data[0], 0, c, h, w, pixels, threads, err, err_size) ||
        check_labels(&ti->train, classes, err, err_size) ||
        rt_image_feed_init(&ti->feed, &ti->train, NULL, c, h, w, o->augment, global, o->seed, err, err_size))
        return -1;
    if (o->n_val_data == 1 &&
        (rt_images_load(&ti->val, o->val_data[0], 1, c, h, w, pixels, threads, err, err_size) ||
         check_labels(&ti->val, classes, err, err_size) ||
         rt_image_feed_init(&ti->val_feed, &ti->val, &ti->feed, c, h, w, 0, global, o->seed, err, err_size)))
        return -1;
    ti->active = 1;
    describe("training images", &ti->train, &ti->feed);
    printf("fusion: an epoch is %lld steps of %lld images%s\n", (long long)rt_image_feed_epoch_steps(&ti->feed),
           (long long)global, o->augment ? ", augmented (random crops of the image padded by 4, flips)" : "");
    if (ti->val_feed.d)
        describe("held-out images", &ti->val, &ti->val_feed);
    return 0;
}

void train_images_close(train_images *ti)
{
    rt_image_feed_free(&ti->feed);
    rt_image_feed_free(&ti->val_feed);
    rt_images_free(&ti->train);
    rt_images_free(&ti->val);
}
