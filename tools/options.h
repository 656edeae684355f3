/* options.h: the command-line options every fusionc command shares, and
 * their parser (tools/fusionc.c prints each command's usage). */
#ifndef FUSION_TOOLS_OPTIONS_H
#define FUSION_TOOLS_OPTIONS_H

#include "../frontend/model.h"
#include "../ir/ir.h"

#define MAX_SETS 64

typedef struct {
    const char   *files[256];
    int           n_files;
    model_setting sets[MAX_SETS];
    char          set_text[MAX_SETS][512];
    int           n_sets;
    const char   *after;
    const char   *dump_ir;      /* --dump-ir=PASS: the IR after PASS to stderr */
    const char   *format;
    const char   *output;
    const char   *trace;        /* simulate --trace FILE: the Chrome trace-event timeline */
    int           expand;       /* dump --expand: every op, no repeated block collapsed */
    int           view_stage;   /* dump --stage N (-1: every stage)            */
    const char   *view_device;  /* dump --device NAME: that device's stage     */
    int           verbose;
    const char   *scheduler;    /* --scheduler opfence|uniform|gcma|random      */
    int           micro_batches;/* --micro-batches M (0: the default)           */
    int           port_base;    /* --port-base P (0: 29500)                     */
    int           stages;       /* --stages S (0: the scheduler's choice)       */
    const char   *compress;     /* --compress none|topk:RHO|adatopk             */
    const char   *recompute;    /* --recompute auto|on|off                      */
    const char   *cublas;       /* --cublas bundle|system (compile)             */
    const char   *run_key;      /* --run-key FILE: this run secret, not a new one (compile) */
    int           replicas;     /* --replicas R (0: the scheduler's choice)     */
    int           steps;        /* --steps N (simulate; 0: 3)                   */
    long long     seed;         /* --seed N (--scheduler random; 0: 1)          */
    ir_dtype      precision;    /* --precision fp32|bf16|fp16 (DT_F32 = 0: fp32)  */
    int           tf32;         /* --tf32                                       */
    int           no_overlap;   /* --no-overlap (simulate): the gradient buckets after the backward */
    const char   *without[64];  /* --without NAME: devices left out of the cluster (a re-plan) */
    int           n_without;
    const char   *with[64];     /* --with NAME: standbys taken in as devices (a device joined) */
    int           n_with;
    /* How the sites agree (tools/diloco.h): --sync exact|diloco and the outer step's settings. */
    int           sync;         /* RT_SYNC_EXACT (0) or RT_SYNC_DILOCO          */
    int           local_steps;  /* --local-steps H (0: the planner's)           */
    double        outer_lr;     /* --outer-lr (< 0: 0.7)                        */
    double        outer_momentum; /* --outer-momentum (< 0: 0.9)                */
    int           outer_bits;   /* --outer-codec int8|int4|f32: 8, 4, 0 (-1: 8) */
    int           outer_delay;  /* --outer-delay 0|1 (-1: 1)                    */
    int           site_batch;   /* --site-batch split (0) | each (1)            */
} options;

/* "fusionc: <fmt with arg>" and the usage on standard error; returns 2. */
int usage_error(const char *usage, const char *fmt, const char *arg);
/* Parse argv[0, argc) into o.  Returns 0, 1 for --help (printed), or 2
 * for a usage error (printed). */
int parse_options(int argc, char **argv, const char *usage, options *o);

#endif
