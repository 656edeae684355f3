/* image_data.h: image datasets for image classifiers (a model with one f32
 * input (B,C,H,W) and one i32 input (B) of labels: program.h's
 * RT_FEED_IMAGES and RT_FEED_LABELS).
 *
 * Formats, told apart by their files (image_formats.c):
 *   - IDX (MNIST, Fashion-MNIST): an images file (magic 0x00000803,
 *     uint8, N x rows x cols, big-endian counts) and its labels file
 *     (0x00000801), gzipped or not; a path names the images file, the
 *     labels file (its name with "images-idx3" as "labels-idx1" beside
 *     it), or a folder holding train-images-idx3-ubyte[.gz] and
 *     t10k-images-idx3-ubyte[.gz];
 *   - CIFAR-10 and CIFAR-100 binary batches: records of a label byte (two
 *     for CIFAR-100: coarse, then the fine label used here) and 3,072
 *     bytes of 32x32 RGB, channel after channel; a path names a .bin file
 *     or a folder (data_batch_1..5.bin and test_batch.bin; train.bin and
 *     test.bin);
 *   - ImageFolder (torchvision's convention): a folder of class folders,
 *     classes in name order, each of PNG, JPEG, BMP or GIF files (decoded
 *     with stb_image, Debian's libstb-dev); a folder holding train/ and
 *     test/ (or val/) is both splits.
 * A folder holding both splits gives its training split to --data and its
 * test split to --val-data.  Every fault is one line naming the file: a
 * truncated IDX or CIFAR file, labels of another count than the images, a
 * file in a class folder that is not an image, a label the model has no
 * class for.
 *
 * Batches (image_feed.c): shuffled epochs.  Row r of step s is sample
 * perm_e[(s-1)·G + r - e·N] of epoch e = ((s-1)·G + r) / N, where G is
 * the global batch and perm_e a permutation drawn from (seed, e): every
 * sample once an epoch, and the same rows whichever plan (devices,
 * replicas, micro-batches) asks for them.  Each image is converted to the
 * model's channels (gray to RGB by copying, RGB to gray by luminance),
 * put in the model's size (padded with black when smaller; resized at
 * load when larger), optionally augmented (--augment standard: a random
 * crop of the image padded by 4 pixels and a horizontal flip with
 * probability 1/2, drawn from (seed, step, row)), and normalised per
 * channel by the training set's mean and standard deviation.  A
 * background thread makes the next step's rows while this step runs.
 */
#ifndef FUSION_RT_IMAGE_DATA_H
#define FUSION_RT_IMAGE_DATA_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

typedef struct {
    int64_t n;         /* images                                       */
    int32_t c, h, w;   /* as stored: n x c x h x w uint8               */
    uint8_t *pixels;   /* NULL when loaded for its labels alone        */
    int32_t *labels;   /* [n]                                          */
    int32_t classes;   /* the largest label + 1 (ImageFolder: folders)  */
    char format[32];   /* "IDX", "CIFAR-10", "CIFAR-100", "ImageFolder" */
    char source[1024]; /* the images' file or folder                   */
} rt_images;

/* 1 if path looks like one of the formats above (a folder or a file of
 * them), 0 if not: then it is token data (data.h). */
int rt_images_detect(const char *path);
/* Load path's split (test 0: training, 1: test; a path of one split
 * alone gives it whatever test says).  want_c/h/w: the model's image;
 * images larger than it are resized to it as they load (ImageFolder's:
 * the shorter side to its size, then the centre cropped), decoding on
 * `threads` threads.  pixels 0: labels only (a stage that reads no
 * image).  Returns 0, or -1 with one line naming the file in err. */
int rt_images_load(rt_images *d, const char *path, int test, int32_t want_c, int32_t want_h, int32_t want_w, int pixels,
                   int threads, char *err, size_t err_size);
void rt_images_free(rt_images *d);

/* The batches of a loaded set for a model's image (image_feed.c). */
typedef struct rt_image_feed_s {
    const rt_images *d;
    int32_t c, h, w;       /* the model's image                          */
    float mean[3], std[3]; /* per channel of the model's image, in [0, 1] */
    int augment;           /* 1: --augment standard                      */
    int64_t global_rows;   /* G: the global batch's rows                 */
    uint64_t seed;
    int64_t perm_epoch; /* the epoch perm is drawn for (-1: none)     */
    int64_t *perm;      /* [n]                                        */
    /* The next step's rows, made on a thread of their own. */
    pthread_t worker;
    pthread_mutex_t lock;
    pthread_cond_t wake, done;
    int running, stop;
    struct rt_image_job *jobs;
    int32_t n_jobs;
} rt_image_feed;

/* Set f up for d: the model's image c x h x w, normalised by (mean, std)
 * of `stats` (the training set; NULL: of d itself), G rows a step.
 * Returns 0, or -1 with err (the model's image is smaller than 28 or has
 * another channel count than 1 or 3). */
int rt_image_feed_init(rt_image_feed *f, const rt_images *d, const rt_image_feed *stats, int32_t c, int32_t h,
                       int32_t w, int augment, int64_t global_rows, uint64_t seed, char *err, size_t err_size);
/* Rows row0 .. row0+B-1 of step's batch (images (B,c,h,w), labels (B);
 * either may be NULL), then the same rows of step + 1 made in the
 * background. */
void rt_image_feed_batch(rt_image_feed *f, int64_t step, int64_t row0, int64_t B, float *images, int32_t *labels);
/* Samples first .. first+B-1 in the set's order, neither shuffled nor
 * augmented (validation); past the end they wrap round. */
void rt_image_feed_rows(rt_image_feed *f, int64_t first, int64_t B, float *images, int32_t *labels);
/* Steps in an epoch, rounded up. */
int64_t rt_image_feed_epoch_steps(const rt_image_feed *f);
void rt_image_feed_free(rt_image_feed *f);

#endif
