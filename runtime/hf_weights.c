/* hf_weights.c: --init PATH, the weights a run starts from (checkpoint.h:
 * read_init_weights): a .safetensors file, or a Hugging Face model folder,
 * which holds either model.safetensors or model.safetensors.index.json and
 * the shards its weight_map names:
 *
 *     {"metadata": {...},
 *      "weight_map": {"model.embed_tokens.weight": "model-00001-of-00002.safetensors", ...}}
 *
 * Each parameter this device holds is read by name from the shard the map
 * names (F32, BF16 or F16, widened to fp32); shards that name only other
 * devices' parameters (or tensors the model does not have, such as a tied
 * checkpoint's lm_head.weight) are not opened.  Every shard needed must be
 * there before any is read; one shard is in memory at a time.
 *
 * A parameter is found by its name, or by its name after "transformer."
 * (GPT-2 checkpoints saved from GPT2LMHeadModel prefix every name so); the
 * tensors the model does not have (a tied lm_head.weight, GPT-2's
 * attn.bias and attn.masked_bias buffers) are not read.
 *
 * --init may be given several times (a base model, then adapters): each
 * source gives the parameters it holds, a later one's over an earlier
 * one's.  A parameter in none of them is an error naming it, except, when
 * the model has frozen parameters (--freeze, --lora: a fine-tune), a
 * trained one, which starts from its initialiser (LoRA's A random, B
 * zero) and is counted in a line; a frozen one must always be found.
 *
 * A fusion checkpoint (a --save folder, its newest complete step; or one
 * step-N folder) is a source too: each of its parts, verified against its
 * MANIFEST, read by name.
 *
 * What it deliberately is not: a loader of Hugging Face's other formats
 * (pytorch_model.bin, .pt): safetensors only. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <cjson/cJSON.h>

#include "../ir/ir.h"
#include "checkpoint.h"
#include "checkpoint_store.h"
#include "safetensors.h"
#include "../ir/folders.h" /* FU_PATH_BYTES */

/* A tensor's ir_dtype is its safetensors dtype (as_st in checkpoint.c relies on it too). */
_Static_assert((int)ST_F32 == DT_F32 && (int)ST_I32 == DT_I32 && (int)ST_F16 == DT_F16 && (int)ST_BF16 == DT_BF16,
               "st_dtype and ir_dtype number the dtypes alike");

#define HF_INDEX  "model.safetensors.index.json"
#define HF_SINGLE "model.safetensors"
#define HF_PREFIX "transformer." /* GPT2LMHeadModel's names of GPT2Model's tensors */

static int is_file(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 && S_ISREG(st.st_mode);
}

/* The whole text of path (NUL-terminated), or NULL with the reason printed. */
static char *read_text(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        fail("%s: cannot open: %s", path, strerror(errno));
        return NULL;
    }
    char *text = NULL;
    long size = fseek(f, 0, SEEK_END) == 0 ? ftell(f) : -1;
    if (size >= 0 && size <= (1L << 28) && fseek(f, 0, SEEK_SET) == 0 && (text = malloc((size_t)size + 1)) &&
        fread(text, 1, (size_t)size, f) == (size_t)size)
        text[size] = '\0';
    else {
        free(text);
        text = NULL;
        fail("%s: cannot read it", path);
    }
    fclose(f);
    return text;
}

/* The parameters of p whose shard is `file` (shard_of NULL: all of them)
 * that path holds, each by its name or HF_PREFIX and its name; found[i]
 * set for each. */
static int read_params(program *p, const char *path, const char *file, const char *const *shard_of, char *found,
                       int frozen_only)
{
    char why[512];
    st_file *f = st_open(path, why, sizeof why);
    if (!f)
        return fail("%s", why);
    st_target *list = calloc((size_t)p->manifest.n_tensors + 1, sizeof *list);
    char(*names)[ST_NAME_MAX] = calloc((size_t)p->manifest.n_tensors + 1, sizeof *names);
    if (!list || !names) {
        st_close(f);
        free(list);
        free(names);
        return fail("out of memory reading %s", path);
    }
    int n = 0;
    for (int32_t i = 0; i < p->manifest.n_tensors; i++) {
        const rt_tensor_info *ti = &p->tensors[i];
        if (ti->role != ROLE_PARAM || (frozen_only && !ti->frozen) ||
            (shard_of && (!shard_of[i] || strcmp(shard_of[i], file) != 0)))
            continue;
        st_tensor there;
        snprintf(names[n], sizeof names[n], "%s%s", HF_PREFIX, ti->name);
        int plain = st_find(f, ti->name, &there) != 0, prefixed = st_find(f, names[n], &there) != 0;
        if (!plain && !prefixed)
            continue; /* not in this source */
        found[i] = 1;
        st_target *t = &list[n];
        t->name = plain ? ti->name : names[n];
        t->dtype = (st_dtype)ti->dtype; /* f32, or a frozen parameter's 16 bits */
        t->rank = ti->t.rank;
        for (int k = 0; k < ti->t.rank; k++)
            t->dim[k] = ti->t.dim[k];
        t->dst = p->arena + ti->t.offset;
        n++;
    }
    int rc = st_load(f, list, n, why, sizeof why);
    st_close(f);
    free(list);
    free(names);
    return rc ? fail("%s", why) : 0;
}

/* dir/model.safetensors.index.json and its shards. */
static int read_sharded(program *p, const char *dir, const char *index_path, char *found, int frozen_only)
{
    char *text = read_text(index_path);
    if (!text)
        return 1;
    cJSON *root = cJSON_Parse(text);
    free(text);
    const cJSON *map = cJSON_GetObjectItemCaseSensitive(root, "weight_map");
    const char **shard_of = calloc((size_t)p->manifest.n_tensors + 1, sizeof *shard_of);
    int rc = 0;
    if (!shard_of)
        rc = fail("out of memory reading %s", index_path);
    else if (!cJSON_IsObject(root))
        rc = fail("%s: not a JSON object", index_path);
    else if (!cJSON_IsObject(map))
        rc = fail("%s: no weight_map (an object: each tensor's file)", index_path);
    /* Every parameter's shard, named and there, before any is read. */
    for (int32_t i = 0; rc == 0 && i < p->manifest.n_tensors; i++) {
        const rt_tensor_info *ti = &p->tensors[i];
        if (ti->role != ROLE_PARAM || (frozen_only && !ti->frozen))
            continue;
        const cJSON *file = cJSON_GetObjectItemCaseSensitive(map, ti->name);
        char path[FU_PATH_BYTES + 256], prefixed[ST_NAME_MAX + 16];
        snprintf(prefixed, sizeof prefixed, "%s%s", HF_PREFIX, ti->name);
        if (!file)
            file = cJSON_GetObjectItemCaseSensitive(map, prefixed);
        if (!file)
            continue; /* not in this source */
        if (!cJSON_IsString(file) || !file->valuestring[0] || strchr(file->valuestring, '/'))
            rc = fail("%s: weight_map's '%s' is not a file name in the folder", index_path, ti->name);
        else if (snprintf(path, sizeof path, "%s/%s", dir, file->valuestring) >= (int)sizeof path)
            rc = fail("%s/%s: the path is too long", dir, file->valuestring);
        else if (!is_file(path))
            rc = fail("%s: named by %s for '%s', missing", path, HF_INDEX, ti->name);
        else
            shard_of[i] = file->valuestring;
    }
    /* Each shard once, in the order the parameters first need them. */
    for (int32_t i = 0; rc == 0 && i < p->manifest.n_tensors; i++) {
        int first = shard_of[i] != NULL;
        for (int32_t j = 0; first && j < i; j++)
            first = !shard_of[j] || strcmp(shard_of[j], shard_of[i]) != 0;
        if (!first)
            continue;
        char path[FU_PATH_BYTES + 256];
        snprintf(path, sizeof path, "%s/%s", dir, shard_of[i]);
        rc = read_params(p, path, shard_of[i], shard_of, found, frozen_only);
    }
    free(shard_of);
    cJSON_Delete(root);
    return rc ? 1 : 0;
}

/* A fusion checkpoint as a source: a step folder (it has a MANIFEST), or a
 * --save folder's newest complete step; each part, verified, read by name. */
static int read_checkpoint(program *p, const char *path, char *found, int frozen_only, int *was)
{
    char step_dir[FU_PATH_BYTES + 64], manifest[FU_PATH_BYTES + 80], why[FU_PATH_BYTES + 300];
    int64_t *steps = NULL;
    snprintf(manifest, sizeof manifest, "%s/%s", path, CKPT_MANIFEST);
    *was = 1;
    if (is_file(manifest))
        snprintf(step_dir, sizeof step_dir, "%s", path);
    else if (ckpt_list_steps(path, 1, &steps, why, sizeof why) > 0)
        ckpt_step_dir(path, steps[0], step_dir, sizeof step_dir);
    else
        *was = 0;
    free(steps);
    if (!*was)
        return 0;
    ckpt_manifest m;
    if (ckpt_manifest_read(step_dir, &m, why, sizeof why) != 0)
        return fail("%s", why);
    int rc = 0;
    for (int32_t k = 0; k < m.n_parts && rc == 0; k++) {
        char part[2 * FU_PATH_BYTES];
        snprintf(part, sizeof part, "%s/%s", step_dir, m.parts[k].name);
        if (ckpt_verify_part(step_dir, &m, m.parts[k].name, why, sizeof why) != 0)
            rc = fail("%s", why);
        else
            rc = read_params(p, part, NULL, NULL, found, frozen_only);
    }
    ckpt_manifest_free(&m);
    return rc;
}

/* One --init source: a file, a Hugging Face folder or a fusion checkpoint. */
static int read_source(program *p, const char *path, char *found, int frozen_only)
{
    struct stat st;
    if (stat(path, &st) != 0)
        return fail("%s: cannot open: %s", path, strerror(errno));
    if (!S_ISDIR(st.st_mode))
        return read_params(p, path, NULL, NULL, found, frozen_only);
    char index[FU_PATH_BYTES + 64], single[FU_PATH_BYTES + 64];
    snprintf(index, sizeof index, "%s/%s", path, HF_INDEX);
    snprintf(single, sizeof single, "%s/%s", path, HF_SINGLE);
    if (is_file(index))
        return read_sharded(p, path, index, found, frozen_only);
    if (is_file(single))
        return read_params(p, single, NULL, NULL, found, frozen_only);
    int was = 0, rc = read_checkpoint(p, path, found, frozen_only, &was);
    if (was)
        return rc;
    return fail("%s: a folder with neither %s nor %s (a Hugging Face model folder holds one), nor a fusion "
                "checkpoint (a MANIFEST, or step-N folders with one)",
                path, HF_SINGLE, HF_INDEX);
}

int read_init_weights(program *p, const char *const *paths, int n_paths, int frozen_only)
{
    int32_t n = p->manifest.n_tensors, frozen = program_frozen_count(p), kept = 0;
    char *found = calloc((size_t)n + 1, 1);
    if (!found)
        return fail("out of memory reading --init");
    int rc = 0;
    for (int k = 0; k < n_paths && rc == 0; k++)
        rc = read_source(p, paths[k], found, frozen_only);
    const char *first_kept = NULL;
    for (int32_t i = 0; i < n && rc == 0; i++) {
        const rt_tensor_info *ti = &p->tensors[i];
        if (ti->role != ROLE_PARAM || found[i] || (frozen_only && !ti->frozen))
            continue;
        if (ti->frozen || frozen == 0) {
            rc = n_paths == 1 ? fail("%s: has no parameter '%s'%s", paths[0], ti->name,
                                     ti->frozen ? " (frozen: it must come from --init)" : "")
                              : fail("--init: parameter '%s' is in none of the %d sources (%s, ...)%s", ti->name,
                                     n_paths, paths[0], ti->frozen ? "; frozen, it must come from --init" : "");
        } else if (kept++ == 0) {
            first_kept = ti->name;
        }
    }
    if (rc == 0 && kept > 0)
        printf("fusion: --init: %d trained parameter%s in none of the sources start%s from %s initialiser (%s%s)\n",
               kept, kept == 1 ? "" : "s", kept == 1 ? "s" : "", kept == 1 ? "its" : "their", first_kept,
               kept > 1 ? ", ..." : "");
    free(found);
    return rc;
}
