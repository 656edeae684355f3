/* options.h: the options of fusionc's compiler commands (check, dump,
 * stats, compile, plan, simulate): one table, fusionc_options, each option
 * once, with its parser and help; each command's usage (tools/fusionc.c)
 * lists which of them it takes, and parses and prints its help from that
 * list (runtime/cli_option.h), so what a command accepts is what its
 * --help shows.  The other commands (deploy, launch, broker, ...) have
 * tables of their own, beside their code. */
#ifndef FUSION_TOOLS_OPTIONS_H
#define FUSION_TOOLS_OPTIONS_H

#include <stdint.h>

#include "../frontend/model.h"
#include "../ir/ir.h"
#include "../passes/passes.h"
#include "../runtime/cli_option.h"

#define MAX_SETS 64

/* --set name=value, in the order given (the last one of a name wins). */
typedef struct {
    model_setting v[MAX_SETS];
    char text[MAX_SETS][512]; /* what v's names and values point into */
    char from[MAX_SETS][256]; /* what v's from points into (--hf-config's) */
    int n;
} setting_list;

/* --lora rank=R,alpha=A,targets=T,...: the spec, its targets in text. */
typedef struct {
    lora_spec spec;
    char text[512];
} lora_option;

/* A repeatable option's values: --without NAME, --with NAME. */
typedef struct {
    const char *name[64];
    int n;
} name_list;

typedef struct {
    const char *files[256];
    int n_files;
    setting_list sets;     /* --hf-config's settings first, then --set's (the last of a name wins) */
    const char *hf_config; /* --hf-config FILE: a Hugging Face config.json (hf_config.h) */
    const char *after;
    const char *dump_ir; /* --dump-ir=PASS: the IR after PASS to stderr */
    const char *format;
    const char *output;
    const char *trace;       /* simulate --trace FILE: the Chrome trace-event timeline */
    int expand;              /* dump --expand: every op, no repeated block collapsed */
    int view_stage;          /* dump --stage N (-1: every stage)            */
    const char *view_device; /* dump --device NAME: that device's stage     */
    int verbose;
    const char *scheduler;  /* --scheduler opfence|uniform|gcma|random      */
    int micro_batches;      /* --micro-batches M (0: the default)           */
    int port_base;          /* --port-base P (0: 29500)                     */
    int stages;             /* --stages S (0: the scheduler's choice)       */
    const char *compress;   /* --compress none|topk:RHO|adatopk             */
    const char *recompute;  /* --recompute auto|on|off                      */
    int shard_optimizer;    /* --shard-optimizer: ZeRO-1 over each stage's replicas */
    int no_shard_optimizer; /* --no-shard-optimizer: never, not even where the planner finds it pays */
    const char *cublas;     /* --cublas bundle|system (compile)             */
    const char *run_key;    /* --run-key FILE: this run secret, not a new one (compile) */
    int force;              /* --force: empty OUT of an earlier compile first (compile) */
    int study;              /* simulate (not an option): a plan that does not fit is kept, with a warning */
    double memory_reserve;  /* not an option: bytes the fence pass holds back on every device (placed.c) */
    const char *tokenizer;  /* --tokenizer PATH: checked and copied to OUT/tokenizer (compile) */
    int replicas;           /* --replicas R (0: the scheduler's choice)     */
    int steps;              /* --steps N (simulate; 0: 3)                   */
    int64_t seed;           /* --seed N (--scheduler random; 0: 1)          */
    ir_dtype precision;     /* --precision fp32|bf16|fp16 (DT_F32 = 0: fp32)  */
    int tf32;               /* --tf32                                       */
    int no_overlap;         /* --no-overlap (simulate): the gradient buckets after the backward */
    name_list without;      /* --without NAME: devices left out of the cluster (a re-plan) */
    name_list with;         /* --with NAME: standbys taken in as devices (a device joined) */
    name_list freeze;       /* --freeze PATTERN: parameters that do not train (passes/adapters.c) */
    lora_option lora;       /* --lora SPEC: LoRA adapters, the rest frozen (passes/adapters.c) */
    ir_dtype frozen_dtype;  /* --frozen-dtype fp32|bf16|fp16: frozen parameters' storage (0: fp32) */
    int inference;          /* --inference: an inference program (passes/decode.c) */
    int64_t prefill;        /* --prefill P: its prompt step of P tokens (passes/prefill.c), 0 none */
    /* How the sites agree (tools/diloco.h): --sync exact|diloco and the outer step's settings. */
    int sync;              /* RT_SYNC_EXACT (0) or RT_SYNC_DILOCO          */
    int local_steps;       /* --local-steps H (0: the planner's)           */
    double outer_lr;       /* --outer-lr (< 0: 0.7)                        */
    double outer_momentum; /* --outer-momentum (< 0: 0.9)                */
    int outer_bits;        /* --outer-codec int8|int4|f32: 8, 4, 0 (-1: 8) */
    int outer_delay;       /* --outer-delay 0|1 (-1: 1)                    */
    int site_batch;        /* --site-batch split (0) | each (1)            */
} options;

/* The options, each an index of fusionc_options. */
enum {
    OPT_SET,
    OPT_HF_CONFIG,
    OPT_AFTER,
    OPT_FORMAT,
    OPT_EXPAND,
    OPT_STAGE,
    OPT_DEVICE,
    OPT_OUTPUT,
    OPT_VERBOSE,
    OPT_DUMP_IR,
    OPT_PRECISION,
    OPT_TF32,
    OPT_SCHEDULER,
    OPT_SEED,
    OPT_MICRO_BATCHES,
    OPT_STAGES,
    OPT_REPLICAS,
    OPT_WITHOUT,
    OPT_WITH,
    OPT_FREEZE,
    OPT_LORA,
    OPT_FROZEN_DTYPE,
    OPT_INFERENCE,
    OPT_PREFILL,
    OPT_COMPRESS,
    OPT_RECOMPUTE,
    OPT_SHARD_OPTIMIZER,
    OPT_NO_SHARD_OPTIMIZER,
    OPT_SYNC,
    OPT_LOCAL_STEPS,
    OPT_SITE_BATCH,
    OPT_OUTER_LR,
    OPT_OUTER_MOMENTUM,
    OPT_OUTER_CODEC,
    OPT_OUTER_DELAY,
    OPT_PORT_BASE,
    OPT_RUN_KEY,
    OPT_FORCE,
    OPT_CUBLAS,
    OPT_TOKENIZER,
    OPT_STEPS,
    OPT_TRACE,
    OPT_NO_OVERLAP,
    OPT_COUNT
};
extern const cli_option fusionc_options[OPT_COUNT];

/* text ("name=value") added to s: 0; -1 when s is full, -2 when text is
 * not name=value. */
int settings_add(setting_list *s, const char *text);

/* "fusionc: <fmt with arg>" and u's usage on standard error; returns 2. */
int usage_error(const cli_usage *u, const char *fmt, const char *arg);
/* Parse argv[0, argc) into o: the options u lists, and files; with
 * --hf-config, its settings go into o->sets before --set's.  Returns 0,
 * 1 for --help (printed), 2 for a usage error (printed), or 3 for a
 * config.json that is refused (printed). */
int parse_options(int argc, char **argv, const cli_usage *u, options *o);
/* argv[*i] against `fusionc compile`'s options (fusionc.c), its value
 * checked into scratch options: cli_take's 1 (*i on its last argument),
 * 0 (none of them) or -1 (why says). */
int compile_option_take(int argc, char **argv, int *i, char *why, size_t n);
/* The exit status for parse_options' non-zero answer: 0 (help), 2 or 1. */
static inline int options_exit(int rc) { return rc == 1 ? 0 : rc == 3 ? 1 : rc; }

#endif
