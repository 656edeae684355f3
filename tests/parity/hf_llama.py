"""hf_llama.py: a Hugging Face Llama checkpoint folder, and an independent
PyTorch Llama to check fusion's step on it (run with Debian's /usr/bin/python3).

  hf_llama.py make DIR INPUTS SEED [--no-head]
      write DIR as Hugging Face ships a Llama: config.json (tied embeddings,
      Llama 3's rope_scaling, grouped-query attention), the weights in bf16
      in two shards and model.safetensors.index.json naming each tensor's
      shard (--no-head: without lm_head.weight, as tied checkpoints
      usually are; else it is there, a copy of the embedding, as some
      ship it); and one batch of tokens (idx, targets) as INPUTS
  hf_llama.py grads DIR INPUTS DUMP
      recompute the loss and every gradient from DIR's config.json and its
      weights widened to fp32, and compare with fusion's --dump-grads
      file: per tensor, max |fusion - torch| <= 1e-4 * max |torch|

The model is torch_parity.py's Llama, written from the equations of
Hugging Face's modeling_llama.py and modeling_rope_utils.py
(_compute_llama3_parameters), not with the transformers library, run on
the folder's config.json read as Hugging Face reads it: RMSNorm, rotary
embedding with rotate_half and the llama3 frequencies, grouped-query
attention by repeating each key/value head, SwiGLU, the output head tied
to the embedding.  Exits 1 on any mismatch, printing the tensor and the
numbers.
"""
import json
import math
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from torch_parity import check_step, hf_write_shards, llama_loss, llama_params, st_read, st_write  # noqa: E402

BATCH, SEQ = 2, 24   # fusionc compile's --set batch= seq= (the config fixes the rest)

CONFIG = {
    "architectures": ["LlamaForCausalLM"], "model_type": "llama",
    "hidden_size": 64, "intermediate_size": 96, "num_hidden_layers": 2,
    "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16,
    "vocab_size": 300, "max_position_embeddings": 64,
    "rms_norm_eps": 1e-5, "rope_theta": 10000.0, "tie_word_embeddings": True,
    "hidden_act": "silu", "attention_bias": False, "mlp_bias": False, "attention_dropout": 0.0,
    # head_dim 16: wavelengths 2π·10000^(i/8) = 6.3, 19.9, 62.8, ...: with 32
    # positions of old context, one frequency is kept (< 32/4), one blended,
    # the rest divided by the factor.
    "rope_scaling": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                     "high_freq_factor": 4.0, "original_max_position_embeddings": 32},
    "bos_token_id": 1, "eos_token_id": 2, "torch_dtype": "bfloat16", "initializer_range": 0.02,
}


def model_config(c):
    """config.json's fields as torch_parity's Llama reads them."""
    return {"dim": c["hidden_size"], "layers": c["num_hidden_layers"], "heads": c["num_attention_heads"],
            "kv_heads": c["num_key_value_heads"], "ffn": c["intermediate_size"], "vocab": c["vocab_size"],
            "norm_eps": c["rms_norm_eps"], "rope_base": c.get("rope_theta", 10000.0),
            "rope_scaling": c.get("rope_scaling"), "tie": c.get("tie_word_embeddings", False)}


def make(folder, inputs, seed, with_head):
    c = CONFIG
    g = torch.Generator().manual_seed(seed)
    P = {n: (torch.randn(*s, generator=g) * 0.3 + 1.0) if len(s) == 1 else torch.randn(*s, generator=g) / math.sqrt(s[1])
         for n, s in llama_params(model_config(c)).items()}
    if with_head:
        P["lm_head.weight"] = P["model.embed_tokens.weight"].clone()
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, "config.json"), "w") as f:
        json.dump(c, f, indent=2)
    second = lambda n: n.startswith("model.layers.1.") or not n.startswith("model.layers.") and n != "model.embed_tokens.weight"
    hf_write_shards(folder, {n: t.to(torch.bfloat16) for n, t in P.items()}, lambda n: 2 if second(n) else 1)
    st_write(inputs, {"idx": torch.randint(0, c["vocab_size"], (BATCH, SEQ), generator=g, dtype=torch.int32),
                      "targets": torch.randint(0, c["vocab_size"], (BATCH, SEQ), generator=g, dtype=torch.int32)})
    return 0


def grads(folder, inputs, dump_path):
    c = model_config(json.load(open(os.path.join(folder, "config.json"))))
    weights = st_read(folder)
    P = {n: weights[n].float().requires_grad_() for n in llama_params(c)}   # bf16 widened, as fusion loads them
    loss = llama_loss(c, P, st_read(inputs))
    loss.backward()
    return check_step("hf llama", loss, P, st_read(dump_path))


def main():
    torch.set_num_threads(2)
    mode = sys.argv[1]
    if mode == "make":
        return make(sys.argv[2], sys.argv[3], int(sys.argv[4]), "--no-head" not in sys.argv[5:])
    if mode == "grads":
        return grads(sys.argv[2], sys.argv[3], sys.argv[4])
    print(__doc__)
    return 2


if __name__ == "__main__":
    sys.exit(main())
