/* stepper.h: one training step of a device program, 1F1B over its
 * micro-batches (forwards, backwards, the stash between them, the
 * gradients summed over micro-batches), and validation's forward-only
 * passes (stepper.c).  The training loop (main.c) holds one stepper. */
#ifndef FUSION_RT_STEPPER_H
#define FUSION_RT_STEPPER_H

#include "comm/comm.h"
#include "comm/overlap.h"
#include "data.h"
#include "device_program.h"
#include "run_options.h"
#include "train_images.h"

typedef struct {
    program *p;
    rt_comm *comm;
    rt_data *data;
    rt_data *val; /* --val-data on a device with a feed; NULL none */
    const run_options *o;
    int32_t tokens_at, targets_at; /* feeds on this device, -1 none */
    rt_image_feed *images;         /* an image classifier's batches; NULL none */
    int32_t images_at, labels_at;  /* its feeds on this device, -1 none        */
    int64_t b, T;                  /* rows per micro-batch, tokens per row */
    int32_t n_slots;               /* stash slots                          */
    char *stash_mem;               /* [n_slots][stash_bytes]: the stash's first
                                      n_stash_replay tensors (all but under keep) */
    int64_t stash_bytes;
    int32_t n_whole; /* keep: slots for micro-batches kept whole */
    char *whole_mem; /* [n_whole][whole_bytes]: the whole stash    */
    int64_t whole_bytes;
    int32_t *whole_slot; /* per micro-batch: its whole slot, or -1     */
    char *stashed;       /* per micro-batch: 0 none, 1 in a slot, 2 in a whole slot */
    float *grad_sum;     /* [grad floats] when M > 1             */
    int32_t *order;      /* [2M] the 1F1B order                  */
    int64_t grad_floats;
    double loss_sum;
    rt_overlap *overlap; /* gradient buckets reduced in the last backward; NULL none */
} stepper;

/* The loader's feeds on this device: the tokens' and the targets' tensor
 * (-1 when a stage holds neither). */
void program_find_feeds(const program *p, int32_t *tokens, int32_t *targets);
/* The vocabulary the loader's ids must stay below on this device (0: no
 * op here reads a feed). */
int64_t program_feed_vocabulary(const program *p, int32_t tokens_at, int32_t targets_at);

/* images: an image classifier's data (train_images.h), NULL for token
 * data.  0, or 1 with the error printed (fail). */
int stepper_init(stepper *st, program *p, rt_comm *comm, rt_data *data, train_images *images, const run_options *o);
void stepper_free(stepper *st);
/* Forward and backward of every micro-batch of ctx->step, in 1F1B order;
 * the step's mean loss into *loss (NAN on a device without it).  0 or -1
 * (ctx->msg says why). */
int stepper_step(stepper *st, rt_context *ctx, float *loss);
/* The validation loss after `step` (stepper.c says how): 0, or -1 with err. */
int stepper_validate(stepper *st, const rt_context *train_ctx, int64_t step, float *val_loss, char *err,
                     size_t err_size);
/* After a validation's forwards (stepper_validate, _images): the
 * training step's loss put back (loss_at, kept), the receives' wait the
 * training's again (AdaTopK measures it), and with --trace the validation
 * as one span from t0. */
void stepper_validation_end(stepper *st, const rt_context *ctx, int64_t step, float *loss_at, float kept,
                            double recv_wait, double t0, int ok);
/* An image classifier's validation over the whole of `val`
 * (validate_images.c says how): its mean loss and top-1 accuracy on the
 * device that holds the loss (NAN elsewhere).  0, or -1 with err. */
int stepper_validate_images(stepper *st, rt_image_feed *val, const rt_context *train_ctx, int64_t step, float *val_loss,
                            float *val_acc, char *err, size_t err_size);
/* --sample-every (train_sample.c): the model's continuation of the data's
 * first token after `step`, up to o->sample_tokens tokens, each drawn at
 * temperature 1 from the logits of the training graph's forward (its row
 * 0; the step's stream of (seed, step)); into text (bytes for a vocabulary
 * of at most 256, ids otherwise).  The loss tensor is put back.  A program
 * of one CPU device.  0, or -1 with err. */
int stepper_sample(stepper *st, const rt_context *train_ctx, int64_t step, char *text, size_t size, char *err,
                   size_t err_size);
/* --trace: a micro-batch's forward or backward ("forward", "backward"),
 * or the update, as one span from t0 around its ops'. */
void stepper_trace(const rt_context *ctx, const char *what, double t0);

#endif
