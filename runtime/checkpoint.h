/* checkpoint.h: a device program's tensors to and from safetensors files.
 *
 * A checkpoint's step folder (checkpoint_store.h: DIR/step-N/ and its
 * MANIFEST) holds one part a device: its parameters, optimizer state and
 * error feedback (comm/feedback.h) by name, with in its metadata who wrote
 * it (fusion.model, fusion.model_id: a hash of the whole model's parameter
 * names and shapes, fusion.build_id, fusion.device, fusion.plan) and where
 * the run stood (fusion.step, fusion.seed, an fp16 run's
 * fusion.loss_scaler), written to a temporary name, fsynced and renamed
 * (safetensors_write.c).
 *
 * Loading reads this device's own part when it is there and of this
 * compile; otherwise (a checkpoint of another compile: other devices,
 * stages or replicas) every tensor of this device is taken by name from
 * whichever part holds it.  Every part read is first checked against the
 * MANIFEST (size, XXH3), then its metadata strictly (digits only, in
 * range; the same model, model id and step; no bytes after its last
 * tensor), and an own part may hold nothing the program has not.  Batches
 * depend only on (seed, step), so a resumed run goes on as the run it
 * continues would have.  Which step to load, and agreeing on it with the
 * other devices, is checkpoint_run.h's.
 */
#ifndef FUSION_RT_CHECKPOINT_H
#define FUSION_RT_CHECKPOINT_H

#include <stddef.h>
#include <stdint.h>

#include "comm/feedback.h"
#include "device_program.h"
#include "loss_scale.h"
#include "safetensors.h"

/* Role bits (1 << ir_role) select tensors; LOSS_ROLE selects the loss,
 * RUNNING_ROLE batch norm's running statistics. */
#define LOSS_ROLE    (1u << 31)
#define RUNNING_ROLE (1u << 30)
static inline unsigned role_bit(int role) { return 1u << role; }

/* Every tensor of the given roles to path; parameters in param_dtype
 * (ST_F32 as they are; ST_BF16, ST_F16 rounded), the rest as they are.
 * 0, or 1 with the error printed (as every function here). */
int write_tensors(const program *p, const char *path, unsigned roles, const char *const *metadata,
                  st_dtype param_dtype);

/* Every tensor of the given roles, by name, from the safetensors file at path. */
int read_file_tensors(program *p, const char *path, unsigned roles);
/* --init PATH (repeatable): the parameters, by name, from safetensors
 * files or Hugging Face model folders (model.safetensors, or the shards
 * model.safetensors.index.json names; hf_weights.c), a later one's over an
 * earlier one's.  frozen_only: the frozen parameters alone (a resumed
 * fine-tune's base). */
int read_init_weights(program *p, const char *const *paths, int n_paths, int frozen_only);

/* This device's part's file name in a step folder: checkpoint.safetensors
 * for a one-device program, checkpoint-<device>.safetensors otherwise. */
void checkpoint_part_name(const program *p, char *name, size_t size);
/* Whether this program's parts are named per device (the rule above). */
int checkpoint_several(const program *p);

/* This device's part of the checkpoint of `step` into step_dir (made if
 * missing), with the runtime's error feedback (comm/feedback.h; NULL or
 * empty: none). */
int save_checkpoint(const program *p, const char *step_dir, int64_t step, uint64_t seed, const rt_loss_scaler *ls,
                    st_dtype save_dtype, const rt_feedback_arrays *feedback);

/* Where a checkpoint leaves a run: its step and seed, an fp16 run's loss
 * scaler, and (a part of this very compile) the error feedback, owned
 * copies (rt_feedback_arrays_free). */
typedef struct {
    int64_t step;
    uint64_t seed;
    rt_loss_scaler scaler;
    rt_feedback_arrays feedback;
    char *frozen; /* the parts' fusion.frozen records, "HASH NAME" lines (malloc'd; NULL none) */
} checkpoint_state;

/* A fine-tune's checkpoint holds no frozen parameter (its base): each part
 * records "HASH NAME" a line (fusion.frozen; XXH3-64 of the f32 values)
 * for the frozen parameters of its device.  After a resume the base is
 * initialised or loaded again (--init) and checked here: each frozen
 * parameter of this device against the record.  0, or -1 with err naming
 * the first that differs or is not recorded. */
int checkpoint_check_frozen(const program *p, const char *recorded, char *err, size_t n);

/* Parameters and optimizer state from one complete step folder (see the
 * top), every part it reads verified against the MANIFEST and its
 * metadata checked; *out filled (out->scaler: set it to the run's first,
 * a checkpoint without loss scaling leaves it).  0, or -1 with err naming
 * the file and what is wrong; then the arena may hold part of the step
 * and must be loaded again (another step) before it is used. */
int load_checkpoint_step(program *p, const char *step_dir, checkpoint_state *out, char *err, size_t n);

#endif
