/* train_images.h: an image classifier's data on one device (main.c): its
 * feeds, the training set of --data and the held-out set of --val-data,
 * loaded as image_data.h says, with their batches.  Only a device that
 * holds the images or the labels loads them, and one that holds only the
 * labels (a pipeline's last stage) reads no pixel. */
#ifndef FUSION_RT_TRAIN_IMAGES_H
#define FUSION_RT_TRAIN_IMAGES_H

#include "device_program.h"
#include "image_data.h"
#include "run_options.h"

typedef struct {
    int32_t images_at, labels_at; /* this device's feeds (tensor indices), -1 none */
    int active;                   /* the data is loaded                            */
    rt_images train, val;
    rt_image_feed feed, val_feed; /* val_feed: when --val-data gave a set          */
} train_images;

/* This device's image feeds (-1 when it holds neither). */
void train_images_find(const program *p, int32_t *images_at, int32_t *labels_at);
/* Load --data (and --val-data) for p's feeds and print what was loaded;
 * every label must be below classes (the model's: 0, no op here scores
 * them).  Returns 0, or -1 with one line in err naming the file. */
int train_images_open(train_images *ti, const program *p, const run_options *o, int64_t classes, char *err,
                      size_t err_size);
void train_images_close(train_images *ti);

#endif
