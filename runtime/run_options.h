/* run_options.h: a device program's command line (the options every
 * device program takes; --help prints them all).  What it deliberately is
 * not: the training loop (main.c) that reads them. */
#ifndef FUSION_RT_RUN_OPTIONS_H
#define FUSION_RT_RUN_OPTIONS_H

#include <stdint.h>

#include "comm/comm.h"
#include "data.h"
#include "safetensors.h"
#include "train_settings.h"

typedef struct {
    const char *data[64];
    int n_data;
    int data_format;          /* --data-format: an rt_data_format (auto, shard or text) */
    int augment;              /* --augment: 0 none, 1 standard (image data)       */
    const char *val_data[16]; /* --val-data: held-out data, concatenated           */
    int n_val_data;
    int64_t val_every, val_batches;      /* --val-every N (0: none), --val-batches K */
    int64_t sample_every, sample_tokens; /* --sample-every N (0: none), --sample-tokens K */
    const char *init[8];                 /* --init: the weights to start from, a later one's over an earlier one's */
    int n_init;
    const char *log, *save, *resume, *dump_grads, *inputs, *broker, *standby, *key, *trace;
    int64_t steps, save_every, keep;
    double loss_scale;
    st_dtype save_dtype;
    int64_t loss_scale_window, inject_overflow;
    const char *crash_in_save; /* --inject-crash-in-save DEVICE:K (a test's fault) */
    char slow_device[128];     /* --inject-slowdown DEVICE:K:F (a test's straggler) */
    int64_t slow_step;
    double slow_factor;
    char link_device[128]; /* --inject-link-mbps DEVICE:K:M (a test's drifting link) */
    int64_t link_step;
    double link_mbps;
    int emulate_devices;
    int no_overlap;
    uint64_t seed;
    int seed_given;
    rt_train_overrides train; /* --lr, --lr-schedule, ...: NaN or RT_UNSET where not given */
    int threads;
    rt_comm_options comm;
} run_options;

/* argv into *o (defaults set by the caller).  0; 1 after --help (printed);
 * 2 on a usage error (printed, with the usage). */
int run_options_parse(int argc, char **argv, run_options *o);

#endif
