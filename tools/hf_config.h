/* hf_config.h: a Hugging Face config.json as the hyper-parameters of the
 * model it describes (fusionc's --hf-config), the settings --set would make.
 * Two families, each for its own model file:
 *
 * Llama (model_type "llama", or "mistral" without a sliding window) for
 * models/llama.xml:
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
 * GPT-2 (model_type "gpt2", GPT2LMHeadModel) for models/gpt2.xml:
 *
 *     n_layer -> layers       n_embd -> dim        n_head -> heads
 *     vocab_size -> vocab     n_positions (older: n_ctx) -> ctx
 *     layer_norm_epsilon -> norm_eps (1e-5)
 *
 * the four sizes and the context required; refused: an activation_function
 * other than gelu_new (or gelu_pytorch_tanh, the same tanh form),
 * tie_word_embeddings false, an n_inner other than null or 4 * n_embd,
 * scale_attn_weights false, scale_attn_by_inverse_layer_idx,
 * reorder_and_upcast_attn or add_cross_attention true.  Dropout
 * (attn_pdrop, embd_pdrop, resid_pdrop) is not read: fusion trains without.
 *
 * A config of one family given to the other model file (or to a model that
 * is neither) is refused, naming both.
 *
 * What it deliberately is not: a model reader.  It makes name=value text
 * only; the model file's hypers and asserts do the rest, and --set given
 * beside it wins (options.c puts the config's settings first). */
#ifndef FUSION_TOOLS_HF_CONFIG_H
#define FUSION_TOOLS_HF_CONFIG_H

#include <stddef.h>

#define HF_CONFIG_MAX 16

typedef struct {
    const char *field; /* the config.json field it comes from ("num_key_value_heads") */
    char text[96];     /* "kv_heads=4"                                              */
} hf_setting;

/* Read path for the model file model_file, whose <model name=...> is model
 * ("llama", "gpt2"; both NULL: unknown, the config decides); fill
 * out[0..n) and return n, or -1 with a one-line reason naming path in why,
 * e.g.
 *   "config.json: rope_scaling type 'yarn' is not supported (llama3 only)"
 *   "config.json: a gpt2 config (model_type 'gpt2') given to models/llama.xml, which is model 'llama'
 *    (use models/gpt2.xml)" */
int hf_config_read(const char *path, const char *model_file, const char *model, hf_setting out[HF_CONFIG_MAX],
                   char *why, size_t n);

/* The other way (fusionc export): the config.json of model ("llama":
 * transformers' LlamaConfig; "gpt2": GPT2Config, GPT2LMHeadModel) from its
 * hyper-parameters as a checkpoint records them ("name=value ...",
 * fusion.hypers), by the same names as above, the weights in torch_dtype
 * ("float32", "bfloat16", "float16").  NULL with why when a
 * hyper-parameter is missing or the model has no Hugging Face
 * architecture. */
struct cJSON;
/* Hyper-parameter `name` of "name=value ..." (fusion.hypers), or NAN. */
double hf_config_hyper(const char *hypers, const char *name);
struct cJSON *hf_config_write(const char *model, const char *hypers, const char *torch_dtype, char *why, size_t n);

#endif
