"""hf_gpt2.py: a Hugging Face GPT-2 checkpoint folder, and an independent
PyTorch GPT-2 to check fusion's step on it (run with Debian's /usr/bin/python3).

  hf_gpt2.py make DIR INPUTS SEED [--shards]
      write DIR as Hugging Face's GPT2LMHeadModel.save_pretrained leaves it:
      config.json, and the weights in bf16 in model.safetensors, every name
      prefixed "transformer." and with the attention's causal-mask buffers
      (transformer.h.{i}.attn.bias, .attn.masked_bias) beside them;
      --shards: two shards and model.safetensors.index.json, the names
      unprefixed and a tied lm_head.weight (a copy of wte.weight) in the
      second; and one batch of tokens (idx, targets) as INPUTS
  hf_gpt2.py grads DIR INPUTS DUMP
      recompute the loss and every gradient from DIR's config.json and its
      weights (by name, "transformer." taken off; widened to fp32), and
      compare with fusion's --dump-grads file: per tensor,
      max |fusion - torch| <= 1e-4 * max |torch|

The model is torch_parity.py's GPT-2, written from GPT-2's equations as
Hugging Face's modeling_gpt2.py computes them, not with the transformers
library, run on the folder's config.json: Conv1D projections (weight
[in, out], y = x @ W + b), pre-norm blocks, gelu_new (the tanh form),
causal attention scaled by 1/sqrt(head_dim), the head tied to wte.  Exits 1 on any mismatch, printing the tensor and the numbers.
"""
import json
import math
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from torch_parity import check_step, gpt2_loss, gpt2_params, hf_write_shards, st_read, st_write  # noqa: E402

BATCH, SEQ = 2, 24   # fusionc compile's --set batch= seq= (the config fixes the rest)

CONFIG = {
    "architectures": ["GPT2LMHeadModel"], "model_type": "gpt2",
    "n_layer": 2, "n_embd": 64, "n_head": 4, "n_positions": 32, "n_ctx": 32, "vocab_size": 300,
    "layer_norm_epsilon": 1e-5, "activation_function": "gelu_new", "n_inner": None,
    "scale_attn_weights": True, "reorder_and_upcast_attn": False, "tie_word_embeddings": True,
    "attn_pdrop": 0.1, "embd_pdrop": 0.1, "resid_pdrop": 0.1,   # as "gpt2" ships them: fusion trains without
    "bos_token_id": 50256, "eos_token_id": 50256, "initializer_range": 0.02, "torch_dtype": "bfloat16",
}


def model_config(c):
    """config.json's fields as torch_parity's GPT-2 reads them."""
    return {"dim": c["n_embd"], "layers": c["n_layer"], "heads": c["n_head"], "vocab": c["vocab_size"],
            "ctx": c["n_positions"], "norm_eps": c["layer_norm_epsilon"]}


def make(folder, inputs, seed, shards):
    c = CONFIG
    g = torch.Generator().manual_seed(seed)
    P = {n: (torch.randn(*s, generator=g) * 0.3 + (1.0 if n.endswith(".weight") else 0.0)) if len(s) == 1
         else torch.randn(*s, generator=g) / math.sqrt(s[0] if ".c_" in n else s[1])
         for n, s in gpt2_params(model_config(c)).items()}
    P = {n: t.to(torch.bfloat16) for n, t in P.items()}
    mask = torch.tril(torch.ones(c["n_positions"], c["n_positions"])).view(1, 1, c["n_positions"], c["n_positions"])
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, "config.json"), "w") as f:
        json.dump(c, f, indent=2)
    if not shards:
        out = {"transformer." + n: t for n, t in P.items()}
        for i in range(c["n_layer"]):
            out[f"transformer.h.{i}.attn.bias"] = mask
            out[f"transformer.h.{i}.attn.masked_bias"] = torch.tensor(-1e4)
        st_write(os.path.join(folder, "model.safetensors"), out)
    else:
        P["lm_head.weight"] = P["wte.weight"].clone()
        second = lambda n: n.startswith("h.1.") or n.startswith("ln_f.") or n == "lm_head.weight"
        hf_write_shards(folder, P, lambda n: 2 if second(n) else 1)
    st_write(inputs, {"idx": torch.randint(0, c["vocab_size"], (BATCH, SEQ), generator=g, dtype=torch.int32),
                      "targets": torch.randint(0, c["vocab_size"], (BATCH, SEQ), generator=g, dtype=torch.int32)})
    return 0


def grads(folder, inputs, dump_path):
    """DIR's weights by name as GPT2LMHeadModel.from_pretrained finds them
    ("transformer." taken off, the buffers and lm_head left), widened to
    fp32 as fusion loads them."""
    c = model_config(json.load(open(os.path.join(folder, "config.json"))))
    weights = {n[len("transformer."):] if n.startswith("transformer.") else n: t for n, t in st_read(folder).items()}
    P = {n: weights[n].float().requires_grad_() for n in gpt2_params(c)}
    loss = gpt2_loss(c, P, st_read(inputs))
    loss.backward()
    return check_step("hf gpt2", loss, P, st_read(dump_path))


def main():
    torch.set_num_threads(2)
    mode = sys.argv[1]
    if mode == "make":
        return make(sys.argv[2], sys.argv[3], int(sys.argv[4]), "--shards" in sys.argv[5:])
    if mode == "grads":
        return grads(sys.argv[2], sys.argv[3], sys.argv[4])
    print(__doc__)
    return 2


if __name__ == "__main__":
    sys.exit(main())
