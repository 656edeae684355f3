/* run_options.c: a device program's command line (run_options.h): one
 * table of its options (runtime/cli_option.h), from which both the parser
 * and --help come; every option with a value takes `--x v` or `--x=v`. */
#include "run_options.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli_option.h"
#include "rt_error.h"
#include "train_settings.h"

/* ---- the options that set more than one field (CLI_WHOLE: the parser gets
 * the whole run_options) or convert their value ---------------------------- */

/* --data FILE, repeatable: the files, concatenated. */
static int parse_data(const cli_option *opt, const char *value, void *field, char *why, size_t n)
{
    run_options *o = field;
    if (o->n_data == (int)(sizeof o->data / sizeof o->data[0])) {
        return rt_error(why, n, "too many %s options (the limit is %d)", opt->name,
                        (int)(sizeof o->data / sizeof o->data[0]));
    }
    o->data[o->n_data++] = value;
    return 0;
}

/* --val-data FILE, repeatable: the held-out files, concatenated. */
static int parse_val_data(const cli_option *opt, const char *value, void *field, char *why, size_t n)
{
    run_options *o = field;
    if (o->n_val_data == (int)(sizeof o->val_data / sizeof o->val_data[0])) {
        return rt_error(why, n, "too many %s options (the limit is %d)", opt->name,
                        (int)(sizeof o->val_data / sizeof o->val_data[0]));
    }
    o->val_data[o->n_val_data++] = value;
    return 0;
}

/* --init PATH, repeatable: the sources, a later one's over an earlier one's. */
static int parse_init(const cli_option *opt, const char *value, void *field, char *why, size_t n)
{
    run_options *o = field;
    if (o->n_init == (int)(sizeof o->init / sizeof o->init[0]))
        return rt_error(why, n, "too many %s options (the limit is %d)", opt->name,
                        (int)(sizeof o->init / sizeof o->init[0]));
    o->init[o->n_init++] = value;
    return 0;
}

/* --seed S: any unsigned 64-bit number; the program knows it was given. */
static int parse_seed(const cli_option *opt, const char *value, void *field, char *why, size_t n)
{
    run_options *o = field;
    char *end = NULL;
    unsigned long long v = strtoull(value, &end, 10);
    if (!*value || *end || value[0] == '-')
        return cli_bad_value(opt, value, why, n);
    o->seed = v;
    o->seed_given = 1;
    return 0;
}

/* --peer NAME=ADDR */
static int parse_peer(const cli_option *opt, const char *value, void *field, char *why, size_t n)
{
    run_options *o = field;
    const char *eq = strchr(value, '=');
    static char names[RT_COMM_MAX_OVERRIDES][64];
    size_t len = eq ? (size_t)(eq - value) : 0;
    if (!eq || eq == value || !eq[1] || len >= sizeof names[0])
        return cli_bad_value(opt, value, why, n);
    if (o->comm.n_overrides == RT_COMM_MAX_OVERRIDES) {
        return rt_error(why, n, "too many %s options (the limit is %d)", opt->name, RT_COMM_MAX_OVERRIDES);
    }
    memcpy(names[o->comm.n_overrides], value, len);
    names[o->comm.n_overrides][len] = '\0';
    o->comm.peer_name[o->comm.n_overrides] = names[o->comm.n_overrides];
    o->comm.peer_address[o->comm.n_overrides++] = eq + 1;
    return 0;
}

/* --peer-timeout S, --connect-timeout S: seconds, kept as milliseconds. */
static int parse_seconds_ms(const cli_option *opt, const char *value, void *field, char *why, size_t n)
{
    double seconds;
    if (cli_double(opt, value, &seconds, why, n))
        return -1;
    *(int *)field = (int)(seconds * 1000);
    return 0;
}

static int parse_save_dtype(const cli_option *opt, const char *value, void *field, char *why, size_t n)
{
    static const char *const names[] = { "fp32", "bf16", "fp16" };
    static const st_dtype dtypes[] = { ST_F32, ST_BF16, ST_F16 };
    for (int k = 0; k < 3; k++)
        if (strcmp(value, names[k]) == 0) {
            *(st_dtype *)field = dtypes[k];
            return 0;
        }
    return cli_bad_value(opt, value, why, n);
}

/* --inject-crash-in-save DEVICE:K */
static int parse_crash(const cli_option *opt, const char *value, void *field, char *why, size_t n)
{
    if (!strchr(value, ':'))
        return cli_bad_value(opt, value, why, n);
    *(const char **)field = value;
    return 0;
}

/* DEVICE:K:X (a test's fault, from step K >= 1): 0, or -1 when value has
 * another form. */
static int device_step_value(const char *value, char *device, size_t n, int64_t *k, double *x)
{
    char name[128];
    long long step;
    int end = 0;
    if (sscanf(value, "%127[^:]:%lld:%lf%n", name, &step, x, &end) != 3 || value[end] || step < 1)
        return -1;
    snprintf(device, n, "%s", name);
    *k = step;
    return 0;
}

/* --inject-slowdown DEVICE:K:F */
static int parse_slowdown(const cli_option *opt, const char *value, void *field, char *why, size_t n)
{
    run_options *o = field;
    double f;
    if (device_step_value(value, o->slow_device, sizeof o->slow_device, &o->slow_step, &f) || !(f >= 1) || f > 1000)
        return cli_bad_value(opt, value, why, n);
    o->slow_factor = f;
    return 0;
}

/* --inject-link-mbps DEVICE:K:M */
static int parse_link_mbps(const cli_option *opt, const char *value, void *field, char *why, size_t n)
{
    run_options *o = field;
    double mbps;
    if (device_step_value(value, o->link_device, sizeof o->link_device, &o->link_step, &mbps) || !(mbps >= 0.001) ||
        mbps > 1e6)
        return cli_bad_value(opt, value, why, n);
    o->link_mbps = mbps;
    return 0;
}

static const char *const lr_schedules[] = { "constant", "cosine", "linear", NULL };
static const int lr_schedule_values[] = { RT_LR_CONSTANT, RT_LR_COSINE, RT_LR_LINEAR };

static const char *const data_formats[] = { "auto", "shard", "text", NULL };
static const int data_format_values[] = { RT_DATA_AUTO, RT_DATA_SHARD, RT_DATA_TEXT };
static const char *const augments[] = { "none", "standard", NULL };
static const int augment_values[] = { 0, 1 };

/* ---- the table -------------------------------------------------------------- */

#define SECONDS     .lo = 0, .hi = 86400, .open = CLI_OPEN_LO | CLI_OPEN_HI, .expects = "a number of seconds in (0, 86400)"
#define COUNT(what) .lo = 1, .hi = (double)INT64_MAX, .expects = what

/* clang-format off */
static const cli_option device_options[] = {
    { .name = "--data", .metavar = "FILE", CLI_WHOLE(parse_data),
      .help = "training data: text (bytes) or llm.c token shards (version 1: uint16 ids,\n"
              "version 2: uint32); repeat to concatenate.  Checked when opened: a shard's\n"
              "header against its size, every id against the model's vocabulary.  An image\n"
              "classifier reads an image dataset: MNIST's IDX files (gzipped or not), CIFAR's\n"
              "binary batches or an ImageFolder (class folders of PNG or JPEG files); a\n"
              "folder of both splits gives its training split" },
    { .name = "--data-format", .metavar = "F", CLI_CHOICE_INT(run_options, data_format),
      .choices = data_formats, .values = data_format_values, .expects = "auto, shard or text",
      .help = "auto (default: a file with the shard magic is a shard; any other is text,\n"
              "refused if its first 1024 bytes hold a NUL, as a damaged shard does),\n"
              "shard (the magic is required) or text (any file, as bytes)" },
    { .name = "--augment", .metavar = "A", CLI_CHOICE_INT(run_options, augment), .choices = augments,
      .values = augment_values, .expects = "none or standard",
      .help = "image data: none (default) or standard (a random crop of the image padded by\n"
              "4 pixels, and a horizontal flip with probability 1/2)" },
    { .name = "--val-data", .metavar = "FILE", CLI_WHOLE(parse_val_data),
      .help = "held-out data (read as --data is; repeat to concatenate): with --val-every,\n"
              "the loss on fixed windows of it, forward only, the training untouched" },
    { .name = "--val-every", .metavar = "N", CLI_INT64(run_options, val_every), COUNT("a positive number of steps"),
      .help = "with --val-data: validate after every N steps and after the last; the mean\n"
              "loss goes to the step's line and the log (\"val_loss\")" },
    { .name = "--sample-every", .metavar = "N", CLI_INT64(run_options, sample_every),
      COUNT("a positive number of steps"),
      .help = "after every N steps, print a sample: the model's continuation of the data's\n"
              "first token, drawn at temperature 1 (bytes for a 256-token vocabulary, else ids;\n"
              "one CPU device)" },
    { .name = "--sample-tokens", .metavar = "K", CLI_INT64(run_options, sample_tokens), .lo = 2, .hi = 1e6,
      .expects = "a count in [2, 1e6]", .help = "the sample's tokens (default 32; at most the sequence length)" },
    { .name = "--val-batches", .metavar = "K", CLI_INT64(run_options, val_batches), .lo = 1, .hi = 1000000,
      .expects = "a count in [1, 1000000]",
      .help = "batches of the training batch's shape in the validation set (default 8):\n"
              "drawn once from a fixed seed, so every validation sees the same windows" },
    { .name = "--steps", .metavar = "N", CLI_INT64(run_options, steps), .lo = 0, .hi = (double)INT64_MAX,
      .expects = "a count of steps, 0 or more", .help = "training steps (default 100)" },
    { .name = "--seed", .metavar = "S", CLI_WHOLE(parse_seed), .expects = "an unsigned integer",
      .help = "seeds the parameters and the batches (default 1)" },
    { .name = NULL, .help = "training settings (default: the model's, as compiled; every device must get the same):" },
    { .name = "--lr", .metavar = "X", CLI_DOUBLE(run_options, train.lr), .lo = 0, .hi = 1e6, .open = CLI_OPEN_LO,
      .expects = "a learning rate above 0", .help = "the peak learning rate" },
    { .name = "--min-lr", .metavar = "X", CLI_DOUBLE(run_options, train.min_lr), .lo = 0, .hi = 1e6,
      .expects = "a learning rate, 0 or more", .help = "where a cosine or linear schedule ends (at most --lr)" },
    { .name = "--warmup", .metavar = "N", CLI_INT64(run_options, train.warmup), .lo = 0, .hi = (double)INT64_MAX,
      .expects = "a count of steps, 0 or more", .help = "steps of linear warm-up from 0 to --lr" },
    { .name = "--lr-schedule", .metavar = "S", CLI_CHOICE_INT(run_options, train.schedule),
      .choices = lr_schedules, .values = lr_schedule_values, .expects = "constant, cosine or linear",
      .help = "constant, cosine or linear (from --lr down to --min-lr after the warm-up;\n"
              "default: cosine when the model declares `steps`, else constant)" },
    { .name = "--schedule-steps", .metavar = "N", CLI_INT64(run_options, train.schedule_steps),
      COUNT("a positive number of steps"),
      .help = "the schedule's length, warm-up included (default: the model's `steps`,\n"
              "else this run's --steps)" },
    { .name = "--weight-decay", .metavar = "X", CLI_DOUBLE(run_options, train.weight_decay), .lo = 0, .hi = 1e6,
      .expects = "a decay, 0 or more", .help = "AdamW's decoupled weight decay, on matrices and kernels only" },
    { .name = "--grad-clip", .metavar = "X", CLI_DOUBLE(run_options, train.grad_clip), .lo = 0, .hi = 1e30,
      .expects = "a norm, 0 or more", .help = "clip the global gradient norm to X (0: off)" },
    { .name = NULL, .help = "output:" },
    { .name = "--log", .metavar = "FILE", CLI_STRING(run_options, log),
      .help = "also write one JSON object per step to FILE: loss, lr, grad_norm, tokens, time,\n"
              "tokens/s, ms (train.jsonl: train.<device>.jsonl on several devices); with --resume, added\n"
              "to the end of FILE" },
    { .name = "--trace", .metavar = "FILE", CLI_STRING(run_options, trace),
      .help = "write the run's timeline (each op, message, micro-batch, update, checkpoint) in\n"
              "the Chrome trace-event format, for Perfetto (trace.json: trace.<device>.json on several devices;\n"
              "launch-local.sh merges them into FILE)" },
    { .name = "--threads", .metavar = "N", CLI_INT(run_options, threads), .lo = 1, .hi = 1 << 20,
      .expects = "a positive count", .help = "CPU threads (default: the device's, from the cluster file)" },
    { .name = "--save", .metavar = "DIR", CLI_STRING(run_options, save),
      .help = "write a checkpoint to DIR/step-N/ at the end (and every --save-every K steps);\n"
              "complete once its MANIFEST is written, after every device's part is durable" },
    { .name = "--save-every", .metavar = "K", CLI_INT64(run_options, save_every), COUNT("a positive number of steps"),
      .help = "with --save: a checkpoint every K steps" },
    { .name = "--keep", .metavar = "K", CLI_INT64(run_options, keep), .lo = 1, .hi = 999999,
      .expects = "a count in [1, 999999]",
      .help = "keep the K newest complete checkpoints in DIR (default 3; never fewer than 1)" },
    { .name = "--resume", .metavar = "DIR", CLI_STRING(run_options, resume),
      .help = "continue from DIR's newest complete checkpoint that verifies (its step and\n"
              "seed; an older one, said, when the newest does not) up to --steps; DIR may\n"
              "also be one step-N folder" },
    { .name = "--save-dtype", .metavar = "T", CLI_CUSTOM(parse_save_dtype, st_dtype, run_options, save_dtype),
      .expects = "fp32, bf16 or fp16",
      .help = "fp32 (default), bf16 or fp16: the checkpoint's parameters in T (half the\n"
              "size; AdamW's moments stay fp32; a run resumed from it starts from the\n"
              "rounded weights, so it is no longer bit for bit)" },
    { .name = "--init", .metavar = "PATH", CLI_WHOLE(parse_init),
      .help = "initial parameters, by name, from a safetensors file, a Hugging Face\n"
              "model folder (model.safetensors, or model.safetensors.index.json and\n"
              "its shards) or a fusion checkpoint (--save's folder); F32, BF16 or F16.\n"
              "Repeatable (a base model, then adapters): a later one's over an earlier one's" },
    { .name = "--inputs", .metavar = "FILE", CLI_STRING(run_options, inputs),
      .help = "the model's inputs, by name, from a safetensors file (the same every step)" },
    { .name = "--dump-grads", .metavar = "FILE", CLI_STRING(run_options, dump_grads),
      .help = "write the first step's inputs, loss and every parameter's gradient\n"
              "(g.safetensors: g.<device>.safetensors for each device of a program of several)" },
    { .name = "--emulate-devices", CLI_FLAG(run_options, emulate_devices),
      .help = "make every op take at least as long as the cluster file's peaks and\n"
              "memory bandwidth say (the workload estimator's time; a CUDA device\n"
              "synchronises after each op to time it)" },
    { .name = NULL, .help = "fp16 programs (dynamic loss scaling):" },
    { .name = "--loss-scale", .metavar = "S", CLI_DOUBLE(run_options, loss_scale), .lo = 1, .hi = 1e30,
      .expects = "a number in [1, 1e30]", .help = "the first loss scale (default 65536)" },
    { .name = "--loss-scale-window", .metavar = "N", CLI_INT64(run_options, loss_scale_window),
      COUNT("a positive number of steps"), .help = "good steps in a row before it doubles (default 2000)" },
    { .name = "--inject-overflow", .metavar = "K", CLI_INT64(run_options, inject_overflow),
      COUNT("a positive step number"), .help = "make step K's gradients overflow (to test the scaler; every device)" },
    { .name = NULL, .help = "several devices:" },
    { .name = "--emulate-links", CLI_FLAG(run_options, comm.emulate_links),
      .help = "shape every link to the cluster file's bandwidth and latency" },
    { .name = "--adapt-density", CLI_FLAG(run_options, comm.adapt_density),
      .help = "AdaTopK: re-measure each compressed link between steps and adapt its density" },
    { .name = "--no-overlap", CLI_FLAG(run_options, no_overlap),
      .help = "average the gradient buckets after the backward, not while it runs\n"
              "(the same bits, later: to measure what the overlap saves)" },
    { .name = "--peer", .metavar = "NAME=ADDR", CLI_WHOLE(parse_peer), .expects = "NAME=ADDR",
      .help = "device NAME is at ADDR (moved or replaced), not where the cluster file says" },
    { .name = "--port-base", .metavar = "P", CLI_INT(run_options, comm.port_base), .lo = 1, .hi = 64999,
      .expects = "a port in [1, 65000)",
      .help = "link i listens on port P + i (all devices must agree; default: compiled in)" },
    { .name = "--peer-timeout", .metavar = "S", CLI_CUSTOM(parse_seconds_ms, int, run_options, comm.timeout_ms),
      SECONDS, .help = "a peer silent for S seconds is dead (default 10)" },
    { .name = "--connect-timeout", .metavar = "S",
      CLI_CUSTOM(parse_seconds_ms, int, run_options, comm.connect_timeout_ms), SECONDS,
      .help = "every peer must be up within S seconds of the start (default 60)" },
    { .name = "--broker", .metavar = "URL", CLI_STRING(run_options, broker),
      .help = "report to the run's broker (fusionc broker: tcp://HOST:PORT): register, steps,\n"
              "heartbeats, and the checkpoints' parts (the broker writes the MANIFEST)" },
    { .name = "--epoch", .metavar = "E", CLI_INT64(run_options, comm.epoch), .lo = 0, .hi = (double)INT64_MAX,
      .expects = "an epoch number, 0 or more", .help = "the run's epoch (the broker's): peers and the broker refuse another" },
    { .name = "--key", .metavar = "FILE", CLI_STRING(run_options, key),
      .help = "the run secret (default: run.key beside this program; mode 0600): every\n"
              "link and the broker are sealed with it, and no program starts without it" },
    { .name = "--standby", .metavar = "NAME", CLI_STRING(run_options, standby),
      .help = "with --broker: wait as the cluster's standby NAME until the broker needs\n"
              "it no more (a standby host's agent: the broker then starts a program here)" },
    { .name = "--inject-crash-in-save", .metavar = "DEVICE:K",
      CLI_CUSTOM(parse_crash, const char *, run_options, crash_in_save), .expects = "DEVICE:K",
      .help = "in epoch 1, DEVICE dies (SIGKILL) half-way through writing\n"
              "its part of step K's checkpoint (to test that the step before stays whole)" },
    { .name = "--inject-slowdown", .metavar = "DEVICE:K:F", CLI_WHOLE(parse_slowdown),
      .expects = "DEVICE:K:F (a step K >= 1, a factor F in [1, 1000])",
      .help = "with --emulate-devices: from step K, DEVICE runs F times slower than the\n"
              "cluster file declares it (a straggler; a plan that knows it slower, its\n"
              "slowdown, paces it as that)" },
    { .name = "--inject-link-mbps", .metavar = "DEVICE:K:M", CLI_WHOLE(parse_link_mbps),
      .expects = "DEVICE:K:M (a step K >= 1, M megabits/s in [0.001, 1e6])",
      .help = "with --emulate-links: from step K, the links to and from DEVICE carry M\n"
              "megabits/s, whatever the cluster file declares (a link that drifts)" },
};

static const cli_usage usage = {
    NULL, device_options, NULL, sizeof device_options / sizeof device_options[0], 22,
    "SIGINT or SIGTERM: every device finishes the same step, saves it (with --save) and exits 130\n"
    "or 143; a second signal stops at once.\n"
};
/* clang-format on */

/* The usage, its first line naming this program as it was started. */
static void print_usage(FILE *f, const char *program)
{
    fprintf(f, "usage: %s --data FILE [--data FILE]... [--steps N] [--seed S] [--log FILE] [--threads N]\n", program);
    cli_usage_print(f, &usage);
}

int run_options_parse(int argc, char **argv, run_options *o)
{
    int rc = cli_parse_program(&usage, argc, argv, o, print_usage);
    if (rc)
        return rc;
    if ((o->n_val_data > 0) != (o->val_every > 0)) {
        fprintf(stderr, "%s: %s\n\n", argv[0],
                o->n_val_data > 0 ? "--val-data FILE needs --val-every N (how often to validate)"
                                  : "--val-every N needs --val-data FILE (what to validate on)");
        print_usage(stderr, argv[0]);
        return 2;
    }
    if (o->n_val_data > 0 && o->inputs) {
        fprintf(stderr, "%s: --val-data validates a model fed by --data, not by --inputs\n\n", argv[0]);
        print_usage(stderr, argv[0]);
        return 2;
    }
    if (o->n_data == 0 && !o->inputs && !o->standby) {
        fprintf(stderr, "%s: --data FILE (or --inputs FILE) is required\n\n", argv[0]);
        print_usage(stderr, argv[0]);
        return 2;
    }
    return 0;
}
