/* run_options.c: a device program's command line (run_options.h). */
#include "run_options.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char usage[] =
    "usage: %s --data FILE [--data FILE]... [--steps N] [--seed S] [--log FILE] [--threads N]\n"
    "  --data FILE    training data: text (bytes) or llm.c token shards; repeat to concatenate\n"
    "  --steps N      training steps (default 100)\n"
    "  --seed S       seeds the parameters and the batches (default 1)\n"
    "  --log FILE     also write one JSON object per step to FILE (FILE.<device> on several devices)\n"
    "  --trace FILE   write the run's timeline (each op, message, micro-batch, update, checkpoint) in\n"
    "                 the Chrome trace-event format, for Perfetto (FILE.<device> on several devices;\n"
    "                 launch-local.sh merges them into FILE)\n"
    "  --threads N    CPU threads (default: the device's, from the cluster file)\n"
    "  --save DIR     write a checkpoint to DIR/step-N/ at the end (and every --save-every K steps);\n"
    "                 complete once its MANIFEST is written, after every device's part is durable\n"
    "  --keep K       keep the K newest complete checkpoints in DIR (default 3; never fewer than 1)\n"
    "  --resume DIR   continue from DIR's newest complete checkpoint that verifies (its step and\n"
    "                 seed; an older one, said, when the newest does not) up to --steps; DIR may\n"
    "                 also be one step-N folder\n"
    "  --save-dtype T fp32 (default), bf16 or fp16: the checkpoint's parameters in T (half the\n"
    "                 size; AdamW's moments stay fp32; a run resumed from it starts from the\n"
    "                 rounded weights, so it is no longer bit for bit)\n"
    "  --init FILE    initial parameters from a safetensors file, by name\n"
    "  --inputs FILE  the model's inputs, by name, from a safetensors file (the same every step)\n"
    "  --dump-grads FILE  write the first step's inputs, loss and every parameter's gradient\n"
    "                 (FILE.<device> for each device of a program of several)\n"
    "fp16 programs (dynamic loss scaling):\n"
    "  --loss-scale S        the first loss scale (default 65536)\n"
    "  --loss-scale-window N good steps in a row before it doubles (default 2000)\n"
    "  --inject-overflow K   make step K's gradients overflow (to test the scaler; every device)\n"
    "  --emulate-devices make every op take at least as long as the cluster file's peaks and\n"
    "                 memory bandwidth say (the workload estimator's time; a CUDA device\n"
    "                 synchronises after each op to time it)\n"
    "several devices:\n"
    "  --emulate-links     shape every link to the cluster file's bandwidth and latency\n"
    "  --adapt-density     AdaTopK: re-measure each compressed link between steps and adapt its density\n"
    "  --no-overlap        average the gradient buckets after the backward, not while it runs\n"
    "                      (the same bits, later: to measure what the overlap saves)\n"
    "  --peer NAME=ADDR    device NAME is at ADDR (moved or replaced), not where the cluster file says\n"
    "  --port-base P       link i listens on port P + i (all devices must agree; default: compiled in)\n"
    "  --peer-timeout S    a peer silent for S seconds is dead (default 10)\n"
    "  --broker URL        report to the run's broker (fusionc broker: tcp://HOST:PORT): register, steps,\n"
    "                      heartbeats, and the checkpoints' parts (the broker writes the MANIFEST)\n"
    "  --epoch E           the run's epoch (the broker's): peers and the broker refuse another\n"
    "  --key FILE          the run secret (default: run.key beside this program; mode 0600): every\n"
    "                      link and the broker are sealed with it, and no program starts without it\n"
    "  --standby NAME      with --broker: wait as the cluster's standby NAME until the broker needs\n"
    "                      it no more (a standby host's agent: the broker then starts a program here)\n"
    "  --inject-crash-in-save DEVICE:K  in epoch 1, DEVICE dies (SIGKILL) half-way through writing\n"
    "                      its part of step K's checkpoint (to test that the step before stays whole)\n"
    "  --connect-timeout S every peer must be up within S seconds of the start (default 60)\n"
    "SIGINT or SIGTERM: every device finishes the same step, saves it (with --save) and exits 130\n"
    "or 143; a second signal stops at once.\n";

/* --peer NAME=ADDR */
static int add_peer_override(run_options *o, const char *v)
{
    const char *eq = strchr(v, '=');
    if (!eq || eq == v || !eq[1] || o->comm.n_overrides == RT_COMM_MAX_OVERRIDES)
        return -1;
    static char names[RT_COMM_MAX_OVERRIDES][64];
    size_t n = (size_t)(eq - v);
    if (n >= sizeof names[0])
        return -1;
    memcpy(names[o->comm.n_overrides], v, n);
    names[o->comm.n_overrides][n] = '\0';
    o->comm.peer_name[o->comm.n_overrides] = names[o->comm.n_overrides];
    o->comm.peer_address[o->comm.n_overrides++] = eq + 1;
    return 0;
}

/* 0, 1 after --help, 2 on a usage error (printed). */
int run_options_parse(int argc, char **argv, run_options *o)
{
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        char *end = NULL;
        if (strcmp(a, "--help") == 0) {
            printf(usage, argv[0]);
            return 1;
        }
        if (strcmp(a, "--emulate-links") == 0) {
            o->comm.emulate_links = 1;
            continue;
        }
        if (strcmp(a, "--adapt-density") == 0) {
            o->comm.adapt_density = 1;
            continue;
        }
        if (strcmp(a, "--emulate-devices") == 0) {
            o->emulate_devices = 1;
            continue;
        }
        if (strcmp(a, "--no-overlap") == 0) {
            o->no_overlap = 1;
            continue;
        }
        if (!v)
            goto bad;
        long port = 0;
        double seconds = 0;
        if (strcmp(a, "--data") == 0 && o->n_data < 64)
            o->data[o->n_data++] = v;
        else if (strcmp(a, "--log") == 0)
            o->log = v;
        else if (strcmp(a, "--trace") == 0)
            o->trace = v;
        else if (strcmp(a, "--save") == 0)
            o->save = v;
        else if (strcmp(a, "--resume") == 0)
            o->resume = v;
        else if (strcmp(a, "--init") == 0)
            o->init = v;
        else if (strcmp(a, "--dump-grads") == 0)
            o->dump_grads = v;
        else if (strcmp(a, "--inputs") == 0)
            o->inputs = v;
        else if (strcmp(a, "--broker") == 0)
            o->broker = v;
        else if (strcmp(a, "--standby") == 0)
            o->standby = v;
        else if (strcmp(a, "--key") == 0)
            o->key = v;
        else if (strcmp(a, "--inject-crash-in-save") == 0 && strchr(v, ':'))
            o->crash_in_save = v;
        else if (strcmp(a, "--epoch") == 0 && (o->comm.epoch = strtoll(v, &end, 10)) >= 0 && *end == '\0')
            ;
        else if (strcmp(a, "--peer") == 0 && add_peer_override(o, v) == 0)
            ;
        else if (strcmp(a, "--port-base") == 0 && (port = strtol(v, &end, 10)) > 0 && port < 65000 && *end == '\0')
            o->comm.port_base = (int32_t)port;
        else if (strcmp(a, "--peer-timeout") == 0 && (seconds = strtod(v, &end)) > 0 && seconds < 86400 && *end == '\0')
            o->comm.timeout_ms = (int)(seconds * 1000);
        else if (strcmp(a, "--connect-timeout") == 0 && (seconds = strtod(v, &end)) > 0 && seconds < 86400 &&
                 *end == '\0')
            o->comm.connect_timeout_ms = (int)(seconds * 1000);
        else if (strcmp(a, "--save-every") == 0 && (o->save_every = strtoll(v, &end, 10)) > 0 && *end == '\0')
            ;
        else if (strcmp(a, "--keep") == 0 && (o->keep = strtoll(v, &end, 10)) > 0 && o->keep < 1000000 && *end == '\0')
            ;
        else if (strcmp(a, "--steps") == 0 && (o->steps = strtoll(v, &end, 10)) >= 0 && *end == '\0')
            ;
        else if (strcmp(a, "--seed") == 0 && (o->seed = strtoull(v, &end, 10), *end == '\0' && v[0] != '-'))
            o->seed_given = 1;
        else if (strcmp(a, "--threads") == 0 && (o->threads = (int)strtol(v, &end, 10)) > 0 && *end == '\0')
            ;
        else if (strcmp(a, "--save-dtype") == 0 && (strcmp(v, "fp32") == 0 || strcmp(v, "bf16") == 0 ||
                                                    strcmp(v, "fp16") == 0))
            o->save_dtype = v[0] == 'b' ? ST_BF16 : v[2] == '1' ? ST_F16 : ST_F32;
        else if (strcmp(a, "--loss-scale") == 0 && (o->loss_scale = strtod(v, &end)) >= 1 &&
                 o->loss_scale <= 1e30 && *end == '\0')
            ;
        else if (strcmp(a, "--loss-scale-window") == 0 && (o->loss_scale_window = strtoll(v, &end, 10)) > 0 &&
                 *end == '\0')
            ;
        else if (strcmp(a, "--inject-overflow") == 0 && (o->inject_overflow = strtoll(v, &end, 10)) > 0 &&
                 *end == '\0')
            ;
        else
            goto bad;
        i++;
        continue;
    bad:
        fprintf(stderr, "%s: bad option or value: %s %s\n\n", argv[0], a, v ? v : "(missing)");
        fprintf(stderr, usage, argv[0]);
        return 2;
    }
    if (o->n_data == 0 && !o->inputs && !o->standby) {
        fprintf(stderr, "%s: --data FILE (or --inputs FILE) is required\n\n", argv[0]);
        fprintf(stderr, usage, argv[0]);
        return 2;
    }
    return 0;
}
