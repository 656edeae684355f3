/* options.c: the options of fusionc's compiler commands, one table
 * (options.h), and their parser. */
#include "options.h"

#include "hf_config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../frontend/xml_util.h"
#include "../passes/passes.h"
#include "../runtime/program.h"
#include "../ir/folders.h" /* FU_PATH_BYTES */

int settings_add(setting_list *s, const char *text)
{
    if (s->n == MAX_SETS)
        return -1;
    if (model_setting_parse(text, s->text[s->n], sizeof s->text[0], &s->v[s->n]))
        return -2;
    s->n++;
    return 0;
}

/* ---- the parsers the generic ones (runtime/cli_option.h) do not cover ---- */

static int parse_setting(const cli_option *opt, const char *value, void *field, char *why, size_t n)
{
    int rc = settings_add(field, value);
    if (rc == -1)
        snprintf(why, n, "too many %s options (the limit is %d)", opt->name, MAX_SETS);
    return rc == 0 ? 0 : rc == -1 ? -1 : cli_bad_value(opt, value, why, n);
}

static int parse_name(const cli_option *opt, const char *value, void *field, char *why, size_t n)
{
    name_list *l = field;
    if (l->n == (int)(sizeof l->name / sizeof l->name[0])) {
        snprintf(why, n, "too many %s options (the limit is %d)", opt->name, (int)(sizeof l->name / sizeof l->name[0]));
        return -1;
    }
    l->name[l->n++] = value;
    return 0;
}

static int parse_pass(const cli_option *opt, const char *value, void *field, char *why, size_t n)
{
    if (!pass_name_known(value)) {
        snprintf(why, n, "%s %s: unknown pass (the passes: %s)", opt->name, value, pass_names());
        return -1;
    }
    *(const char **)field = value;
    return 0;
}

static int parse_compress(const cli_option *opt, const char *value, void *field, char *why, size_t n)
{
    char *end = NULL;
    double rho = strncmp(value, "topk:", 5) == 0 ? strtod(value + 5, &end) : 0.0;
    if (strcmp(value, "none") && strcmp(value, "adatopk") && !(end && *end == '\0' && rho > 0 && rho <= 1))
        return cli_bad_value(opt, value, why, n);
    *(const char **)field = value;
    return 0;
}

/* rank=R,alpha=A,targets=T1,T2,...[,dropout=P]: a word without '=' is
 * one more target.  alpha defaults to PEFT's 8. */
static int parse_lora(const cli_option *opt, const char *value, void *field, char *why, size_t n)
{
    lora_option *l = field;
    memset(l, 0, sizeof *l);
    l->spec.alpha = 8.0;
    if (strlen(value) >= sizeof l->text)
        return cli_bad_value(opt, value, why, n);
    strcpy(l->text, value);
    int in_targets = 0;
    char *save = NULL;
    for (char *tok = strtok_r(l->text, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        char *eq = strchr(tok, '='), *end = NULL;
        if (!eq) {
            if (!in_targets || l->spec.n_targets == LORA_MAX_TARGETS || !tok[0])
                return cli_bad_value(opt, value, why, n);
            l->spec.targets[l->spec.n_targets++] = tok;
            continue;
        }
        *eq = '\0';
        const char *val = eq + 1;
        in_targets = strcmp(tok, "targets") == 0;
        if (in_targets) {
            if (val[0])
                l->spec.targets[l->spec.n_targets++] = val;
        } else if (strcmp(tok, "rank") == 0) {
            long r = strtol(val, &end, 10);
            if (!end || *end || r < 1 || r > 65536)
                return cli_bad_value(opt, value, why, n);
            l->spec.rank = (int32_t)r;
        } else if (strcmp(tok, "alpha") == 0 || strcmp(tok, "dropout") == 0) {
            double x = strtod(val, &end);
            int alpha = tok[0] == 'a';
            if (!end || *end || (alpha ? !(x > 0) : !(x >= 0 && x < 1)))
                return cli_bad_value(opt, value, why, n);
            *(alpha ? &l->spec.alpha : &l->spec.dropout) = x;
        } else {
            return cli_bad_value(opt, value, why, n);
        }
    }
    if (l->spec.rank < 1 || l->spec.n_targets < 1)
        return cli_bad_value(opt, value, why, n);
    return 0;
}

static int parse_recompute(const cli_option *opt, const char *value, void *field, char *why, size_t n)
{
    if (schedule_recompute_mode(value) < 0)
        return cli_bad_value(opt, value, why, n);
    *(const char **)field = value;
    return 0;
}

static int parse_precision(const cli_option *opt, const char *value, void *field, char *why, size_t n)
{
    static const char *const names[] = { [DT_F32] = "fp32", [DT_BF16] = "bf16", [DT_F16] = "fp16" };
    for (int k = 0; k < (int)(sizeof names / sizeof names[0]); k++)
        if (names[k] && strcmp(value, names[k]) == 0) {
            *(ir_dtype *)field = (ir_dtype)k;
            return 0;
        }
    return cli_bad_value(opt, value, why, n);
}

/* ---- the table ------------------------------------------------------------ */

static const char *const schedulers[] = { "opfence", "uniform",    "megatron", "megatron-paper",
                                          "gcma",    "gcma-alone", "random",   NULL };
static const char *const formats[] = { "text", "dot", "html", NULL };
static const char *const cublas_modes[] = { "bundle", "system", NULL };
static const char *const syncs[] = { "exact", "diloco", NULL };
static const int sync_values[] = { RT_SYNC_EXACT, RT_SYNC_DILOCO };
static const char *const site_batches[] = { "split", "each", NULL };
static const char *const codecs[] = { "int8", "int4", "f32", NULL };
static const int codec_bits[] = { 8, 4, 0 };

#define A_COUNT .lo = 1, .hi = 4096, .expects = "a count in [1, 4096]"

/* Each option once: its help is what most commands show (a command may
 * word it for itself: fusionc.c's cli_use lists). */
/* clang-format off */
const cli_option fusionc_options[OPT_COUNT] = {
    [OPT_SET] = { .name = "--set", .metavar = "name=value", CLI_CUSTOM(parse_setting, setting_list, options, sets),
                  .expects = "name=value", .help = "override a hyper-parameter (repeatable)" },
    [OPT_HF_CONFIG] = { .name = "--hf-config", .metavar = "FILE", CLI_STRING(options, hf_config),
                        .help = "a Hugging Face config.json of a Llama or GPT-2 model (for models/llama.xml\n"
                                "or models/gpt2.xml): its hyper-parameters, as --set would give them (a\n"
                                "--set of the same name wins)" },
    [OPT_AFTER] = { .name = "--after", .metavar = "PASS", CLI_CUSTOM(parse_pass, const char *, options, after),
                    .help = "frontend (as built, before any pass) or a pass name" },
    [OPT_FORMAT] = { .name = "--format", .metavar = "FORMAT", CLI_CHOICE(options, format), .choices = formats,
                     .expects = "text, dot or html",
                     .help = "text (default), dot (Graphviz: dot -Tsvg) or html (one page for a\n"
                             "browser: pan, zoom, search, click a block to expand it); in dot and\n"
                             "html a repeated block's ops of one phase and device are one box\n"
                             "with their count" },
    [OPT_EXPAND] = { .name = "--expand", CLI_FLAG(options, expand), .help = "dot, html: every op, no block collapsed" },
    [OPT_STAGE] = { .name = "--stage", .metavar = "N", CLI_INT(options, view_stage), .lo = 0, .hi = 1023,
                    .expects = "a stage number in [0, 1024)", .help = "dot, html, with CLUSTER: only stage N's ops" },
    [OPT_DEVICE] = { .name = "--device", .metavar = "NAME", CLI_STRING(options, view_device),
                     .help = "... only the ops of the stage device NAME runs" },
    [OPT_OUTPUT] = { .name = "-o", .metavar = "FILE", CLI_STRING(options, output),
                     .help = "write to FILE instead of standard output (folders made)" },
    [OPT_VERBOSE] = { .name = "-v", .alias = "--verbose", CLI_FLAG(options, verbose), .help = "print more" },
    [OPT_DUMP_IR] = { .name = "--dump-ir", .metavar = "PASS", CLI_CUSTOM(parse_pass, const char *, options, dump_ir),
                      .help = "print the IR after PASS to standard error" },
    [OPT_PRECISION] = { .name = "--precision", .metavar = "P",
                        CLI_CUSTOM(parse_precision, ir_dtype, options, precision),
                        .expects = "fp32, bf16 or fp16",
                        .help = "fp32 (default), bf16 or fp16: what activations and their gradients are\n"
                                "stored and sent in; parameters, their gradients and AdamW's state stay\n"
                                "fp32, products accumulate in fp32; fp16 adds dynamic loss scaling" },
    [OPT_TF32] = { .name = "--tf32", CLI_FLAG(options, tf32),
                   .help = "fp32 matrix products may use TF32 tensor cores (CUDA; peak-tf32)" },
    [OPT_SCHEDULER] = { .name = "--scheduler", .metavar = "S", CLI_CHOICE(options, scheduler), .choices = schedulers,
                        .expects = "opfence, uniform, megatron, megatron-paper, gcma, gcma-alone or random",
                        .help = "opfence (default: bandwidth- and speed-aware), uniform (equal layers\n"
                                "per device in file order, Megatron's default placement), megatron\n"
                                "(every device in file order as the fastest stages x replicas, equal\n"
                                "layers, dense: a tuned Megatron-LM run), megatron-paper (the same as\n"
                                "DT-FM ran it: a pipeline of 8, or --stages, times the rest as replicas),\n"
                                "gcma (DT-FM's genetic scheduler on its own cost model, equal layers per\n"
                                "stage, seeded with Megatron's order and never worse than megatron or\n"
                                "opfence), gcma-alone (its search's own answer, not weighed against\n"
                                "them) or random (DT-FM's random-placement baseline on gcma's shape)" },
    [OPT_SEED] = { .name = "--seed", .metavar = "N", CLI_INT64(options, seed), .lo = 1, .hi = (double)INT64_MAX,
                   .expects = "a positive integer", .help = "the random scheduler's draw (default 1)" },
    [OPT_MICRO_BATCHES] = { .name = "--micro-batches", .metavar = "M", CLI_INT(options, micro_batches), A_COUNT,
                            .help = "split the model's batch into M micro-batches (1F1B); default: the\n"
                                    "largest divisor of the batch up to 4 on several devices, else 1" },
    [OPT_STAGES] = { .name = "--stages", .metavar = "S", CLI_INT(options, stages), A_COUNT, .help = NULL },
    [OPT_REPLICAS] = { .name = "--replicas", .metavar = "R", CLI_INT(options, replicas), A_COUNT,
                       .help = "make opfence (or gcma) choose S stages of R replicas each" },
    [OPT_WITHOUT] = { .name = "--without", .metavar = "NAME", CLI_CUSTOM(parse_name, name_list, options, without),
                      .help = "plan without device NAME (repeatable): the broker's re-plan after a loss" },
    [OPT_WITH] = { .name = "--with", .metavar = "NAME", CLI_CUSTOM(parse_name, name_list, options, with),
                   .help = "plan with standby NAME as a device (repeatable): a device that joined" },
    [OPT_FREEZE] = { .name = "--freeze", .metavar = "PATTERN", CLI_CUSTOM(parse_name, name_list, options, freeze),
                     .help = "do not train the parameters whose names match the glob (repeatable):\n"
                             "no gradient, no optimizer state, no all-reduce" },
    [OPT_LORA] = { .name = "--lora", .metavar = "SPEC", CLI_CUSTOM(parse_lora, lora_option, options, lora),
                   .expects = "rank=R,alpha=A,targets=NAME,NAME...[,dropout=P] (rank >= 1, alpha > 0, 0 <= P < 1)",
                   .help = "LoRA adapters on the linears named by targets (PEFT's target_modules,\n"
                           "e.g. q_proj,v_proj): y = Wx + (alpha/R) B A x, A [R, in], B [out, R]\n"
                           "zeros; every other parameter frozen (alpha default 8); dropout=P drops\n"
                           "the adapters' input while training, as PEFT's lora_dropout" },
    [OPT_FROZEN_DTYPE] = { .name = "--frozen-dtype", .metavar = "D",
                           CLI_CUSTOM(parse_precision, ir_dtype, options, frozen_dtype),
                           .expects = "fp32, bf16 or fp16",
                           .help = "store the frozen parameters (--freeze, --lora's base) in D: fp32\n"
                                   "(default), bf16 or fp16 (half their memory; a 16-bit D must be\n"
                                   "--precision's when that is 16-bit)" },
    [OPT_INFERENCE] = { .name = "--inference", CLI_FLAG(options, inference),
                        .help = "an inference program: the logits of each step's tokens, a key/value\n"
                                "cache of ctx rows, no training (fusionc generate builds one)" },
    [OPT_PREFILL] = { .name = "--prefill", .metavar = "P", CLI_INT64(options, prefill), .lo = 1, .hi = 65536,
                      .expects = "a count in [1, 65536]",
                      .help = "with --inference (seq=1): the step again for P tokens a sequence, a\n"
                              "prompt's chunk (at most ctx), over the same weights and cache (fusionc\n"
                              "generate and serve: 64)" },
    [OPT_COMPRESS] = { .name = "--compress", .metavar = "C",
                       CLI_CUSTOM(parse_compress, const char *, options, compress),
                       .expects = "none, topk:RHO (0 < RHO <= 1) or adatopk",
                       .help = "AdaTopK on the links the pipeline waits for: adatopk (the default on a\n"
                               "cluster of several regions: rows of 8 or 4 bits for activations and\n"
                               "their gradients, top-k with error feedback for parameter gradients),\n"
                               "none (the default on one region) or topk:RHO (everything top-k at RHO)" },
    [OPT_RECOMPUTE] = { .name = "--recompute", .metavar = "R",
                        CLI_CUSTOM(parse_recompute, const char *, options, recompute), .expects = "auto, on, off or keep:K",
                        .help = "auto (default: a stage whose memory caps the micro-batches it keeps\n"
                                "in flight keeps only its forward's inputs and runs the forward again\n"
                                "before each waiting backward, when that shortens the step, but keeps\n"
                                "whole as many as its memory holds beside the others' inputs), on (every\n"
                                "stage that stashes replays them all), off, or keep:K (every stage that\n"
                                "stashes replays, keeping at most K whole)" },
    [OPT_SHARD_OPTIMIZER] = { .name = "--shard-optimizer", CLI_FLAG(options, shard_optimizer),
                              .help = "ZeRO-1: a stage's replicas split the AdamW moments, each keeping 1/R\n"
                                      "(the gradients reduce-scattered, each replica updating its piece,\n"
                                      "the parameters all-gathered: the same mathematics, the ring alone)" },
    [OPT_NO_SHARD_OPTIMIZER] = { .name = "--no-shard-optimizer", CLI_FLAG(options, no_shard_optimizer),
                                 .help = "never shard (by default the planner shards where that makes a plan\n"
                                         "fit, or its estimated step 2% shorter, and says so)" },
    [OPT_SYNC] = { .name = "--sync", .metavar = "S", CLI_CHOICE_INT(options, sync), .choices = syncs,
                   .values = sync_values, .expects = "exact or diloco",
                   .help = "exact (default: one global batch a step, every gradient averaged) or\n"
                           "diloco (each region trains with its own plan; every H steps the regions\n"
                           "average their parameter change, an outer Nesterov step: a different\n"
                           "optimizer, for slow links between regions)" },
    [OPT_LOCAL_STEPS] = { .name = "--local-steps", .metavar = "H", CLI_INT(options, local_steps), .lo = 1,
                          .hi = 1000000, .expects = "a count of inner steps in [1, 1000000]",
                          .help = "diloco: inner steps between outer steps (default: from the links)" },
    [OPT_SITE_BATCH] = { .name = "--site-batch", .metavar = "B", CLI_CHOICE_INT(options, site_batch),
                         .choices = site_batches, .expects = "split or each",
                         .help = "diloco: split (default: the batch is split among the regions by speed)\n"
                                 "or each (every region trains the whole batch a step, slower ones fewer\n"
                                 "steps a round, DiLoCo's batch per worker)" },
    [OPT_OUTER_LR] = { .name = "--outer-lr", .metavar = "L", CLI_DOUBLE(options, outer_lr), .lo = 0, .hi = 10,
                       .open = CLI_OPEN_LO, .expects = "a rate in (0, 10]", .help = NULL },
    [OPT_OUTER_MOMENTUM] = { .name = "--outer-momentum", .metavar = "M", CLI_DOUBLE(options, outer_momentum),
                             .lo = 0, .hi = 1, .open = CLI_OPEN_HI, .expects = "a value in [0, 1)",
                             .help = "diloco's outer step (default 0.7, 0.9)" },
    [OPT_OUTER_CODEC] = { .name = "--outer-codec", .metavar = "C", CLI_CHOICE_INT(options, outer_bits),
                          .choices = codecs, .values = codec_bits, .expects = "int8, int4 or f32",
                          .help = "diloco's change on the wire: int8 (default), int4 (rows with error\n"
                                  "feedback) or f32" },
    [OPT_OUTER_DELAY] = { .name = "--outer-delay", .metavar = "D", CLI_INT(options, outer_delay), .lo = 0, .hi = 1,
                          .expects = "0 or 1",
                          .help = "1 (a round's change is applied a round late, its transfer overlapping\n"
                                  "the next round) or 0 (at once); default: 1 when the exchange would\n"
                                  "cost over a tenth of a round" },
    [OPT_PORT_BASE] = { .name = "--port-base", .metavar = "P", CLI_INT(options, port_base), .lo = 1, .hi = 65000,
                        .expects = "a port in [1, 65000]",
                        .help = "link i of the program listens on port P + i (default 29500)" },
    [OPT_RUN_KEY] = { .name = "--run-key", .metavar = "FILE", CLI_STRING(options, run_key),
                      .help = "the run secret to put in the bundles (default: a new one, OUT/run.key,\n"
                              "mode 0600; every link and the broker are sealed with it)" },
    [OPT_FORCE] = { .name = "--force", CLI_FLAG(options, force),
                    .help = "OUT holds an earlier compile: empty it first (without --force, refused:\n"
                            "an old program beside new ones would keep an old run key)" },
    [OPT_CUBLAS] = { .name = "--cublas", .metavar = "C", CLI_CHOICE(options, cublas), .choices = cublas_modes,
                     .expects = "bundle or system",
                     .help = "bundle (default: a CUDA device's bundle carries cuBLAS, libcublas and\n"
                             "libcublasLt from $CUDA_HOME/lib64, hard-linked where possible) or system\n"
                             "(left out: the hosts that run it have the CUDA toolkit's cuBLAS)" },
    [OPT_TOKENIZER] = { .name = "--tokenizer", .metavar = "PATH", CLI_NONEMPTY(options, tokenizer),
                        .expects = "a tokenizer.json or a folder with one",
                        .help = "a Hugging Face tokenizer.json (or a folder with one and its config):\n"
                                "its ids must fit the model's vocab; copied to OUT/tokenizer/, where\n"
                                "fusionc export finds it" },
    [OPT_STEPS] = { .name = "--steps", .metavar = "N", CLI_INT(options, steps), A_COUNT,
                    .help = "simulate N consecutive steps (default 3)" },
    [OPT_TRACE] = { .name = "--trace", .metavar = "FILE", CLI_STRING(options, trace),
                    .help = "also write the steps as a Chrome trace-event timeline (Perfetto), in the\n"
                            "format of the device programs' --trace, to compare the two" },
    [OPT_NO_OVERLAP] = { .name = "--no-overlap", CLI_FLAG(options, no_overlap),
                         .help = "replicas' gradient buckets averaged after the backward, not during\n"
                                 "it (the device programs' --no-overlap)" },
};
/* clang-format on */

/* --hf-config's settings into o->sets, before the --set ones already there
 * (they win: the last setting of a name does).  0, or -1 printed. */
/* The first of the files that is a model (<model name=...>): its path and
 * name in model (NULL, "" when none is). */
static const char *model_among(const options *o, char *model, size_t size)
{
    model[0] = '\0';
    for (int i = 0; i < o->n_files; i++) {
        struct diag err = { 0 };
        xmlDocPtr doc = xml_read(o->files[i], NULL, 0, &err);
        xmlNodePtr root = doc ? xmlDocGetRootElement(doc) : NULL;
        int is_model = root && xml_element_name(root) && strcmp(xml_element_name(root), "model") == 0 &&
                       xml_attr(root, "name", model, size, o->files[i], &err) == 1;
        xmlFreeDoc(doc);
        if (is_model)
            return o->files[i];
        model[0] = '\0';
    }
    return NULL;
}

static int apply_hf_config(options *o)
{
    hf_setting hf[HF_CONFIG_MAX];
    char why[2 * FU_PATH_BYTES + 256], model[128];
    const char *model_file = model_among(o, model, sizeof model);
    int n = hf_config_read(o->hf_config, model_file, model_file ? model : NULL, hf, why, sizeof why);
    if (n < 0) {
        fprintf(stderr, "fusionc: %s\n", why);
        return -1;
    }
    if (n + o->sets.n > MAX_SETS) {
        fprintf(stderr, "fusionc: %s: too many settings with the --set options (the limit is %d)\n", o->hf_config,
                MAX_SETS);
        return -1;
    }
    static char given[MAX_SETS][512]; /* the --set texts, while the list is rebuilt */
    int n_given = o->sets.n;
    for (int i = 0; i < n_given; i++)
        snprintf(given[i], sizeof given[i], "%s=%s", o->sets.v[i].name, o->sets.v[i].value);
    o->sets.n = 0;
    for (int i = 0; i < n; i++) {
        int k = o->sets.n;
        if (settings_add(&o->sets, hf[i].text)) {
            fprintf(stderr, "fusionc: %s: %s: not a setting\n", o->hf_config, hf[i].text);
            return -1;
        }
        snprintf(o->sets.from[k], sizeof o->sets.from[k], "%s: %s", o->hf_config, hf[i].field);
        o->sets.v[k].from = o->sets.from[k];
    }
    for (int i = 0; i < n_given; i++)
        settings_add(&o->sets, given[i]); /* they fitted before */
    return 0;
}

int usage_error(const cli_usage *u, const char *fmt, const char *arg)
{
    /* Who: "fusionc CMD", the first two words after the usage's "usage: ". */
    char who[64] = "fusionc";
    const char *h = u->head && strncmp(u->head, "usage: ", 7) == 0 ? u->head + 7 : NULL;
    if (h) {
        size_t first = strcspn(h, " \n"), second = h[first] == ' ' ? strcspn(h + first + 1, " \n") : 0;
        snprintf(who, sizeof who, "%.*s", (int)(first + (second ? 1 + second : 0)), h);
    }
    return cli_usage_fail(u, who, fmt, arg);
}

int parse_options(int argc, char **argv, const cli_usage *u, options *o)
{
    memset(o, 0, sizeof *o);
    o->outer_lr = o->outer_momentum = -1.0;
    o->outer_bits = o->outer_delay = -1;
    o->view_stage = -1;
    char why[FU_PATH_BYTES];
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i];
        if (cli_is_help(a)) {
            cli_usage_print(stdout, u);
            return 1;
        }
        int took = cli_take(u, argc, argv, &i, o, why, sizeof why);
        if (took < 0)
            return usage_error(u, "%s", why);
        if (took > 0)
            continue;
        if (a[0] == '-' && a[1] != '\0')
            return usage_error(u, "unknown option '%s'", a);
        if (o->n_files == (int)(sizeof o->files / sizeof o->files[0]))
            return usage_error(u, "too many files (the limit is %s)", "256");
        o->files[o->n_files++] = a;
    }
    if (o->hf_config && apply_hf_config(o))
        return 3;
    return 0;
}
