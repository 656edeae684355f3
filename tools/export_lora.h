/* export_lora.h: `fusionc export --adapter` and `--merge` of a LoRA
 * fine-tune's checkpoint (export_lora.c says what each writes). */
#ifndef FUSION_EXPORT_LORA_H
#define FUSION_EXPORT_LORA_H

#include "../runtime/safetensors.h"

/* How many adapters (<linear>.lora_A.weight) the weights w[0..n) hold. */
int export_lora_count(const st_tensor *w, int n);

/* DIR/adapter_config.json and DIR/adapter_model.safetensors (in `as`)
 * from the checkpoint's weights w[0..n), its fusion.model and
 * fusion.hypers.  0, or -1 with err. */
int export_lora_adapter(const st_tensor *w, int n, const char *model, const char *hypers, const char *dir, st_dtype as,
                        char *err, size_t size);

/* The merged model: the base at `base` (checked against `frozen`, the
 * parts' fusion.frozen records) with the adapters folded in, and the
 * other trained weights of w, into *merged[0..*n_merged) (pointing into w
 * and into *owned, the merged f32 buffers: free each, then the array and
 * *merged).  0, or -1 with err. */
int export_lora_merge(const st_tensor *w, int n, const char *model, const char *hypers, const char *frozen,
                      const char *base, st_tensor **merged, int *n_merged, float ***owned, char *err, size_t size);

#endif
