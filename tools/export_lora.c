/* export_lora.c: `fusionc export --adapter` and `--merge`, a LoRA
 * fine-tune's checkpoint (fusionc compile --lora) as PEFT reads it, or
 * folded into its base.
 *
 * --adapter: DIR/adapter_config.json and DIR/adapter_model.safetensors,
 * PEFT's layout: the adapters by PEFT's full names
 * (base_model.model.<linear>.lora_A.weight, A [r, in]; .lora_B.weight,
 * B [out, r]) and
 *
 *     {"peft_type": "LORA", "task_type": "CAUSAL_LM", "r": R,
 *      "lora_alpha": A, "target_modules": [...], "lora_dropout": P,
 *      "bias": "none", "fan_in_fan_out": false, ...}
 *
 * r from A's shape, lora_alpha and lora_dropout from the checkpoint's
 * fusion.hypers (the adapters pass records them), target_modules the last names of the
 * wrapped linears; fan_in_fan_out true for GPT-2, whose Conv1D weights
 * are [in, out].
 *
 * --merge --base PATH: the base (a safetensors file or a Hugging Face
 * folder) with every wrapped W + (alpha/r) B A (in fp32; for GPT-2's
 * [in, out] weights, W + (alpha/r) (B A)ᵀ), the other trained parameters
 * the checkpoint's, every other weight the base's as it is.  Each base
 * weight is checked first against the hash the checkpoint recorded of it
 * (fusion.frozen): merging onto another base is refused, naming the
 * weight.  The result is the model folder `fusionc export` writes. */
#include <cjson/cJSON.h>
#include <cblas.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <xxhash.h>

#include "../ir/folders.h" /* FU_PATH_BYTES */
#include "export_lora.h"
#include "hf_config.h"
#include "hf_json.h"

#define LORA_A   ".lora_A.weight"
#define LORA_B   ".lora_B.weight"
#define PEFT_PRE "base_model.model."

static int ends_with(const char *s, const char *tail)
{
    size_t n = strlen(s), t = strlen(tail);
    return n >= t && strcmp(s + n - t, tail) == 0;
}

static const st_tensor *find(const st_tensor *w, int n, const char *name)
{
    for (int i = 0; i < n; i++)
        if (strcmp(w[i].name, name) == 0)
            return &w[i];
    return NULL;
}

int export_lora_count(const st_tensor *w, int n)
{
    int count = 0;
    for (int i = 0; i < n; i++)
        count += ends_with(w[i].name, LORA_A);
    return count;
}

/* The checkpoint's alpha and rank, and that every A has its B. */
static int lora_settings(const st_tensor *w, int n, const char *hypers, double *alpha, int64_t *rank, char *err,
                         size_t size)
{
    *alpha = hf_config_hyper(hypers, "lora_alpha");
    *rank = 0;
    if (!(*alpha > 0))
        return snprintf(err, size, "the checkpoint's fusion.hypers has no lora_alpha: not a --lora run"), -1;
    for (int i = 0; i < n; i++) {
        if (!ends_with(w[i].name, LORA_A))
            continue;
        char b[ST_NAME_MAX];
        snprintf(b, sizeof b, "%.*s%s", (int)(strlen(w[i].name) - strlen(LORA_A)), w[i].name, LORA_B);
        const st_tensor *B = find(w, n, b);
        if (w[i].rank != 2 || !B || B->rank != 2 || B->dim[1] != w[i].dim[0])
            return snprintf(err, size, "adapter '%s' has no matching '%s' ([out, r])", w[i].name, b), -1;
        if (*rank && *rank != w[i].dim[0])
            return snprintf(err, size, "adapters of ranks %lld and %lld", (long long)*rank, (long long)w[i].dim[0]), -1;
        *rank = w[i].dim[0];
    }
    return *rank > 0 ? 0 : (snprintf(err, size, "no LoRA adapters (<linear>%s) in the checkpoint", LORA_A), -1);
}

int export_lora_adapter(const st_tensor *w, int n, const char *model, const char *hypers, const char *dir, st_dtype as,
                        char *err, size_t size)
{
    double alpha;
    int64_t rank;
    if (lora_settings(w, n, hypers, &alpha, &rank, err, size))
        return -1;
    cJSON *cfg = cJSON_CreateObject(), *targets = cJSON_CreateArray();
    st_tensor *out = calloc((size_t)n + 1, sizeof *out);
    st_dtype *types = calloc((size_t)n + 1, sizeof *types);
    int k = 0, rc = cfg && targets && out && types ? 0 : -1;
    for (int i = 0; i < n && rc == 0; i++) {
        if (!ends_with(w[i].name, LORA_A) && !ends_with(w[i].name, LORA_B))
            continue; /* a trained parameter that is not an adapter: not PEFT's to hold */
        out[k] = w[i];
        types[k] = as;
        if (snprintf(out[k].name, sizeof out[k].name, "%s%s", PEFT_PRE, w[i].name) >= (int)sizeof out[k].name)
            rc = -1;
        k++;
        if (!ends_with(w[i].name, LORA_A))
            continue;
        /* The module's last name: "model.layers.0.self_attn.q_proj.lora_A.weight" -> "q_proj". */
        int len = (int)(strlen(w[i].name) - strlen(LORA_A));
        const char *dot = w[i].name + len;
        while (dot > w[i].name && dot[-1] != '.')
            dot--;
        char module[ST_NAME_MAX];
        snprintf(module, sizeof module, "%.*s", (int)(w[i].name + len - dot), dot);
        int seen = 0;
        for (cJSON *t = targets ? targets->child : NULL; t; t = t->next)
            seen |= strcmp(t->valuestring, module) == 0;
        if (!seen)
            cJSON_AddItemToArray(targets, cJSON_CreateString(module));
    }
    if (rc == 0) {
        cJSON_AddStringToObject(cfg, "peft_type", "LORA");
        cJSON_AddStringToObject(cfg, "task_type", "CAUSAL_LM");
        cJSON_AddNumberToObject(cfg, "r", (double)rank);
        cJSON_AddNumberToObject(cfg, "lora_alpha", alpha);
        cJSON_AddItemToObject(cfg, "target_modules", targets);
        targets = NULL;
        double dropout = hf_config_hyper(hypers, "lora_dropout"); /* absent before dropout was built: 0 */
        cJSON_AddNumberToObject(cfg, "lora_dropout", isnan(dropout) ? 0.0 : dropout);
        cJSON_AddStringToObject(cfg, "bias", "none");
        cJSON_AddBoolToObject(cfg, "fan_in_fan_out", strcmp(model, "gpt2") == 0);
        cJSON_AddBoolToObject(cfg, "inference_mode", 1);
        cJSON_AddNullToObject(cfg, "base_model_name_or_path");
        cJSON_AddNullToObject(cfg, "modules_to_save");
        static const char *const metadata[] = { "format", "pt", NULL };
        char path[FU_PATH_BYTES + 64];
        snprintf(path, sizeof path, "%s/adapter_model.safetensors", dir);
        rc = st_write_as(path, out, k, types, metadata, err, size);
        if (rc == 0)
            rc = hf_json_write(dir, "adapter_config.json", cfg, err, size);
    } else {
        snprintf(err, size, "out of memory, or a name too long for PEFT's prefix");
    }
    cJSON_Delete(targets);
    cJSON_Delete(cfg);
    free(out);
    free(types);
    return rc;
}

/* ---- --merge ------------------------------------------------------------------ */

/* The base's tensor files: PATH itself, or a folder's model.safetensors, or
 * every shard its model.safetensors.index.json names. */
static int open_base(const char *path, st_file ***files, int *n_files, char *err, size_t size)
{
    struct stat st;
    *files = NULL;
    *n_files = 0;
    if (stat(path, &st) != 0)
        return snprintf(err, size, "--base %s: cannot open it", path), -1;
    char index[FU_PATH_BYTES + 64], one[FU_PATH_BYTES + 64];
    snprintf(index, sizeof index, "%s/model.safetensors.index.json", path);
    snprintf(one, sizeof one, "%s/model.safetensors", path);
    const char *names[1024];
    int n = 0;
    cJSON *root = NULL;
    if (!S_ISDIR(st.st_mode)) {
        names[n++] = path;
    } else if (stat(index, &st) == 0) {
        FILE *f = fopen(index, "rb");
        char *text = NULL;
        long len = f && fseek(f, 0, SEEK_END) == 0 ? ftell(f) : -1;
        if (len > 0 && fseek(f, 0, SEEK_SET) == 0 && (text = calloc((size_t)len + 1, 1)) &&
            fread(text, 1, (size_t)len, f) == (size_t)len)
            root = cJSON_Parse(text);
        free(text);
        if (f)
            fclose(f);
        const cJSON *map = cJSON_GetObjectItemCaseSensitive(root, "weight_map");
        for (const cJSON *e = map ? map->child : NULL; e && n < 1024; e = e->next) {
            int seen = !cJSON_IsString(e);
            for (int k = 0; k < n && !seen; k++)
                seen = strcmp(names[k], e->valuestring) == 0;
            if (!seen)
                names[n++] = e->valuestring;
        }
        if (n == 0) {
            cJSON_Delete(root);
            return snprintf(err, size, "%s: no weight_map naming its shards", index), -1;
        }
    } else {
        names[n++] = one;
    }
    *files = calloc((size_t)n + 1, sizeof **files);
    int rc = *files ? 0 : -1;
    for (int k = 0; k < n && rc == 0; k++) {
        char file[2 * FU_PATH_BYTES];
        if (names[k] == path || names[k] == one)
            snprintf(file, sizeof file, "%s", names[k]);
        else
            snprintf(file, sizeof file, "%s/%s", path, names[k]);
        if (!((*files)[k] = st_open(file, err, size)))
            rc = -1;
        else
            (*n_files)++;
    }
    cJSON_Delete(root);
    return rc;
}

/* Base tensor `name` (or "transformer." + name, as GPT-2 folders have it)
 * widened to f32 into a malloc'd buffer of the shape *shape gets. */
static float *read_base(st_file *const *files, int n_files, const char *name, st_tensor *shape, char *err, size_t size)
{
    char prefixed[ST_NAME_MAX + 16];
    snprintf(prefixed, sizeof prefixed, "transformer.%s", name);
    for (int k = 0; k < n_files; k++) {
        const char *as = st_find(files[k], name, shape) ? name : st_find(files[k], prefixed, shape) ? prefixed : NULL;
        if (!as)
            continue;
        int64_t count = 1;
        for (int d = 0; d < shape->rank; d++)
            count *= shape->dim[d];
        float *data = malloc((size_t)count * sizeof *data + 1);
        st_target t = { .name = as, .dtype = ST_F32, .rank = shape->rank, .dst = data };
        memcpy(t.dim, shape->dim, sizeof t.dim);
        if (!data || st_load(files[k], &t, 1, err, size) != 0) {
            free(data);
            return NULL;
        }
        return data;
    }
    snprintf(err, size, "--base: no tensor '%s'", name);
    return NULL;
}

int export_lora_merge(const st_tensor *w, int n, const char *model, const char *hypers, const char *frozen,
                      const char *base, st_tensor **merged, int *n_merged, float ***owned, char *err, size_t size)
{
    double alpha;
    int64_t rank;
    *merged = NULL;
    *n_merged = 0;
    *owned = NULL;
    alpha = rank = 1; /* --freeze alone: no adapters, the base and the trained weights */
    if (export_lora_count(w, n) > 0 && lora_settings(w, n, hypers, &alpha, &rank, err, size))
        return -1;
    if (!frozen || !*frozen)
        return snprintf(err, size, "the checkpoint records no base weights (fusion.frozen): nothing to merge onto"), -1;
    int transposed = strcmp(model, "gpt2") == 0; /* Conv1D: W [in, out] */
    float scale = (float)(alpha / (double)rank);
    st_file **files = NULL;
    int n_files = 0, lines = 0;
    for (const char *p = frozen; *p; p++)
        lines += *p == '\n';
    st_tensor *out = calloc((size_t)(lines + 1 + n) + 1, sizeof *out); /* a last line may lack its newline */
    float **data = calloc((size_t)lines + 2, sizeof *data);
    int k = 0, rc = out && data ? open_base(base, &files, &n_files, err, size) : -1;
    for (const char *line = frozen, *eol; rc == 0 && line && *line; line = eol ? eol + 1 : NULL) {
        char name[ST_NAME_MAX], hash[17];
        eol = strchr(line, '\n');
        int len = (int)(eol ? (size_t)(eol - line) : strlen(line)) - 17;
        if (len <= 0 || len >= (int)sizeof name || line[16] != ' ' || strspn(line, "0123456789abcdef") != 16) {
            rc = -1, snprintf(err, size, "fusion.frozen: a line that is not \"HASH NAME\"");
            break;
        }
        snprintf(name, sizeof name, "%.*s", len, line + 17);
        snprintf(hash, sizeof hash, "%.16s", line);
        if (find(out, k, name))
            continue; /* recorded by each replica that holds it */
        st_tensor t;
        float *x = read_base(files, n_files, name, &t, err, size);
        if (!x) {
            rc = -1;
            break;
        }
        data[k] = x;
        int64_t count = 1;
        for (int d = 0; d < t.rank; d++)
            count *= t.dim[d];
        char mine[17];
        snprintf(mine, sizeof mine, "%016llx", (unsigned long long)XXH3_64bits(x, (size_t)count * sizeof *x));
        if (strcmp(mine, hash) != 0) {
            rc = -1, snprintf(err, size,
                              "--base %s: '%s' is not the weight the adapters were trained on (it hashes to %s, "
                              "the checkpoint's record to %s)",
                              base, name, mine, hash);
            break;
        }
        /* W += scale · B A  (B [out, r], A [r, in]); GPT-2's W [in, out]: W += scale · (B A)ᵀ. */
        char a_name[ST_NAME_MAX + 16], b_name[ST_NAME_MAX + 16];
        size_t stem = ends_with(name, ".weight") ? strlen(name) - 7 : 0;
        snprintf(a_name, sizeof a_name, "%.*s%s", (int)stem, name, LORA_A);
        snprintf(b_name, sizeof b_name, "%.*s%s", (int)stem, name, LORA_B);
        const st_tensor *A = stem ? find(w, n, a_name) : NULL, *B = stem ? find(w, n, b_name) : NULL;
        if (A && B) {
            int64_t out_f = B->dim[0], in_f = A->dim[1], r = A->dim[0];
            if (t.rank != 2 || t.dim[transposed ? 1 : 0] != out_f || t.dim[transposed ? 0 : 1] != in_f) {
                rc = -1,
                snprintf(err, size, "'%s' is not [%s] for its adapters", name, transposed ? "in, out" : "out, in");
                break;
            }
            const float *a = (const float *)A->data, *b = (const float *)B->data;
            if (transposed) /* x [in, out] += scale · Aᵀ Bᵀ */
                cblas_sgemm(CblasRowMajor, CblasTrans, CblasTrans, (blasint)in_f, (blasint)out_f, (blasint)r,
                            (float)scale, a, (blasint)in_f, b, (blasint)r, 1.0f, x, (blasint)out_f);
            else /* x [out, in] += scale · B A */
                cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (blasint)out_f, (blasint)in_f, (blasint)r,
                            (float)scale, b, (blasint)r, a, (blasint)in_f, 1.0f, x, (blasint)in_f);
        }
        t.data = x;
        t.dtype = ST_F32;
        snprintf(t.name, sizeof t.name, "%s", name);
        out[k++] = t;
    }
    for (int i = 0; i < n && rc == 0; i++) /* the trained parameters that are not adapters */
        if (!ends_with(w[i].name, LORA_A) && !ends_with(w[i].name, LORA_B))
            out[k++] = w[i];
    for (int f = 0; f < n_files; f++)
        st_close(files[f]);
    free(files);
    *merged = out;
    *n_merged = k;
    *owned = data;
    return rc;
}
