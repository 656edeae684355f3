/* options.c: fusionc's shared options (options.h). */
#include "options.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../passes/passes.h"
#include "../runtime/program.h"

int usage_error(const char *usage, const char *fmt, const char *arg)
{
    fprintf(stderr, "fusionc: ");
    fprintf(stderr, fmt, arg);
    fprintf(stderr, "\n\n%s", usage);
    return 2;
}

/* Parse the options shared by all commands.  Returns 0, 1 for --help
 * (printed), or 2 for a usage error (printed). */
int parse_options(int argc, char **argv, const char *usage, options *o)
{
    memset(o, 0, sizeof *o);
    o->outer_lr = o->outer_momentum = -1.0;
    o->outer_bits = o->outer_delay = -1;
    o->view_stage = -1;
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i];
        const char *value = NULL;
        if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
            fputs(usage, stdout);
            return 1;
        }
        if (strcmp(a, "--verbose") == 0)
            a = "-v";
        if (strcmp(a, "--expand") == 0) {
            o->expand = 1;
            continue;
        }
        if (strcmp(a, "-v") == 0 || strcmp(a, "--tf32") == 0 || strcmp(a, "--no-overlap") == 0) {
            *(a[1] == 'v' ? &o->verbose : a[2] == 't' ? &o->tf32 : &o->no_overlap) = 1;
            continue;
        }
        int takes_value = strcmp(a, "--set") == 0 || strcmp(a, "--after") == 0 ||
                          strcmp(a, "--format") == 0 || strcmp(a, "--dump-ir") == 0 || strcmp(a, "-o") == 0 ||
                          strcmp(a, "--scheduler") == 0 || strcmp(a, "--micro-batches") == 0 ||
                          strcmp(a, "--port-base") == 0 || strcmp(a, "--stages") == 0 || strcmp(a, "--replicas") == 0 ||
                          strcmp(a, "--compress") == 0 || strcmp(a, "--steps") == 0 || strcmp(a, "--seed") == 0 ||
                          strcmp(a, "--recompute") == 0 || strcmp(a, "--cublas") == 0 ||
                          strcmp(a, "--precision") == 0 || strcmp(a, "--sync") == 0 ||
                          strcmp(a, "--local-steps") == 0 || strcmp(a, "--outer-lr") == 0 ||
                          strcmp(a, "--outer-momentum") == 0 || strcmp(a, "--outer-codec") == 0 ||
                          strcmp(a, "--outer-delay") == 0 || strcmp(a, "--site-batch") == 0 ||
                          strcmp(a, "--without") == 0 || strcmp(a, "--with") == 0 || strcmp(a, "--run-key") == 0 ||
                          strcmp(a, "--trace") == 0 || strcmp(a, "--stage") == 0 || strcmp(a, "--device") == 0;
        const char *eq = strchr(a, '=');
        if (!takes_value && strncmp(a, "--", 2) == 0 && eq) {
            /* --after=shapes style */
            static char key[64];
            size_t n = (size_t)(eq - a);
            if (n >= sizeof key)
                return usage_error(usage, "unknown option '%s'", a);
            memcpy(key, a, n);
            key[n] = '\0';
            if (strcmp(key, "--set") && strcmp(key, "--after") && strcmp(key, "--format") && strcmp(key, "--dump-ir") &&
                strcmp(key, "--scheduler") && strcmp(key, "--micro-batches") && strcmp(key, "--port-base") &&
                strcmp(key, "--stages") && strcmp(key, "--replicas") && strcmp(key, "--compress") &&
                strcmp(key, "--steps") && strcmp(key, "--seed") && strcmp(key, "--recompute") &&
                strcmp(key, "--cublas") && strcmp(key, "--precision") && strcmp(key, "--sync") &&
                strcmp(key, "--local-steps") && strcmp(key, "--outer-lr") && strcmp(key, "--outer-momentum") &&
                strcmp(key, "--outer-codec") && strcmp(key, "--outer-delay") && strcmp(key, "--site-batch") &&
                strcmp(key, "--trace") && strcmp(key, "--stage") && strcmp(key, "--device"))
                return usage_error(usage, "unknown option '%s'", a);
            a = key;
            value = eq + 1;
            takes_value = 1;
        } else if (takes_value) {
            if (i + 1 >= argc)
                return usage_error(usage, "option '%s' needs a value", a);
            value = argv[++i];
        }
        if (!takes_value) {
            if (a[0] == '-' && a[1] != '\0')
                return usage_error(usage, "unknown option '%s'", a);
            if (o->n_files == (int)(sizeof o->files / sizeof o->files[0]))
                return usage_error(usage, "too many files (the limit is %s)", "256");
            o->files[o->n_files++] = a;
        } else if (strcmp(a, "--set") == 0) {
            if (o->n_sets == MAX_SETS)
                return usage_error(usage, "too many --set options (the limit is %s)", "64");
            if (model_setting_parse(value, o->set_text[o->n_sets], sizeof o->set_text[0], &o->sets[o->n_sets]))
                return usage_error(usage, "--set expects name=value, found '%s'", value);
            o->n_sets++;
        } else if (strcmp(a, "--after") == 0 || strcmp(a, "--dump-ir") == 0) {
            if (!pass_name_known(value)) {
                fprintf(stderr, "fusionc: %s %s: unknown pass (the passes: %s)\n", a, value, pass_names());
                return 2;
            }
            if (a[2] == 'a')
                o->after = value;
            else
                o->dump_ir = value;
        } else if (strcmp(a, "--trace") == 0) {
            o->trace = value;
        } else if (strcmp(a, "--device") == 0) {
            o->view_device = value;
        } else if (strcmp(a, "--stage") == 0) {
            char *end = NULL;
            long v = strtol(value, &end, 10);
            if (!end || *end || v < 0 || v >= 1024)
                return usage_error(usage, "--stage expects a stage number in [0, 1024), found '%s'", value);
            o->view_stage = (int)v;
        } else if (strcmp(a, "--without") == 0 || strcmp(a, "--with") == 0) {
            int out = a[6] == 'o';
            if ((out ? o->n_without : o->n_with) == 64)
                return usage_error(usage, "too many --without or --with options (the limit is %s)", "64");
            if (out)
                o->without[o->n_without++] = value;
            else
                o->with[o->n_with++] = value;
        } else if (strcmp(a, "--scheduler") == 0) {
            if (strcmp(value, "opfence") && strcmp(value, "uniform") && strcmp(value, "megatron") &&
                strcmp(value, "gcma") && strcmp(value, "random"))
                return usage_error(usage, "--scheduler expects opfence, uniform, megatron, gcma or random, found '%s'",
                                   value);
            o->scheduler = value;
        } else if (strcmp(a, "--micro-batches") == 0 || strcmp(a, "--port-base") == 0 ||
                   strcmp(a, "--stages") == 0 || strcmp(a, "--replicas") == 0 || strcmp(a, "--steps") == 0) {
            char *end = NULL;
            long v = strtol(value, &end, 10);
            int port = strcmp(a, "--port-base") == 0;
            if (!end || *end || v < 1 || v > (port ? 65000 : 4096))
                return usage_error(usage, port ? "--port-base expects a port in [1, 65000], found '%s'"
                                               : "expected a count in [1, 4096], found '%s'", value);
            if (port)
                o->port_base = (int)v;
            else if (strcmp(a, "--stages") == 0)
                o->stages = (int)v;
            else if (strcmp(a, "--replicas") == 0)
                o->replicas = (int)v;
            else if (strcmp(a, "--steps") == 0)
                o->steps = (int)v;
            else
                o->micro_batches = (int)v;
        } else if (strcmp(a, "--seed") == 0) {
            char *end = NULL;
            long long v = strtoll(value, &end, 10);
            if (!end || *end || v < 1)
                return usage_error(usage, "--seed expects a positive integer, found '%s'", value);
            o->seed = v;
        } else if (strcmp(a, "--compress") == 0) {
            char *end = NULL;
            double rho = strncmp(value, "topk:", 5) == 0 ? strtod(value + 5, &end) : 0.0;
            if (strcmp(value, "none") && strcmp(value, "adatopk") && !(end && *end == '\0' && rho > 0 && rho <= 1))
                return usage_error(usage, "--compress expects none, topk:RHO (0 < RHO <= 1) or adatopk, found '%s'",
                                   value);
            o->compress = value;
        } else if (strcmp(a, "--recompute") == 0) {
            if (schedule_recompute_mode(value) < 0)
                return usage_error(usage, "--recompute expects auto, on or off, found '%s'", value);
            o->recompute = value;
        } else if (strcmp(a, "--precision") == 0) {
            static const char *const names[] = { [DT_F32] = "fp32", [DT_BF16] = "bf16", [DT_F16] = "fp16" };
            int found = 0;
            for (int k = 0; k < (int)(sizeof names / sizeof names[0]) && !found; k++)
                if (names[k] && strcmp(value, names[k]) == 0) {
                    o->precision = (ir_dtype)k;
                    found = 1;
                }
            if (!found)
                return usage_error(usage, "--precision expects fp32, bf16 or fp16, found '%s'", value);
        } else if (strcmp(a, "--sync") == 0) {
            if (strcmp(value, "exact") && strcmp(value, "diloco"))
                return usage_error(usage, "--sync expects exact or diloco, found '%s'", value);
            o->sync = strcmp(value, "diloco") == 0 ? RT_SYNC_DILOCO : RT_SYNC_EXACT;
        } else if (strcmp(a, "--local-steps") == 0 || strcmp(a, "--outer-delay") == 0) {
            char *end = NULL;
            long v = strtol(value, &end, 10);
            int delay = strcmp(a, "--outer-delay") == 0;
            if (!end || *end || v < (delay ? 0 : 1) || v > (delay ? 1 : 1000000))
                return usage_error(usage, delay ? "--outer-delay expects 0 or 1, found '%s'"
                                                : "--local-steps expects a count of inner steps in [1, 1000000], "
                                                  "found '%s'", value);
            *(delay ? &o->outer_delay : &o->local_steps) = (int)v;
        } else if (strcmp(a, "--outer-lr") == 0 || strcmp(a, "--outer-momentum") == 0) {
            char *end = NULL;
            double v = strtod(value, &end);
            int lr = strcmp(a, "--outer-lr") == 0;
            if (!end || *end || !(lr ? v > 0 && v <= 10 : v >= 0 && v < 1))
                return usage_error(usage, lr ? "--outer-lr expects a rate in (0, 10], found '%s'"
                                             : "--outer-momentum expects a value in [0, 1), found '%s'", value);
            *(lr ? &o->outer_lr : &o->outer_momentum) = v;
        } else if (strcmp(a, "--site-batch") == 0) {
            if (strcmp(value, "split") && strcmp(value, "each"))
                return usage_error(usage, "--site-batch expects split or each, found '%s'", value);
            o->site_batch = strcmp(value, "each") == 0;
        } else if (strcmp(a, "--outer-codec") == 0) {
            if (strcmp(value, "int8") && strcmp(value, "int4") && strcmp(value, "f32"))
                return usage_error(usage, "--outer-codec expects int8, int4 or f32, found '%s'", value);
            o->outer_bits = value[3] == '8' ? 8 : value[3] == '4' ? 4 : 0;
        } else if (strcmp(a, "--run-key") == 0) {
            o->run_key = value;
        } else if (strcmp(a, "--cublas") == 0) {
            if (strcmp(value, "bundle") && strcmp(value, "system"))
                return usage_error(usage, "--cublas expects bundle or system, found '%s'", value);
            o->cublas = value;
        } else if (strcmp(a, "--format") == 0) {
            if (strcmp(value, "text") && strcmp(value, "dot") && strcmp(value, "html"))
                return usage_error(usage, "--format expects text, dot or html, found '%s'", value);
            o->format = value;
        } else {
            o->output = value;
        }
    }
    return 0;
}

