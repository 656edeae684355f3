/* test_image_feed: image batches (runtime/image_data.h) from an IDX set
 * this test writes, 50 images of 28x28 whose first pixel is their index:
 *   - the set loads (count, size, classes) and its normalisation is the
 *     pixels' mean and standard deviation;
 *   - every epoch of 8-image steps holds each image exactly once, in an
 *     order of its own;
 *   - a step's rows are the same asked for whole or in two halves (as
 *     replicas or micro-batches ask), and the same made ahead on the
 *     feed's thread as made at once;
 *   - --augment standard: each row is its image shifted by at most 4
 *     pixels each way and maybe mirrored, black beyond it, the same for
 *     the same seed, and not all rows unshifted;
 *   - gray into 3 channels (copies), 28 into 32 (a black border of 2),
 *     a set shrunk to 14x14 as it loads;
 *   - a truncated images file and labels of another count are refused,
 *     naming the file. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "image_data.h"

static int failures;
#define CHECK(cond, ...)                                         \
    do {                                                         \
        if (!(cond)) {                                           \
            failures++;                                          \
            fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__); \
            fprintf(stderr, __VA_ARGS__);                        \
            fprintf(stderr, "\n");                               \
        }                                                        \
    } while (0)

#define N 50
#define S 28

static uint8_t px(int i, int k) { return k == 0 ? (uint8_t)i : (uint8_t)((i * 7 + k * 13) % 256); }

static void be32(FILE *f, uint32_t v)
{
    uint8_t b[4] = { (uint8_t)(v >> 24), (uint8_t)(v >> 16), (uint8_t)(v >> 8), (uint8_t)v };
    fwrite(b, 1, 4, f);
}

/* images (n_images, cut bytes short) and labels (n_labels) in dir */
static void write_idx(const char *dir, int n_images, int n_labels, int cut)
{
    char path[512];
    snprintf(path, sizeof path, "%s/train-images-idx3-ubyte", dir);
    FILE *f = fopen(path, "wb");
    be32(f, 0x803), be32(f, (uint32_t)n_images), be32(f, S), be32(f, S);
    for (int i = 0; i < n_images; i++)
        for (int k = 0; k < S * S; k++)
            if (i < n_images - 1 || k < S * S - cut)
                fputc(px(i, k), f);
    fclose(f);
    snprintf(path, sizeof path, "%s/train-labels-idx1-ubyte", dir);
    f = fopen(path, "wb");
    be32(f, 0x801), be32(f, (uint32_t)n_labels);
    for (int i = 0; i < n_labels; i++)
        fputc(i % 10, f);
    fclose(f);
}

/* The image a row holds: its first pixel, unnormalised. */
static int sample_of(const rt_image_feed *f, const float *img)
{
    return (int)lroundf((img[0] * f->std[0] + f->mean[0]) * 255.0f);
}

int main(void)
{
    char dir[] = "/tmp/test_image_feed.XXXXXX", err[1024];
    if (!mkdtemp(dir))
        return 1;
    write_idx(dir, N, N, 0);
    rt_images d;
    CHECK(rt_images_detect(dir), "%s not detected as an image set", dir);
    CHECK(rt_images_load(&d, dir, 0, 1, S, S, 1, 2, err, sizeof err) == 0, "load: %s", err);
    CHECK(d.n == N && d.c == 1 && d.h == S && d.w == S && d.classes == 10, "loaded %lld %dx%dx%d, %d classes",
          (long long)d.n, d.c, d.h, d.w, d.classes);

    rt_image_feed f;
    CHECK(rt_image_feed_init(&f, &d, NULL, 1, S, S, 0, 8, 3, err, sizeof err) == 0, "feed: %s", err);
    double s = 0, s2 = 0;
    for (int i = 0; i < N; i++)
        for (int k = 0; k < S * S; k++)
            s += px(i, k) / 255.0, s2 += (px(i, k) / 255.0) * (px(i, k) / 255.0);
    double mean = s / (N * S * S), sd = sqrt(s2 / (N * S * S) - mean * mean);
    CHECK(fabs(f.mean[0] - mean) < 1e-6 && fabs(f.std[0] - sd) < 1e-6, "mean %f std %f, expected %f %f", f.mean[0],
          f.std[0], mean, sd);
    CHECK(rt_image_feed_epoch_steps(&f) == 7, "an epoch of %lld steps, expected 7",
          (long long)rt_image_feed_epoch_steps(&f));

    /* Three epochs of 8-image steps (19 steps: 150 rows and 2 more). */
    enum { STEPS = 19, G = 8 };
    static float img[G * S * S], half[G * S * S];
    int32_t lab[G], lab2[G];
    int order[STEPS * G];
    for (int step = 1; step <= STEPS; step++) {
        rt_image_feed_batch(&f, step, 0, G, img, lab);
        for (int r = 0; r < G; r++) {
            int i = sample_of(&f, img + r * S * S);
            order[(step - 1) * G + r] = i;
            CHECK(i >= 0 && i < N && lab[r] == i % 10, "step %d row %d: image %d label %d", step, r, i, lab[r]);
        }
    }
    for (int e = 0; e < 3; e++) {
        int seen[N] = { 0 };
        for (int g = e * N; g < (e + 1) * N; g++)
            seen[order[g]]++;
        for (int i = 0; i < N; i++)
            CHECK(seen[i] == 1, "epoch %d holds image %d %d times", e, i, seen[i]);
    }
    CHECK(memcmp(order, order + N, N * sizeof *order) != 0, "epochs 0 and 1 in the same order");

    /* The same rows asked for in halves, by a fresh feed (made at once). */
    rt_image_feed g;
    for (int augment = 0; augment <= 1; augment++) {
        rt_image_feed whole;
        rt_image_feed_init(&whole, &d, NULL, 1, S, S, augment, G, 3, err, sizeof err);
        rt_image_feed_init(&g, &d, NULL, 1, S, S, augment, G, 3, err, sizeof err);
        for (int step = 5; step <= 7; step++) {
            rt_image_feed_batch(&whole, step, 0, G, img, lab);
            rt_image_feed_batch(&g, step, 0, G / 2, half, lab2);
            rt_image_feed_batch(&g, step, G / 2, G / 2, half + G / 2 * S * S, lab2 + G / 2);
            CHECK(memcmp(img, half, sizeof img) == 0 && memcmp(lab, lab2, sizeof lab) == 0,
                  "augment %d, step %d: halves differ from the whole", augment, step);
        }
        rt_image_feed_free(&whole);
        rt_image_feed_free(&g);
    }
    /* Made ahead (f's thread made step 20 while step 19 was taken) equals made at once. */
    rt_image_feed_init(&g, &d, NULL, 1, S, S, 0, G, 3, err, sizeof err);
    rt_image_feed_batch(&f, STEPS + 1, 0, G, img, lab);
    rt_image_feed_batch(&g, STEPS + 1, 0, G, half, lab2);
    CHECK(memcmp(img, half, sizeof img) == 0, "step %d made ahead differs from made at once", STEPS + 1);
    rt_image_feed_free(&g);

    /* --augment standard: a shift of at most 4 each way and maybe a mirror of the plain row. */
    rt_image_feed aug, plain;
    rt_image_feed_init(&aug, &d, NULL, 1, S, S, 1, G, 3, err, sizeof err);
    rt_image_feed_init(&plain, &d, NULL, 1, S, S, 0, G, 3, err, sizeof err);
    rt_image_feed_batch(&aug, 2, 0, G, img, lab);
    rt_image_feed_batch(&plain, 2, 0, G, half, lab2);
    float black = -plain.mean[0] / plain.std[0];
    int moved = 0;
    for (int r = 0; r < G; r++) {
        const float *a = img + r * S * S, *u = half + r * S * S;
        int found = 0;
        for (int dy = -4; dy <= 4 && !found; dy++)
            for (int dx = -4; dx <= 4 && !found; dx++)
                for (int flip = 0; flip <= 1 && !found; flip++) {
                    int same = 1;
                    for (int y = 0; y < S && same; y++)
                        for (int x = 0; x < S && same; x++) {
                            int sy = y + dy, sx = (flip ? S - 1 - x : x) + dx;
                            float want = sy >= 0 && sy < S && sx >= 0 && sx < S ? u[sy * S + sx] : black;
                            same = a[y * S + x] == want;
                        }
                    if (same)
                        found = 1, moved += dy != 0 || dx != 0 || flip;
                }
        CHECK(found, "augmented row %d is no shift or mirror of its image", r);
    }
    CHECK(moved > 0, "no augmented row was shifted or mirrored");
    rt_image_feed_free(&aug);
    rt_image_feed_free(&plain);

    /* Gray into 3 channels of 32x32: copies, in a black border of 2. */
    rt_image_feed rgb;
    static float big[G * 3 * 32 * 32];
    CHECK(rt_image_feed_init(&rgb, &d, NULL, 3, 32, 32, 0, G, 3, err, sizeof err) == 0, "rgb feed: %s", err);
    rt_image_feed_rows(&rgb, 0, 1, big, lab);
    int ok = 1;
    for (int c = 0; c < 3; c++)
        for (int y = 0; y < 32; y++)
            for (int x = 0; x < 32; x++) {
                float v = big[(c * 32 + y) * 32 + x];
                int inside = y >= 2 && y < 30 && x >= 2 && x < 30;
                float want = inside ? (px(0, (y - 2) * S + x - 2) / 255.0f - rgb.mean[c]) / rgb.std[c]
                                    : -rgb.mean[c] / rgb.std[c];
                ok &= fabsf(v - want) < 1e-5f;
            }
    CHECK(ok && rgb.mean[0] == rgb.mean[2], "gray into RGB 32x32: channels or border wrong");
    rt_image_feed_free(&rgb);
    rt_image_feed_free(&f);
    rt_images_free(&d);

    CHECK(rt_images_load(&d, dir, 0, 1, 14, 14, 1, 1, err, sizeof err) == 0 && d.h == 14 && d.w == 14,
          "shrunk to 14x14: %s, %dx%d", err, d.h, d.w);
    rt_images_free(&d);

    /* Refused: a truncated images file; labels of another count. */
    write_idx(dir, N, N, 100);
    CHECK(rt_images_load(&d, dir, 0, 1, S, S, 1, 1, err, sizeof err) != 0 && strstr(err, "train-images-idx3-ubyte") &&
              strstr(err, "cut short"),
          "truncated: %s", err);
    write_idx(dir, N, N - 1, 0);
    CHECK(rt_images_load(&d, dir, 0, 1, S, S, 1, 1, err, sizeof err) != 0 && strstr(err, "train-labels-idx1-ubyte") &&
              strstr(err, "49 labels, but") && strstr(err, "50 images"),
          "label count: %s", err);
    char path[512];
    snprintf(path, sizeof path, "%s/train-images-idx3-ubyte", dir);
    unlink(path);
    snprintf(path, sizeof path, "%s/train-labels-idx1-ubyte", dir);
    unlink(path);
    rmdir(dir);
    if (failures)
        fprintf(stderr, "%d failures\n", failures);
    else
        printf("test_image_feed: all checks passed\n");
    return failures ? 1 : 0;
}
