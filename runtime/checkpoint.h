/* checkpoint.h: a device program's tensors to and from safetensors files.
 *
 * A checkpoint is a folder: one device's run writes DIR/checkpoint.safetensors,
 * a run of several devices DIR/checkpoint-<device>.safetensors each, every
 * part its device's parameters, optimizer state and error feedback
 * (comm/feedback.h) by name, with the model, build id, step and seed (and
 * an fp16 run's loss scaler) in its metadata, written to a temporary name,
 * fsynced and renamed (safetensors_write.c).  --resume reads this device's
 * own part when it is there and of this compile; otherwise (a checkpoint
 * of another compile: other devices, stages or replicas) every tensor of
 * this device is taken by name from whichever part holds it, the parts
 * agreeing on the model, step and seed.  Batches depend only on (seed,
 * step), so a resumed run goes on as the run it continues would have.  A
 * coordinated checkpoint
 * (the broker's: DIR/step-N/, whole once DIR/step-N/COMPLETE lists every
 * part with its XXH3) is checked part by part: a part it does not list or
 * whose bytes hash otherwise is refused, naming the file.
 */
#ifndef FUSION_RT_CHECKPOINT_H
#define FUSION_RT_CHECKPOINT_H

#include <stddef.h>
#include <stdint.h>

#include "comm/feedback.h"
#include "device_program.h"
#include "file_hash.h"
#include "loss_scale.h"
#include "safetensors.h"

/* Role bits (1 << ir_role) select tensors; LOSS_ROLE selects the loss. */
#define LOSS_ROLE (1u << 31)
static inline unsigned role_bit(int role) { return 1u << role; }

/* Every tensor of the given roles to path; parameters in param_dtype
 * (ST_F32 as they are; ST_BF16, ST_F16 rounded), the rest as they are.
 * 0, or 1 with the error printed (as every function here). */
int write_tensors(const program *p, const char *path, unsigned roles, const char *const *metadata,
                  st_dtype param_dtype);

/* Every tensor of the given roles, by name, from the safetensors file at path. */
int read_file_tensors(program *p, const char *path, unsigned roles);

/* This device's part's file in checkpoint folder dir. */
void checkpoint_path(const program *p, const char *dir, char *path, size_t size);


/* This device's part of the checkpoint of `step` into dir, with the
 * runtime's error feedback (comm/feedback.h; NULL or empty: none). */
int save_checkpoint(const program *p, const char *dir, int64_t step, uint64_t seed, const rt_loss_scaler *ls,
                    st_dtype save_dtype, const rt_feedback_arrays *feedback);

/* Parameters and optimizer state from dir's checkpoint (see the top);
 * *step, *seed and an fp16 run's loss scaler from it; into *feedback
 * (owned copies) the error feedback of this device's part when it is of
 * this compile: another plan's starts at zero. */
int resume_checkpoint(program *p, const char *dir, int64_t *step, uint64_t *seed, rt_loss_scaler *ls,
                      rt_feedback_arrays *feedback);

#endif
