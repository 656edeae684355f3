/* hf_config.h: a Hugging Face config.json of a Llama-architecture model as
 * the hyper-parameters of models/llama.xml (fusionc's --hf-config), the
 * settings --set would make:
 *
 *     num_hidden_layers -> layers        hidden_size -> dim
 *     num_attention_heads -> heads       num_key_value_heads -> kv_heads (default: heads)
 *     intermediate_size -> ffn           vocab_size -> vocab
 *     rope_theta -> rope_base (10000)    rms_norm_eps -> norm_eps (1e-6)
 *     max_position_embeddings -> ctx (2048)
 *     tie_word_embeddings -> tie (false: 0)
 *     rope_scaling {"rope_type": "llama3", factor, low_freq_factor, high_freq_factor,
 *                   original_max_position_embeddings}
 *         -> rope_factor, rope_low_freq, rope_high_freq, rope_old_ctx (absent or null: rope_factor 0)
 *
 * (the defaults are Hugging Face's LlamaConfig's, for the fields a config
 * may leave out; the five sizes must be there).  What fusion's Llama does
 * not compute is refused by name, never ignored: a model_type or
 * architecture other than Llama's (Mistral's is the same mathematics
 * without a sliding window, and is taken then), a rope_scaling other than
 * llama3's, attention_bias or mlp_bias true, a hidden_act other than silu,
 * a head_dim other than hidden_size / num_attention_heads, dropout in
 * attention.  Fields that do not change the mathematics (token ids,
 * torch_dtype, initializer_range, pretraining_tp, ...) are not read.
 *
 * What it deliberately is not: a model reader.  It makes name=value text
 * only; models/llama.xml's hypers and asserts do the rest, and --set given
 * beside it wins (options.c puts the config's settings first). */
#ifndef FUSION_TOOLS_HF_CONFIG_H
#define FUSION_TOOLS_HF_CONFIG_H

#include <stddef.h>

#define HF_CONFIG_MAX 16

typedef struct {
    const char *field; /* the config.json field it comes from ("num_key_value_heads") */
    char text[96];     /* "kv_heads=4"                                              */
} hf_setting;

/* Read path; fill out[0..n) and return n, or -1 with a one-line reason
 * naming path in why, e.g.
 *   "config.json: rope_scaling type 'yarn' is not supported (llama3 only)" */
int hf_config_read(const char *path, hf_setting out[HF_CONFIG_MAX], char *why, size_t n);

/* The other way (fusionc export): Llama's config.json (transformers'
 * LlamaConfig) from models/llama.xml's hyper-parameters as a checkpoint
 * records them ("name=value ...", fusion.hypers), by the same names as
 * above, the weights in torch_dtype ("float32", "bfloat16", "float16").
 * NULL with why when a hyper-parameter is missing. */
struct cJSON;
struct cJSON *hf_config_llama(const char *hypers, const char *torch_dtype, char *why, size_t n);

#endif
