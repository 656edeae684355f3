/* hf_config.c: a Hugging Face config.json as the hyper-parameters of
 * models/llama.xml or models/gpt2.xml (hf_config.h). */
#include "hf_config.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

typedef struct {
    const char *path;
    const char *model_file, *model; /* what the config is for: its path and <model name=...>, or NULL */
    const char *family;             /* what the config says it is: "llama" or "gpt2"                  */
    const cJSON *root;
    hf_setting *out;
    int n;
    char *why;
    size_t why_size;
} reader;

static int refuse(reader *r, const char *fmt, ...)
{
    int at = snprintf(r->why, r->why_size, "%s: ", r->path);
    if (at < 0 || (size_t)at >= r->why_size)
        return -1;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(r->why + at, r->why_size - (size_t)at, fmt, ap);
    va_end(ap);
    return -1;
}

/* A field that is there and not null. */
static const cJSON *field(const cJSON *obj, const char *name)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, name);
    return v && !cJSON_IsNull(v) ? v : NULL;
}

static int add(reader *r, const char *from, const char *fmt, ...)
{
    if (r->n == HF_CONFIG_MAX)
        return refuse(r, "more than %d settings", HF_CONFIG_MAX);
    hf_setting *s = &r->out[r->n++];
    s->field = from;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(s->text, sizeof s->text, fmt, ap);
    va_end(ap);
    return 0;
}

/* name: a positive integer (required, or def when absent and def > 0). */
static int count(reader *r, const cJSON *obj, const char *name, long long def, long long *v)
{
    const cJSON *x = field(obj, name);
    if (!x) {
        if (def > 0) {
            *v = def;
            return 0;
        }
        return refuse(r, "no '%s' (a %s config.json has it)", name, strcmp(r->family, "gpt2") == 0 ? "GPT-2" : "Llama");
    }
    double d = cJSON_IsNumber(x) ? x->valuedouble : NAN;
    if (!(d >= 1 && d <= 1e12 && d == floor(d)))
        return refuse(r, "'%s' must be a positive integer", name);
    *v = (long long)d;
    return 0;
}

/* name: a positive number, def when absent. */
static int number(reader *r, const cJSON *obj, const char *name, double def, double *v)
{
    const cJSON *x = field(obj, name);
    if (!x) {
        *v = def;
        return 0;
    }
    if (!cJSON_IsNumber(x) || !(x->valuedouble > 0) || !isfinite(x->valuedouble))
        return refuse(r, "'%s' must be a positive number", name);
    *v = x->valuedouble;
    return 0;
}

/* name: true or false, def when absent. */
static int flag(reader *r, const cJSON *obj, const char *name, int def, int *v)
{
    const cJSON *x = field(obj, name);
    if (!x) {
        *v = def;
        return 0;
    }
    if (!cJSON_IsBool(x))
        return refuse(r, "'%s' must be true or false", name);
    *v = cJSON_IsTrue(x);
    return 0;
}

/* model_type and architectures: Llama's (or Mistral's without a sliding
 * window).  *mistral says which. */
static int check_architecture(reader *r, int *mistral)
{
    const cJSON *type = field(r->root, "model_type"), *archs = field(r->root, "architectures");
    const char *t = cJSON_IsString(type) ? type->valuestring : NULL;
    if (type && !t)
        return refuse(r, "model_type must be a string");
    *mistral = t && strcmp(t, "mistral") == 0;
    if (t && strcmp(t, "qwen2") == 0)
        return refuse(r, "model_type 'qwen2' is not supported: its q, k and v projections have biases (llama, "
                         "mistral, gpt2)");
    if (t && strcmp(t, "llama") != 0 && !*mistral)
        return refuse(r, "model_type '%s' is not supported (llama, mistral, gpt2)", t);
    if (archs && !cJSON_IsArray(archs))
        return refuse(r, "architectures must be a list of names");
    int n_arch = archs ? cJSON_GetArraySize(archs) : 0;
    for (int i = 0; i < n_arch; i++) {
        const cJSON *a = cJSON_GetArrayItem(archs, i);
        const char *name = cJSON_IsString(a) ? a->valuestring : "?";
        int llama = strcmp(name, "LlamaForCausalLM") == 0, mis = strcmp(name, "MistralForCausalLM") == 0;
        if (!llama && !mis)
            return refuse(
                r, "architecture '%s' is not supported (LlamaForCausalLM, MistralForCausalLM, GPT2LMHeadModel)", name);
        if (!t)
            *mistral = mis;
    }
    if (!t && n_arch == 0)
        return refuse(r, "neither model_type nor architectures says what model it is (llama, mistral, gpt2)");
    if (*mistral) { /* Mistral is Llama with a sliding window: the same when there is none */
        const cJSON *w = cJSON_GetObjectItemCaseSensitive(r->root, "sliding_window");
        if (!w)
            return refuse(r, "mistral without sliding_window: Hugging Face's default is a 4096-token window, which "
                             "fusion does not compute (null: none)");
        const cJSON *ctx = field(r->root, "max_position_embeddings");
        if (!cJSON_IsNull(w) &&
            !(cJSON_IsNumber(w) && ctx && cJSON_IsNumber(ctx) && w->valuedouble >= ctx->valuedouble))
            return refuse(r, "sliding_window %g is not supported (attention over the whole context only)",
                          cJSON_IsNumber(w) ? w->valuedouble : NAN);
    }
    return 0;
}

/* What fusion's Llama does not compute, by name. */
static int check_unsupported(reader *r, long long dim, long long heads)
{
    int bias = 0;
    if (flag(r, r->root, "attention_bias", 0, &bias))
        return -1;
    if (bias)
        return refuse(r, "attention_bias true is not supported (Llama's projections have no biases)");
    if (flag(r, r->root, "mlp_bias", 0, &bias))
        return -1;
    if (bias)
        return refuse(r, "mlp_bias true is not supported (Llama's MLP has no biases)");
    const cJSON *act = field(r->root, "hidden_act");
    if (act && !(cJSON_IsString(act) && strcmp(act->valuestring, "silu") == 0))
        return refuse(r, "hidden_act '%s' is not supported (silu only)",
                      cJSON_IsString(act) ? act->valuestring : "(not a string)");
    const cJSON *hd = field(r->root, "head_dim");
    if (hd && !(cJSON_IsNumber(hd) && heads > 0 && hd->valuedouble * (double)heads == (double)dim))
        return refuse(r, "head_dim %g is not supported: fusion's heads are hidden_size / num_attention_heads = %lld",
                      cJSON_IsNumber(hd) ? hd->valuedouble : NAN, heads > 0 ? dim / heads : 0);
    const cJSON *drop = field(r->root, "attention_dropout");
    if (drop && !(cJSON_IsNumber(drop) && drop->valuedouble == 0.0))
        return refuse(r, "attention_dropout %g is not supported (0 only)",
                      cJSON_IsNumber(drop) ? drop->valuedouble : NAN);
    return 0;
}

/* rope_scaling: null, absent or "default": no scaling; "llama3": its four numbers. */
static int read_rope_scaling(reader *r)
{
    const cJSON *rs = field(r->root, "rope_scaling");
    const cJSON *kind = rs ? field(rs, "rope_type") : NULL;
    if (rs && !kind)
        kind = field(rs, "type"); /* older configs */
    if (rs && !cJSON_IsObject(rs))
        return refuse(r, "rope_scaling must be an object or null");
    if (rs && !cJSON_IsString(kind))
        return refuse(r, "rope_scaling has no rope_type (llama3 only)");
    if (!rs || strcmp(kind->valuestring, "default") == 0)
        return add(r, "rope_scaling", "rope_factor=0");
    if (strcmp(kind->valuestring, "llama3") != 0)
        return refuse(r, "rope_scaling type '%s' is not supported (llama3 only)", kind->valuestring);
    static const char *const names[4] = { "factor", "low_freq_factor", "high_freq_factor",
                                          "original_max_position_embeddings" };
    static const char *const hypers[4] = { "rope_factor", "rope_low_freq", "rope_high_freq", "rope_old_ctx" };
    double v[4];
    for (int k = 0; k < 4; k++) {
        if (!field(rs, names[k]))
            return refuse(r, "rope_scaling llama3 has no '%s'", names[k]);
        if (number(r, rs, names[k], 0, &v[k]))
            return -1;
    }
    if (!(v[2] > v[1]))
        return refuse(r, "rope_scaling: high_freq_factor %g must be greater than low_freq_factor %g", v[2], v[1]);
    for (int k = 0; k < 4; k++)
        if (add(r, "rope_scaling", "%s=%.17g", hypers[k], v[k]))
            return -1;
    return 0;
}

static int read_llama(reader *r)
{
    int mistral = 0, tie = 0;
    long long layers, dim, heads, kv, ffn, vocab, ctx;
    double base, eps;
    if (check_architecture(r, &mistral) || count(r, r->root, "num_hidden_layers", 0, &layers) ||
        count(r, r->root, "hidden_size", 0, &dim) || count(r, r->root, "num_attention_heads", 0, &heads) ||
        count(r, r->root, "num_key_value_heads", heads, &kv) || count(r, r->root, "intermediate_size", 0, &ffn) ||
        count(r, r->root, "vocab_size", 0, &vocab) || count(r, r->root, "max_position_embeddings", 2048, &ctx) ||
        number(r, r->root, "rope_theta", 10000.0, &base) || number(r, r->root, "rms_norm_eps", 1e-6, &eps) ||
        flag(r, r->root, "tie_word_embeddings", 0, &tie) || check_unsupported(r, dim, heads))
        return -1;
    if (add(r, "num_hidden_layers", "layers=%lld", layers) || add(r, "hidden_size", "dim=%lld", dim) ||
        add(r, "num_attention_heads", "heads=%lld", heads) || add(r, "num_key_value_heads", "kv_heads=%lld", kv) ||
        add(r, "intermediate_size", "ffn=%lld", ffn) || add(r, "vocab_size", "vocab=%lld", vocab) ||
        add(r, "max_position_embeddings", "ctx=%lld", ctx) || add(r, "rope_theta", "rope_base=%.17g", base) ||
        add(r, "rms_norm_eps", "norm_eps=%.17g", eps) || add(r, "tie_word_embeddings", "tie=%d", tie))
        return -1;
    return read_rope_scaling(r);
}

/* ---- GPT-2 --------------------------------------------------------------- */

/* name: absent (def), or exactly `want`; else refused naming what it is. */
static int must_be(reader *r, const char *name, int want, int def)
{
    int v = def;
    if (flag(r, r->root, name, def, &v))
        return -1;
    if (v != want)
        return refuse(r, "%s %s is not supported (models/gpt2.xml: %s only)", name, v ? "true" : "false",
                      want ? "true" : "false");
    return 0;
}

/* GPT2Config: n_layer, n_embd, n_head, vocab_size, n_positions (n_ctx in
 * older configs) and layer_norm_epsilon; what models/gpt2.xml does not
 * compute refused by name. */
static int read_gpt2(reader *r)
{
    const cJSON *archs = field(r->root, "architectures");
    if (archs && !cJSON_IsArray(archs))
        return refuse(r, "architectures must be a list of names");
    for (int i = 0; archs && i < cJSON_GetArraySize(archs); i++) {
        const cJSON *a = cJSON_GetArrayItem(archs, i);
        const char *name = cJSON_IsString(a) ? a->valuestring : "?";
        if (strcmp(name, "GPT2LMHeadModel") != 0)
            return refuse(r, "architecture '%s' is not supported (GPT2LMHeadModel)", name);
    }
    long long layers, dim, heads, vocab, ctx;
    double eps;
    const char *ctx_field = !field(r->root, "n_positions") && field(r->root, "n_ctx") ? "n_ctx" : "n_positions";
    if (count(r, r->root, "n_layer", 0, &layers) || count(r, r->root, "n_embd", 0, &dim) ||
        count(r, r->root, "n_head", 0, &heads) || count(r, r->root, "vocab_size", 0, &vocab) ||
        count(r, r->root, ctx_field, 0, &ctx) || number(r, r->root, "layer_norm_epsilon", 1e-5, &eps))
        return -1;
    const cJSON *act = field(r->root, "activation_function");
    const char *a = act && cJSON_IsString(act) ? act->valuestring : act ? "(not a string)" : "gelu_new";
    if (strcmp(a, "gelu_new") != 0 && strcmp(a, "gelu_pytorch_tanh") != 0)
        return refuse(r, "activation_function '%s' is not supported (gelu_new: gelu's tanh form)", a);
    const cJSON *inner = field(r->root, "n_inner");
    if (inner && !(cJSON_IsNumber(inner) && inner->valuedouble == 4.0 * (double)dim))
        return refuse(r,
                      "n_inner %g is not supported (null or 4 * n_embd = %lld: models/gpt2.xml's MLP is 4 * dim wide)",
                      cJSON_IsNumber(inner) ? inner->valuedouble : NAN, 4 * dim);
    if (must_be(r, "tie_word_embeddings", 1, 1) || must_be(r, "scale_attn_weights", 1, 1) ||
        must_be(r, "scale_attn_by_inverse_layer_idx", 0, 0) || must_be(r, "reorder_and_upcast_attn", 0, 0) ||
        must_be(r, "add_cross_attention", 0, 0))
        return -1;
    if (add(r, "n_layer", "layers=%lld", layers) || add(r, "n_embd", "dim=%lld", dim) ||
        add(r, "n_head", "heads=%lld", heads) || add(r, "vocab_size", "vocab=%lld", vocab) ||
        add(r, ctx_field, "ctx=%lld", ctx) || add(r, "layer_norm_epsilon", "norm_eps=%.17g", eps))
        return -1;
    return 0;
}

/* ---- which model ------------------------------------------------------------ */

/* "gpt2" when model_type or an architecture says GPT-2, else "llama" (the
 * Llama reader refuses what is neither). */
static const char *config_family(const cJSON *root)
{
    const cJSON *type = field(root, "model_type"), *archs = field(root, "architectures");
    if (cJSON_IsString(type))
        return strcmp(type->valuestring, "gpt2") == 0 ? "gpt2" : "llama";
    for (int i = 0; cJSON_IsArray(archs) && i < cJSON_GetArraySize(archs); i++) {
        const cJSON *a = cJSON_GetArrayItem(archs, i);
        if (cJSON_IsString(a) && strncmp(a->valuestring, "GPT2", 4) == 0)
            return "gpt2";
    }
    return "llama";
}

static int read_config(reader *r)
{
    const char *family = r->family = config_family(r->root);
    int gpt2 = strcmp(family, "gpt2") == 0;
    if (r->model && strcmp(r->model, "gpt2") != 0 && strcmp(r->model, "llama") != 0)
        return refuse(r,
                      "%s is model '%s': a Hugging Face config.json sets the hyper-parameters of models/llama.xml "
                      "or models/gpt2.xml only",
                      r->model_file, r->model);
    if (!gpt2) { /* another model_type is refused by name first */
        reader probe = *r;
        char why[8];
        int mistral;
        probe.why = why, probe.why_size = sizeof why;
        if (check_architecture(&probe, &mistral))
            return check_architecture(r, &mistral);
    }
    if (r->model && strcmp(r->model, family) != 0) {
        const cJSON *type = field(r->root, "model_type"),
                    *arch = cJSON_GetArrayItem(field(r->root, "architectures"), 0);
        char said[128];
        if (cJSON_IsString(type))
            snprintf(said, sizeof said, "model_type '%s'", type->valuestring);
        else
            snprintf(said, sizeof said, "architecture '%s'", cJSON_IsString(arch) ? arch->valuestring : "?");
        return refuse(r, "a %s config (%s) given to %s, which is model '%s' (use models/%s.xml)", family, said,
                      r->model_file, r->model, family);
    }
    return gpt2 ? read_gpt2(r) : read_llama(r);
}

int hf_config_read(const char *path, const char *model_file, const char *model, hf_setting out[HF_CONFIG_MAX],
                   char *why, size_t n)
{
    reader r = { .path = path, .model_file = model_file, .model = model, .out = out, .why = why, .why_size = n };
    FILE *f = fopen(path, "rb");
    if (!f)
        return refuse(&r, "cannot open: %s", strerror(errno));
    char *text = NULL;
    long size = fseek(f, 0, SEEK_END) == 0 ? ftell(f) : -1;
    if (size >= 0 && size <= (1L << 24) && fseek(f, 0, SEEK_SET) == 0 && (text = malloc((size_t)size + 1)) &&
        fread(text, 1, (size_t)size, f) == (size_t)size)
        text[size] = '\0';
    else {
        free(text);
        text = NULL;
    }
    fclose(f);
    if (!text)
        return refuse(&r, size > (1L << 24) ? "larger than 16 MiB: not a config.json" : "cannot read it");
    cJSON *root = cJSON_Parse(text);
    free(text);
    if (!cJSON_IsObject(root)) {
        cJSON_Delete(root);
        return refuse(&r, "not a JSON object");
    }
    r.root = root;
    int rc = read_config(&r);
    cJSON_Delete(root);
    return rc < 0 ? -1 : r.n;
}

/* ---- the other way: config.json from the hyper-parameters (fusionc export) ---- */

double hf_config_hyper(const char *hypers, const char *name)
{
    size_t len = strlen(name);
    for (const char *p = hypers; p && *p;) {
        if (strncmp(p, name, len) == 0 && p[len] == '=')
            return strtod(p + len + 1, NULL);
        p = strchr(p, ' ');
        p = p ? p + 1 : NULL;
    }
    return NAN;
}

static cJSON *config_llama(const char *hypers, const char *torch_dtype, char *err, size_t n)
{
    static const struct {
        const char *hf, *fusion;
        int is_int;
    } fields[] = {
        { "vocab_size", "vocab", 1 },
        { "hidden_size", "dim", 1 },
        { "intermediate_size", "ffn", 1 },
        { "num_hidden_layers", "layers", 1 },
        { "num_attention_heads", "heads", 1 },
        { "num_key_value_heads", "kv_heads", 1 },
        { "max_position_embeddings", "ctx", 1 },
        { "rope_theta", "rope_base", 0 },
        { "rms_norm_eps", "norm_eps", 0 },
    };
    cJSON *c = cJSON_CreateObject();
    cJSON *arch = cJSON_AddArrayToObject(c, "architectures");
    cJSON_AddItemToArray(arch, cJSON_CreateString("LlamaForCausalLM"));
    cJSON_AddStringToObject(c, "model_type", "llama");
    for (size_t i = 0; i < sizeof fields / sizeof fields[0]; i++) {
        double v = hf_config_hyper(hypers, fields[i].fusion);
        if (isnan(v)) {
            snprintf(err, n, "the checkpoint's fusion.hypers has no '%s' (for config.json's %s)", fields[i].fusion,
                     fields[i].hf);
            cJSON_Delete(c);
            return NULL;
        }
        cJSON_AddNumberToObject(c, fields[i].hf, v);
    }
    double tie = hf_config_hyper(hypers, "tie");
    cJSON_AddBoolToObject(c, "tie_word_embeddings", !isnan(tie) && tie != 0);
    cJSON_AddStringToObject(c, "hidden_act", "silu");
    cJSON_AddBoolToObject(c, "attention_bias", 0);
    cJSON_AddBoolToObject(c, "mlp_bias", 0);
    double factor = hf_config_hyper(hypers, "rope_factor");
    if (isnan(factor) || factor == 0) {
        cJSON_AddNullToObject(c, "rope_scaling");
    } else {
        static const char *const names[4] = { "factor", "low_freq_factor", "high_freq_factor",
                                              "original_max_position_embeddings" };
        static const char *const hypers_of[4] = { "rope_factor", "rope_low_freq", "rope_high_freq", "rope_old_ctx" };
        cJSON *rs = cJSON_AddObjectToObject(c, "rope_scaling");
        cJSON_AddStringToObject(rs, "rope_type", "llama3");
        for (int k = 0; k < 4; k++)
            cJSON_AddNumberToObject(rs, names[k], hf_config_hyper(hypers, hypers_of[k]));
    }
    cJSON_AddStringToObject(c, "torch_dtype", torch_dtype);
    cJSON_AddStringToObject(c, "transformers_version", "4.44.0");
    return c;
}

/* GPT2LMHeadModel's config.json (transformers' GPT2Config).  norm_eps is
 * 1e-5 for a checkpoint saved before models/gpt2.xml had it (it was fixed
 * there).  Dropout is 0: fusion trains without it. */
static cJSON *config_gpt2(const char *hypers, const char *torch_dtype, char *err, size_t n)
{
    static const struct {
        const char *hf, *fusion;
    } fields[] = {
        { "vocab_size", "vocab" }, { "n_positions", "ctx" }, { "n_ctx", "ctx" },
        { "n_embd", "dim" },       { "n_layer", "layers" },  { "n_head", "heads" },
    };
    cJSON *c = cJSON_CreateObject();
    cJSON_AddItemToArray(cJSON_AddArrayToObject(c, "architectures"), cJSON_CreateString("GPT2LMHeadModel"));
    cJSON_AddStringToObject(c, "model_type", "gpt2");
    for (size_t i = 0; i < sizeof fields / sizeof fields[0]; i++) {
        double v = hf_config_hyper(hypers, fields[i].fusion);
        if (isnan(v)) {
            snprintf(err, n, "the checkpoint's fusion.hypers has no '%s' (for config.json's %s)", fields[i].fusion,
                     fields[i].hf);
            cJSON_Delete(c);
            return NULL;
        }
        cJSON_AddNumberToObject(c, fields[i].hf, v);
    }
    double eps = hf_config_hyper(hypers, "norm_eps");
    cJSON_AddNumberToObject(c, "layer_norm_epsilon", isnan(eps) ? 1e-5 : eps);
    cJSON_AddStringToObject(c, "activation_function", "gelu_new");
    cJSON_AddNullToObject(c, "n_inner");
    cJSON_AddBoolToObject(c, "tie_word_embeddings", 1);
    cJSON_AddBoolToObject(c, "scale_attn_weights", 1);
    cJSON_AddBoolToObject(c, "scale_attn_by_inverse_layer_idx", 0);
    cJSON_AddBoolToObject(c, "reorder_and_upcast_attn", 0);
    cJSON_AddBoolToObject(c, "add_cross_attention", 0);
    cJSON_AddNumberToObject(c, "attn_pdrop", 0.0);
    cJSON_AddNumberToObject(c, "embd_pdrop", 0.0);
    cJSON_AddNumberToObject(c, "resid_pdrop", 0.0);
    cJSON_AddStringToObject(c, "torch_dtype", torch_dtype);
    cJSON_AddStringToObject(c, "transformers_version", "4.44.0");
    return c;
}

cJSON *hf_config_write(const char *model, const char *hypers, const char *torch_dtype, char *err, size_t n)
{
    if (strcmp(model, "llama") == 0)
        return config_llama(hypers, torch_dtype, err, n);
    if (strcmp(model, "gpt2") == 0)
        return config_gpt2(hypers, torch_dtype, err, n);
    snprintf(err, n, "model '%s' has no Hugging Face architecture here (llama, gpt2)", model);
    return NULL;
}
