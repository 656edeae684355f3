/* checkpoint_store.h: the one layout of fusion's checkpoints on disk, for
 * every run (one device, several, or under the broker).
 *
 *     DIR/step-N/                 one folder a saved step
 *     DIR/step-N/checkpoint.safetensors           a one-device run's part, or
 *     DIR/step-N/checkpoint-<device>.safetensors  one part a device
 *     DIR/step-N/MANIFEST         written last, once every part is durable
 *     DIR/latest -> step-N        a symbolic link, moved only after step-N's MANIFEST
 *                                 (DIR/latest/checkpoint.safetensors: the newest weights)
 *
 * A step is complete when its MANIFEST is there: without one, a folder is
 * the litter of a save that was killed or failed, removed at the next
 * start.  Every file is written to a temporary name, fsynced and renamed
 * (atomic_file.h), so nothing half-written ever has a final name.
 *
 * The MANIFEST is text, one thing a line, its last line a checksum of the
 * lines before it (so an edited or truncated manifest is refused too):
 *
 *     fusion checkpoint 1
 *     step 20
 *     part checkpoint-cpu-a0.safetensors 3342520 5b0e9d3f2a4c7e11
 *     part checkpoint-cpu-a1.safetensors 3342520 0c1d2e3f40516273
 *     parts 2
 *     xxh3 9f8e7d6c5b4a3921
 *
 * (a part's file name, its size in bytes and the XXH3-64 of its bytes, in
 * lowercase hex).  Where parts live on several hosts, each host's folder
 * holds its own parts and the same MANIFEST.
 *
 * Pruning (--keep K) removes complete steps beyond the K newest, never the
 * newest complete one; a step is removed MANIFEST first, so a removal cut
 * short leaves litter, never a "complete" step with parts missing.
 *
 * What it deliberately is not: the parts' contents (checkpoint.h) or who
 * collects the reports (checkpoint_run.h, the broker).
 */
#ifndef FUSION_RT_CHECKPOINT_STORE_H
#define FUSION_RT_CHECKPOINT_STORE_H

#include <stddef.h>
#include <stdint.h>

#define CKPT_MANIFEST     "MANIFEST"
#define CKPT_LATEST       "latest"
#define CKPT_PART_MAX     256                /* a part's file name, with its NUL */
#define CKPT_MAX_STEP     1000000000000000LL /* 1e15: far above any run, far below overflow */
#define CKPT_DEFAULT_KEEP 3

typedef struct {
    char name[CKPT_PART_MAX]; /* the part's file name in its step folder */
    int64_t size;             /* bytes                                   */
    uint64_t xxh3;            /* XXH3-64 of its bytes                    */
} ckpt_part;

typedef struct {
    int64_t step;
    int32_t n_parts;
    ckpt_part *parts; /* [n_parts], malloc'd */
} ckpt_manifest;

/* A part's file name: checkpoint-<device>.safetensors for one device of
 * several, checkpoint.safetensors for a device alone. */
void ckpt_part_name(const char *device, int several, char *name, size_t n);

/* DIR/step-N into out. */
void ckpt_step_dir(const char *dir, int64_t step, char *out, size_t n);

/* A decimal number of digits only (no sign, space or exponent), at most
 * max: "20" yes; "2e", "-1", " 3", "" and 10^19 no.  0, or -1. */
int ckpt_parse_count(const char *text, uint64_t max, uint64_t *value);

/* The size and XXH3 of the file at path.  0, or -1 with err set. */
int ckpt_measure(const char *path, int64_t *size, uint64_t *xxh3, char *err, size_t n);

/* m as step_dir/MANIFEST (atomic; the folder fsynced).  0, or -1 with err. */
int ckpt_manifest_write(const char *step_dir, const ckpt_manifest *m, char *err, size_t n);

/* step_dir/MANIFEST into *m (parts malloc'd: ckpt_manifest_free), checked
 * strictly: every line as above, the checksum, no two parts of one name,
 * names without '/', the step the folder's.  0; 1 when there is no
 * MANIFEST (err says so); -1 when it is there but bad (err names it). */
int ckpt_manifest_read(const char *step_dir, ckpt_manifest *m, char *err, size_t n);
void ckpt_manifest_free(ckpt_manifest *m);
const ckpt_part *ckpt_manifest_find(const ckpt_manifest *m, const char *name);

/* Part `name` of step_dir against m: listed, and its size and XXH3 those
 * listed.  0, or -1 with err naming the file and what differs. */
int ckpt_verify_part(const char *step_dir, const ckpt_manifest *m, const char *name, char *err, size_t n);

/* DIR/latest := a link to step-N (made beside, renamed over).  0, or -1. */
int ckpt_set_latest(const char *dir, int64_t step, char *err, size_t n);

/* The steps of DIR's step-N folders, newest first, into *steps (malloc'd;
 * free it): all of them, or (complete_only) those with a MANIFEST.  The
 * count, or -1 with err (DIR cannot be read). */
int ckpt_list_steps(const char *dir, int complete_only, int64_t **steps, char *err, size_t n);

/* Removes one step folder: its MANIFEST first, then the rest.  0, or -1. */
int ckpt_remove_step(const char *step_dir, char *err, size_t n);

/* Removes the complete steps of DIR beyond the `keep` newest (keep >= 1:
 * the newest complete step always stays).  The count removed, or -1. */
int ckpt_prune(const char *dir, int keep, char *err, size_t n);

/* Removes the litter of saves that did not finish: step folders without a
 * MANIFEST, and temporary files (atomic_file.h) in DIR and its step
 * folders.  Another process removing the same at once is fine.  The count
 * of things removed, or -1 with err. */
int ckpt_remove_litter(const char *dir, char *err, size_t n);

#endif
