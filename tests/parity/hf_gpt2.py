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

The model is written here from GPT-2's equations as Hugging Face's
modeling_gpt2.py computes them, not with the transformers library: Conv1D
projections (weight [in, out], y = x @ W + b), pre-norm blocks, gelu_new
(the tanh form), causal attention scaled by 1/sqrt(head_dim), the head
tied to wte.  Exits 1 on any mismatch, printing the tensor and the numbers.
"""
import json
import math
import os
import sys

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from torch_parity import st_read, st_write  # noqa: E402  (safetensors with the standard library)

TOL = 1e-4
BATCH, SEQ = 2, 24   # fusionc compile's --set batch= seq= (the config fixes the rest)

CONFIG = {
    "architectures": ["GPT2LMHeadModel"], "model_type": "gpt2",
    "n_layer": 2, "n_embd": 64, "n_head": 4, "n_positions": 32, "n_ctx": 32, "vocab_size": 300,
    "layer_norm_epsilon": 1e-5, "activation_function": "gelu_new", "n_inner": None,
    "scale_attn_weights": True, "reorder_and_upcast_attn": False, "tie_word_embeddings": True,
    "attn_pdrop": 0.1, "embd_pdrop": 0.1, "resid_pdrop": 0.1,   # as "gpt2" ships them: fusion trains without
    "bos_token_id": 50256, "eos_token_id": 50256, "initializer_range": 0.02, "torch_dtype": "bfloat16",
}


def names_and_shapes(c):
    d, V = c["n_embd"], c["vocab_size"]
    shapes = {"wte.weight": (V, d), "wpe.weight": (c["n_positions"], d)}
    for i in range(c["n_layer"]):
        p = f"h.{i}."
        shapes.update({p + "ln_1.weight": (d,), p + "ln_1.bias": (d,),
                       p + "attn.c_attn.weight": (d, 3 * d), p + "attn.c_attn.bias": (3 * d,),
                       p + "attn.c_proj.weight": (d, d), p + "attn.c_proj.bias": (d,),
                       p + "ln_2.weight": (d,), p + "ln_2.bias": (d,),
                       p + "mlp.c_fc.weight": (d, 4 * d), p + "mlp.c_fc.bias": (4 * d,),
                       p + "mlp.c_proj.weight": (4 * d, d), p + "mlp.c_proj.bias": (d,)})
    shapes.update({"ln_f.weight": (d,), "ln_f.bias": (d,)})
    return shapes


def gpt2_loss(c, P, idx, targets):
    B, T = idx.shape
    d, H, eps = c["n_embd"], c["n_head"], c["layer_norm_epsilon"]

    def conv1d(x, name):                      # transformers.pytorch_utils.Conv1D
        return x @ P[name + ".weight"] + P[name + ".bias"]

    def ln(x, name):
        return F.layer_norm(x, (d,), P[name + ".weight"], P[name + ".bias"], eps)

    def gelu_new(x):
        return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x.pow(3))))

    x = P["wte.weight"][idx] + P["wpe.weight"][torch.arange(T)]
    for i in range(c["n_layer"]):
        p = f"h.{i}."
        q, k, v = conv1d(ln(x, p + "ln_1"), p + "attn.c_attn").split(d, dim=2)
        q, k, v = (t.view(B, T, H, d // H).transpose(1, 2) for t in (q, k, v))
        att = (q @ k.transpose(-2, -1)) / math.sqrt(d // H)
        att = att.masked_fill(torch.ones(T, T, dtype=torch.bool).triu(1), float("-inf")).softmax(-1)
        x = x + conv1d((att @ v).transpose(1, 2).reshape(B, T, d), p + "attn.c_proj")
        x = x + conv1d(gelu_new(conv1d(ln(x, p + "ln_2"), p + "mlp.c_fc")), p + "mlp.c_proj")
    logits = ln(x, "ln_f") @ P["wte.weight"].t()          # tied head
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))


def make(folder, inputs, seed, shards):
    c = CONFIG
    g = torch.Generator().manual_seed(seed)
    P = {n: (torch.randn(*s, generator=g) * 0.3 + (1.0 if n.endswith(".weight") else 0.0)) if len(s) == 1
         else torch.randn(*s, generator=g) / math.sqrt(s[0] if ".c_" in n else s[1])
         for n, s in names_and_shapes(c).items()}
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
        shard = {n: 2 if n.startswith("h.1.") or n.startswith("ln_f.") or n == "lm_head.weight" else 1 for n in P}
        files = {k: f"model-0000{k}-of-00002.safetensors" for k in (1, 2)}
        for k in (1, 2):
            st_write(os.path.join(folder, files[k]), {n: t for n, t in P.items() if shard[n] == k})
        index = {"metadata": {"total_size": sum(t.numel() * 2 for t in P.values())},
                 "weight_map": {n: files[shard[n]] for n in sorted(P)}}
        with open(os.path.join(folder, "model.safetensors.index.json"), "w") as f:
            json.dump(index, f, indent=2)
    st_write(inputs, {"idx": torch.randint(0, c["vocab_size"], (BATCH, SEQ), generator=g, dtype=torch.int32),
                      "targets": torch.randint(0, c["vocab_size"], (BATCH, SEQ), generator=g, dtype=torch.int32)})
    return 0


def load(folder):
    """DIR's config and weights by name, as GPT2LMHeadModel.from_pretrained
    finds them: "transformer." taken off, the buffers and lm_head left."""
    c = json.load(open(os.path.join(folder, "config.json")))
    index_path, weights = os.path.join(folder, "model.safetensors.index.json"), {}
    files = (sorted(set(json.load(open(index_path))["weight_map"].values())) if os.path.exists(index_path)
             else ["model.safetensors"])
    for file in files:
        for n, t in st_read(os.path.join(folder, file)).items():
            weights[n[len("transformer."):] if n.startswith("transformer.") else n] = t
    P = {n: weights[n].float().requires_grad_() for n in names_and_shapes(c)}   # widened, as fusion loads them
    return c, P


def grads(folder, inputs, dump_path):
    c, P = load(folder)
    I, dump = st_read(inputs), st_read(dump_path)
    loss = gpt2_loss(c, P, I["idx"].long(), I["targets"].long())
    loss.backward()
    ok, worst_rel, worst_abs = True, 0.0, 0.0
    for name, ours, ref in [("loss", dump["loss"].reshape(()), loss.detach())] + \
                           [("grad." + n, dump["grad." + n], p.grad) for n, p in P.items()]:
        scale = max(ref.abs().max().item(), 1e-30)
        diff = (ours - ref).abs().max().item()
        worst_rel, worst_abs = max(worst_rel, diff / scale), max(worst_abs, diff)
        if diff > TOL * scale:
            print(f"FAIL: {name}: max |fusion - torch| = {diff:.3g}, bound {TOL * scale:.3g} (max |torch| {scale:.3g})")
            ok = False
    extra = sorted(k for k in dump if k.startswith("grad.") and k[5:] not in P)
    if extra:
        print(f"FAIL: fusion has gradients the tied model does not: {extra}")
        ok = False
    print(f"hf gpt2: loss {loss.item():.6f} (fusion {dump['loss'].item():.6f}), {len(P)} gradients: "
          f"max |fusion - torch| {worst_abs:.2e}, {worst_rel:.2e} of the tensor's largest: "
          f"{'match' if ok else 'DIFFER'}")
    return 0 if ok else 1


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
