/* export.c: `fusionc export`: a checkpoint as a Hugging Face model folder.
 *
 *     DIR/config.json                        the architecture, from the checkpoint's
 *                                            fusion.model and fusion.hypers
 *     DIR/model.safetensors                  the weights, one copy, by name; or, over
 *                                            --max-shard-size,
 *     DIR/model-0000K-of-0000N.safetensors   shards in name order, and
 *     DIR/model.safetensors.index.json       which shard holds which tensor
 *     DIR/tokenizer.json ...                 copied from --tokenizer, when given
 *
 * The checkpoint is the one layout of runtime/checkpoint_store.h (a DIR
 * with step-N folders: its newest complete one; or one step-N folder):
 * its MANIFEST read and every part verified against it before anything is
 * written.  A pipeline's parts are merged; a tensor that several parts hold
 * (replicas, a tied embedding lent to another stage) is written once, and
 * the copies must agree in shape.  Only the parameters go out: AdamW's
 * moments (adamw.m.*, adamw.v.*) and fusion's own state (fusion.*) stay.
 * Every file is written whole or not at all (atomic_file.h, st_write_as).
 *
 * Architectures: Llama (models/llama.xml) and GPT-2 (models/gpt2.xml,
 * GPT2LMHeadModel): their parameters already carry Hugging Face's names
 * and layouts, so the weights go out as they are (hf_config.h writes
 * config.json).  Another model is refused, naming it. */
#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <dirent.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../frontend/units.h"
#include "../runtime/atomic_file.h"
#include "../runtime/checkpoint_store.h"
#include "../runtime/safetensors.h"
#include "export.h"
#include "export_lora.h"
#include "hf_json.h"
#include "hf_config.h"

typedef struct {
    const char *output, *dtype, *tokenizer, *max_shard, *base;
    int adapter, merge;
} export_options;

static const char *const dtypes[] = { "fp32", "bf16", "fp16", NULL };

/* clang-format off */
static const cli_option export_options_table[] = {
    { .name = "-o", .metavar = "DIR", CLI_NONEMPTY(export_options, output), .expects = "a folder",
      .help = "the Hugging Face folder to write (made if missing)" },
    { .name = "--dtype", .metavar = "T", CLI_CHOICE(export_options, dtype), .choices = dtypes,
      .expects = "fp32, bf16 or fp16", .help = "the weights' type in the files (default fp32)" },
    { .name = "--max-shard-size", .metavar = "SIZE", CLI_NONEMPTY(export_options, max_shard),
      .expects = "a size (5GB, 500MB)", .help = "above it, shards and an index (default 5GB, as Hugging Face's)" },
    { .name = "--tokenizer", .metavar = "PATH", CLI_NONEMPTY(export_options, tokenizer), .expects = "a file or folder",
      .help = "a tokenizer.json, or a folder: its tokenizer files go into DIR too" },
    { .name = "--adapter", CLI_FLAG(export_options, adapter),
      .help = "a LoRA fine-tune's adapters as PEFT reads them: adapter_config.json and\n"
              "adapter_model.safetensors" },
    { .name = "--merge", CLI_FLAG(export_options, merge),
      .help = "a LoRA fine-tune folded into its base (--base): the full model folder" },
    { .name = "--base", .metavar = "PATH", CLI_NONEMPTY(export_options, base), .expects = "a file or folder",
      .help = "with --merge: the base weights the run started from (--init), checked\n"
              "against the checkpoint's record of them" },
};

const cli_usage export_usage = {
    "usage: fusionc export CHECKPOINT -o DIR [--dtype fp32|bf16|fp16] [--max-shard-size SIZE]\n"
    "                      [--tokenizer PATH] [--adapter | --merge --base PATH]\n"
    "\n"
    "Writes a Hugging Face model folder from a checkpoint (a --save folder: its newest\n"
    "complete step; or one step-N folder), verified first against its MANIFEST:\n"
    "config.json, and the parameters (not the optimizer's state) in model.safetensors,\n"
    "or shards with model.safetensors.index.json above --max-shard-size.  A pipeline's\n"
    "parts are merged.  Loads back with --init DIR, and with Hugging Face's loaders.\n"
    "A LoRA fine-tune (compile --lora): --adapter writes PEFT's adapter folder, --merge\n"
    "the model with the adapters folded into the base it was trained on.\n",
    export_options_table, NULL, sizeof export_options_table / sizeof export_options_table[0], 22, NULL
};
/* clang-format on */

static int usage_fail(const char *fmt, const char *arg)
{
    return cli_usage_fail(&export_usage, "fusionc export", fmt, arg);
}

/* ---- the checkpoint ------------------------------------------------------- */

typedef struct {
    char step_dir[FU_PATH_BYTES];
    ckpt_manifest manifest;
    st_file **parts;
    int n_parts;
    st_tensor *weights; /* pointing into parts, sorted by name */
    int n_weights;
} checkpoint;

/* CHECKPOINT as a step folder: itself if it has a MANIFEST, else the
 * newest complete step-N inside it. */
static int find_step(const char *path, char *step_dir, size_t n, char *err, size_t err_size)
{
    char manifest[FU_PATH_BYTES + 16];
    struct stat st;
    snprintf(manifest, sizeof manifest, "%s/%s", path, CKPT_MANIFEST);
    if (stat(manifest, &st) == 0) {
        snprintf(step_dir, n, "%s", path);
        return 0;
    }
    int64_t *steps = NULL;
    int count = ckpt_list_steps(path, 1, &steps, err, err_size);
    if (count == 0)
        snprintf(err, err_size, "%s: no complete checkpoint (no MANIFEST, and no step-N folder with one)", path);
    if (count > 0)
        ckpt_step_dir(path, steps[0], step_dir, n);
    free(steps);
    return count > 0 ? 0 : -1;
}

static int is_state(const char *name) { return strncmp(name, "adamw.", 6) == 0 || strncmp(name, "fusion.", 7) == 0; }

static int by_name(const void *a, const void *b)
{
    return strcmp(((const st_tensor *)a)->name, ((const st_tensor *)b)->name);
}

static int same_shape(const st_tensor *a, const st_tensor *b)
{
    if (a->rank != b->rank)
        return 0;
    for (int d = 0; d < a->rank; d++)
        if (a->dim[d] != b->dim[d])
            return 0;
    return 1;
}

static int checkpoint_open(checkpoint *c, const char *path, char *err, size_t n)
{
    memset(c, 0, sizeof *c);
    if (find_step(path, c->step_dir, sizeof c->step_dir, err, n) ||
        ckpt_manifest_read(c->step_dir, &c->manifest, err, n) != 0)
        return -1;
    c->parts = calloc((size_t)c->manifest.n_parts, sizeof *c->parts);
    if (!c->parts)
        return snprintf(err, n, "out of memory"), -1;
    int cap = 0;
    for (int i = 0; i < c->manifest.n_parts; i++) {
        char part[FU_PATH_BYTES + CKPT_PART_MAX];
        snprintf(part, sizeof part, "%s/%s", c->step_dir, c->manifest.parts[i].name);
        if (ckpt_verify_part(c->step_dir, &c->manifest, c->manifest.parts[i].name, err, n) ||
            !(c->parts[c->n_parts] = st_open(part, err, n)))
            return -1;
        st_file *f = c->parts[c->n_parts++];
        for (int k = 0; k < st_count(f); k++) {
            st_tensor t;
            if (st_get(f, k, &t) != 0)
                return snprintf(err, n, "%s: tensor '%s': a dtype fusion does not read", part, t.name), -1;
            if (is_state(t.name))
                continue;
            if (c->n_weights == cap) {
                cap = cap ? 2 * cap : 256;
                st_tensor *w = realloc(c->weights, (size_t)cap * sizeof *w);
                if (!w)
                    return snprintf(err, n, "out of memory"), -1;
                c->weights = w;
            }
            c->weights[c->n_weights++] = t;
        }
    }
    qsort(c->weights, (size_t)c->n_weights, sizeof *c->weights, by_name);
    int kept = 0; /* one copy of each name; the copies must agree */
    for (int i = 0; i < c->n_weights; i++) {
        if (kept > 0 && strcmp(c->weights[kept - 1].name, c->weights[i].name) == 0) {
            if (!same_shape(&c->weights[kept - 1], &c->weights[i]))
                return snprintf(err, n, "%s: tensor '%s' has two shapes in two parts", c->step_dir, c->weights[i].name),
                       -1;
            continue;
        }
        c->weights[kept++] = c->weights[i];
    }
    c->n_weights = kept;
    if (kept == 0)
        return snprintf(err, n, "%s: no parameters in the checkpoint", c->step_dir), -1;
    return 0;
}

/* Every part's fusion.frozen, one after another (malloc'd; "" none). */
static char *frozen_records(const checkpoint *c)
{
    size_t size = 1;
    for (int i = 0; i < c->n_parts; i++) {
        const char *r = st_metadata(c->parts[i], "fusion.frozen");
        size += r ? strlen(r) : 0;
    }
    char *out = malloc(size);
    if (out)
        out[0] = '\0';
    for (int i = 0; out && i < c->n_parts; i++) {
        const char *r = st_metadata(c->parts[i], "fusion.frozen");
        if (r)
            strcat(out, r);
    }
    return out;
}

static int has_weight(const checkpoint *c, const char *name)
{
    for (int i = 0; i < c->n_weights; i++)
        if (strcmp(c->weights[i].name, name) == 0)
            return 1;
    return 0;
}

static void checkpoint_close(checkpoint *c)
{
    for (int i = 0; i < c->n_parts; i++)
        st_close(c->parts[i]);
    free(c->parts);
    free(c->weights);
    ckpt_manifest_free(&c->manifest);
}

/* ---- config.json ---------------------------------------------------------- */

/* ---- the weights ---------------------------------------------------------- */

static int64_t tensor_elements(const st_tensor *t)
{
    int64_t e = 1;
    for (int d = 0; d < t->rank; d++)
        e *= t->dim[d];
    return e;
}

/* Weight files of an earlier export in dir that this one did not write
 * (model.safetensors, model-K-of-N.safetensors, the index): a loader
 * seeing both would not know which to read.  Removed after the new files
 * are whole, so a failed export leaves the earlier one as it was. */
static int remove_stale(const char *dir, int n_shards, char *err, size_t n)
{
    DIR *d = opendir(dir);
    if (!d)
        return snprintf(err, n, "%s: cannot read the folder: %s", dir, strerror(errno)), -1;
    char keep[64], path[FU_PATH_BYTES + 300];
    snprintf(keep, sizeof keep, "-of-%05d.safetensors", n_shards);
    int rc = 0;
    for (struct dirent *e; (e = readdir(d)) && rc == 0;) {
        const char *name = e->d_name;
        size_t len = strlen(name);
        int single = strcmp(name, "model.safetensors") == 0;
        int index = strcmp(name, "model.safetensors.index.json") == 0;
        int shard = strncmp(name, "model-", 6) == 0 && len > 12 && strcmp(name + len - 12, ".safetensors") == 0;
        int ours = n_shards == 1
                       ? single
                       : index || (shard && len > strlen(keep) && strcmp(name + len - strlen(keep), keep) == 0);
        if ((single || index || shard) && !ours) {
            snprintf(path, sizeof path, "%s/%s", dir, name);
            if (unlink(path) != 0)
                rc = -1, snprintf(err, n, "%s: cannot remove an earlier export's file: %s", path, strerror(errno));
        }
    }
    closedir(d);
    return rc;
}

/* The weights in shards of at most max_bytes (a tensor bigger than that
 * alone in its own), model.safetensors when one. */
static int write_weights(const st_tensor *weights, int n_weights, const char *dir, st_dtype as, int64_t max_bytes,
                         char *err, size_t n)
{
    int width = st_dtype_size(as);
    int *shard = calloc((size_t)n_weights, sizeof *shard), n_shards = 0;
    st_dtype *dtypes_as = calloc((size_t)n_weights, sizeof *dtypes_as);
    if (!shard || !dtypes_as) {
        free(shard), free(dtypes_as);
        return snprintf(err, n, "out of memory"), -1;
    }
    int64_t in_shard = 0, total = 0;
    for (int i = 0; i < n_weights; i++) {
        int64_t bytes = tensor_elements(&weights[i]) * (weights[i].dtype == ST_I32 ? 4 : width);
        if (i == 0 || (in_shard > 0 && in_shard + bytes > max_bytes))
            n_shards++, in_shard = 0;
        shard[i] = n_shards - 1;
        in_shard += bytes;
        total += bytes;
        dtypes_as[i] = weights[i].dtype == ST_I32 ? ST_I32 : as;
    }
    static const char *const metadata[] = { "format", "pt", NULL };
    cJSON *index = cJSON_CreateObject(), *map = cJSON_CreateObject();
    cJSON_AddNumberToObject(cJSON_AddObjectToObject(index, "metadata"), "total_size", (double)total);
    cJSON_AddItemToObject(index, "weight_map", map);
    int rc = 0;
    for (int s = 0, first = 0; s < n_shards && rc == 0; s++) {
        int last = first;
        while (last < n_weights && shard[last] == s)
            last++;
        char name[64], path[FU_PATH_BYTES + 64];
        if (n_shards == 1)
            snprintf(name, sizeof name, "model.safetensors");
        else
            snprintf(name, sizeof name, "model-%05d-of-%05d.safetensors", s + 1, n_shards);
        snprintf(path, sizeof path, "%s/%s", dir, name);
        rc = st_write_as(path, weights + first, last - first, dtypes_as + first, metadata, err, n);
        for (int i = first; i < last; i++)
            cJSON_AddStringToObject(map, weights[i].name, name);
        first = last;
    }
    if (rc == 0 && n_shards > 1)
        rc = hf_json_write(dir, "model.safetensors.index.json", index, err, n);
    if (rc == 0)
        rc = remove_stale(dir, n_shards, err, n);
    cJSON_Delete(index);
    free(shard);
    free(dtypes_as);
    return rc;
}

/* ---- the tokenizer files -------------------------------------------------- */

static int copy_file(const char *from, const char *to, char *err, size_t n)
{
    FILE *f = fopen(from, "rb");
    if (!f)
        return snprintf(err, n, "%s: cannot open: %s", from, strerror(errno)), -1;
    atomic_file af;
    FILE *out = atomic_open(&af, to, err, n);
    char buf[65536];
    size_t got;
    while (out && (got = fread(buf, 1, sizeof buf, f)) > 0)
        if (fwrite(buf, 1, got, out) != got)
            break;
    int bad = ferror(f);
    fclose(f);
    if (!out)
        return -1;
    if (bad) {
        atomic_abort(&af);
        return snprintf(err, n, "%s: cannot read", from), -1;
    }
    return atomic_commit(&af, 0, err, n);
}

/* PATH a tokenizer.json, or a folder whose tokenizer files all go. */
int export_copy_tokenizer(const char *path, const char *dir, char *err, size_t n)
{
    static const char *const names[] = { "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json",
                                         "generation_config.json" };
    struct stat st;
    char from[FU_PATH_BYTES + 64], to[FU_PATH_BYTES + 64];
    if (stat(path, &st) != 0)
        return snprintf(err, n, "%s: no such tokenizer file or folder", path), -1;
    if (!S_ISDIR(st.st_mode)) {
        snprintf(to, sizeof to, "%s/tokenizer.json", dir);
        return copy_file(path, to, err, n);
    }
    int copied = 0;
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        snprintf(from, sizeof from, "%s/%s", path, names[i]);
        snprintf(to, sizeof to, "%s/%s", dir, names[i]);
        if (stat(from, &st) != 0)
            continue;
        if (copy_file(from, to, err, n))
            return -1;
        copied++;
    }
    return copied ? 0 : (snprintf(err, n, "%s: no tokenizer.json in the folder", path), -1);
}

/* The tokenizer `fusionc compile --tokenizer` put beside the run: OUT/tokenizer,
 * for a checkpoint in OUT/checkpoints (the broker's) or any folder of OUT
 * (--save OUT/ckpt).  1 and its folder in found, or 0. */
static int compiled_tokenizer(const char *source, const char *step_dir, char *found, size_t n)
{
    const char *const candidates[] = { "%s/../tokenizer", "%s/../../tokenizer" };
    const char *const bases[] = { source, step_dir };
    struct stat st;
    char json[FU_PATH_BYTES + 64];
    for (int b = 0; b < 2; b++)
        for (int k = 0; k < 2; k++) {
            snprintf(found, n, candidates[k], bases[b]);
            snprintf(json, sizeof json, "%s/tokenizer.json", found);
            if (stat(json, &st) == 0)
                return 1;
        }
    return 0;
}

/* ---- the command ------------------------------------------------------------ */

int export_main(int argc, char **argv)
{
    export_options o = { .dtype = "fp32", .max_shard = "5GB" };
    const char *source = NULL;
    char why[3 * FU_PATH_BYTES];
    for (int i = 0; i < argc; i++) {
        if (cli_is_help(argv[i])) {
            cli_usage_print(stdout, &export_usage);
            return 0;
        }
        int took = cli_take(&export_usage, argc, argv, &i, &o, why, sizeof why);
        if (took < 0)
            return usage_fail("%s", why);
        if (took > 0)
            continue;
        if (argv[i][0] == '-' && argv[i][1])
            return usage_fail("unknown option '%s'", argv[i]);
        if (source)
            return usage_fail("one CHECKPOINT only; '%s' is a second", argv[i]);
        source = argv[i];
    }
    if (!source || !o.output)
        return usage_fail("%s is required", !source ? "a CHECKPOINT" : "-o DIR");
    if (o.adapter && o.merge)
        return usage_fail("%s", "--adapter or --merge, not both");
    if (o.merge != (o.base != NULL))
        return usage_fail("%s", o.merge ? "--merge needs --base PATH, the weights the run started from"
                                        : "--base goes with --merge");
    double max_shard;
    if (units_parse(o.max_shard, UNIT_SIZE, &max_shard, why, sizeof why) || max_shard < 1)
        return usage_fail("--max-shard-size: %s", why);
    st_dtype as = strcmp(o.dtype, "bf16") == 0 ? ST_BF16 : strcmp(o.dtype, "fp16") == 0 ? ST_F16 : ST_F32;
    const char *torch_dtype = as == ST_BF16 ? "bfloat16" : as == ST_F16 ? "float16" : "float32";

    checkpoint c;
    cJSON *config = NULL;
    int rc = checkpoint_open(&c, source, why, sizeof why);
    const char *model = rc == 0 ? st_metadata(c.parts[0], "fusion.model") : NULL;
    const char *hypers = rc == 0 ? st_metadata(c.parts[0], "fusion.hypers") : NULL;
    if (rc == 0 && (!model || !hypers))
        rc = -1, snprintf(why, sizeof why,
                          "%s: a checkpoint without fusion.model and fusion.hypers (saved before "
                          "they were recorded): compile and save it again",
                          c.step_dir);
    char *records = rc == 0 ? frozen_records(&c) : NULL; /* "HASH NAME\n": a fine-tune's base */
    if (rc == 0 && strcmp(model, "gpt2") == 0 && !has_weight(&c, "wte.weight") &&
        !(records && strstr(records, " wte.weight\n")))
        rc = -1, snprintf(why, sizeof why,
                          "%s: a GPT-2 checkpoint without wte.weight (saved before models/gpt2.xml took Hugging "
                          "Face's names): compile and save it again",
                          c.step_dir);
    char config_why[512];
    if (rc == 0 && !(config = hf_config_write(model, hypers, torch_dtype, config_why, sizeof config_why)))
        rc = -1, snprintf(why, sizeof why, "%s: %s", c.step_dir, config_why);
    if (rc == 0 && mkdir(o.output, 0755) != 0 && errno != EEXIST)
        rc = -1, snprintf(why, sizeof why, "%s: cannot make the folder: %s", o.output, strerror(errno));
    if (rc == 0 && !o.adapter && !o.merge && records && records[0])
        rc = -1, snprintf(why, sizeof why,
                          "%s: a fine-tune's checkpoint, which records its frozen base weights but does not hold "
                          "them: export --merge --base PATH (the base it started from)%s",
                          c.step_dir, export_lora_count(c.weights, c.n_weights) ? ", or --adapter (PEFT)" : "");
    free(records);
    if (rc == 0 && o.adapter) {
        rc = export_lora_adapter(c.weights, c.n_weights, model, hypers, o.output, as, why, sizeof why);
    } else if (rc == 0 && o.merge) {
        st_tensor *merged = NULL;
        float **owned = NULL;
        int n_merged = 0;
        char *frozen = frozen_records(&c);
        rc = !frozen ? (snprintf(why, sizeof why, "out of memory"), -1)
                     : export_lora_merge(c.weights, c.n_weights, model, hypers, frozen, o.base, &merged, &n_merged,
                                         &owned, why, sizeof why);
        if (rc == 0) {
            qsort(merged, (size_t)n_merged, sizeof *merged, by_name);
            rc = write_weights(merged, n_merged, o.output, as, (int64_t)max_shard, why, sizeof why);
        }
        for (int i = 0; owned && owned[i]; i++)
            free(owned[i]);
        free(owned);
        free(merged);
        free(frozen);
        c.n_weights = n_merged;
    } else if (rc == 0) {
        rc = write_weights(c.weights, c.n_weights, o.output, as, (int64_t)max_shard, why, sizeof why);
    }
    if (rc == 0 && !o.adapter)
        rc = hf_json_write(o.output, "config.json", config, why, sizeof why);
    char found[FU_PATH_BYTES + 32];
    if (rc == 0 && !o.tokenizer && compiled_tokenizer(source, c.step_dir, found, sizeof found))
        o.tokenizer = found;
    if (rc == 0 && o.tokenizer)
        rc = export_copy_tokenizer(o.tokenizer, o.output, why, sizeof why);
    if (rc == 0)
        printf("export: %s: %d tensors (%s%s) to %s\n", c.step_dir, c.n_weights, o.dtype,
               o.adapter ? ", PEFT's adapter layout"
               : o.merge ? ", the adapters merged into the base"
                         : "",
               o.output);
    else
        fprintf(stderr, "fusionc export: %s\n", why);
    cJSON_Delete(config);
    checkpoint_close(&c);
    return rc ? 1 : 0;
}
