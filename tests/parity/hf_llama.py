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

The model is written here from the equations of Hugging Face's
modeling_llama.py and modeling_rope_utils.py (_compute_llama3_parameters),
not with the transformers library: RMSNorm, rotary embedding with
rotate_half and the llama3 frequencies, grouped-query attention by
repeating each key/value head, SwiGLU, the output head tied to the
embedding.  Exits 1 on any mismatch, printing the tensor and the numbers.
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


def names_and_shapes(c):
    d, f, V = c["hidden_size"], c["intermediate_size"], c["vocab_size"]
    H, KV = c["num_attention_heads"], c["num_key_value_heads"]
    hd = d // H
    shapes = {"model.embed_tokens.weight": (V, d)}
    for i in range(c["num_hidden_layers"]):
        p = f"model.layers.{i}."
        shapes.update({p + "input_layernorm.weight": (d,), p + "self_attn.q_proj.weight": (H * hd, d),
                       p + "self_attn.k_proj.weight": (KV * hd, d), p + "self_attn.v_proj.weight": (KV * hd, d),
                       p + "self_attn.o_proj.weight": (d, H * hd), p + "post_attention_layernorm.weight": (d,),
                       p + "mlp.gate_proj.weight": (f, d), p + "mlp.up_proj.weight": (f, d),
                       p + "mlp.down_proj.weight": (d, f)})
    shapes["model.norm.weight"] = (d,)
    return shapes


def llama3_inv_freq(c, hd):
    """_compute_llama3_parameters, in float64."""
    inv_freq = c.get("rope_theta", 10000.0) ** (-torch.arange(0, hd, 2, dtype=torch.float64) / hd)
    rs = c.get("rope_scaling")
    if not rs:
        return inv_freq
    factor, low, high = rs["factor"], rs["low_freq_factor"], rs["high_freq_factor"]
    old = rs["original_max_position_embeddings"]
    wavelen = 2 * math.pi / inv_freq
    scaled = torch.where(wavelen > old / low, inv_freq / factor, inv_freq)
    smooth = (old / wavelen - low) / (high - low)
    smoothed = (1 - smooth) * scaled / factor + smooth * scaled
    medium = ~(wavelen < old / high) & ~(wavelen > old / low)
    return torch.where(medium, smoothed, scaled)


def llama_loss(c, P, idx, targets):
    B, T = idx.shape
    d, H, KV, eps = c["hidden_size"], c["num_attention_heads"], c["num_key_value_heads"], c["rms_norm_eps"]
    hd = d // H
    angles = torch.outer(torch.arange(T, dtype=torch.float64), llama3_inv_freq(c, hd))
    cos = torch.cat([angles.cos(), angles.cos()], -1).float()
    sin = torch.cat([angles.sin(), angles.sin()], -1).float()

    def rms(x, w):
        return w * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps))

    def rotate_half(x):
        return torch.cat([-x[..., hd // 2:], x[..., :hd // 2]], -1)

    emb = P["model.embed_tokens.weight"]
    x = emb[idx]
    for i in range(c["num_hidden_layers"]):
        p = f"model.layers.{i}."
        h = rms(x, P[p + "input_layernorm.weight"])
        q = F.linear(h, P[p + "self_attn.q_proj.weight"]).view(B, T, H, hd).transpose(1, 2)
        k = F.linear(h, P[p + "self_attn.k_proj.weight"]).view(B, T, KV, hd).transpose(1, 2)
        v = F.linear(h, P[p + "self_attn.v_proj.weight"]).view(B, T, KV, hd).transpose(1, 2)
        q, k = q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin
        k, v = k.repeat_interleave(H // KV, dim=1), v.repeat_interleave(H // KV, dim=1)
        att = (q @ k.transpose(-2, -1)) / math.sqrt(hd)
        att = att.masked_fill(torch.ones(T, T, dtype=torch.bool).triu(1), float("-inf")).softmax(-1)
        y = (att @ v).transpose(1, 2).reshape(B, T, H * hd)
        x = x + F.linear(y, P[p + "self_attn.o_proj.weight"])
        h = rms(x, P[p + "post_attention_layernorm.weight"])
        gate, up = F.linear(h, P[p + "mlp.gate_proj.weight"]), F.linear(h, P[p + "mlp.up_proj.weight"])
        x = x + F.linear(F.silu(gate) * up, P[p + "mlp.down_proj.weight"])
    head = emb if c.get("tie_word_embeddings") else P["lm_head.weight"]
    logits = F.linear(rms(x, P["model.norm.weight"]), head)
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))


def make(folder, inputs, seed, with_head):
    c = CONFIG
    g = torch.Generator().manual_seed(seed)
    P = {n: (torch.randn(*s, generator=g) * 0.3 + 1.0) if len(s) == 1 else torch.randn(*s, generator=g) / math.sqrt(s[1])
         for n, s in names_and_shapes(c).items()}
    if with_head:
        P["lm_head.weight"] = P["model.embed_tokens.weight"].clone()
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, "config.json"), "w") as f:
        json.dump(c, f, indent=2)
    shard = {n: (2 if n.startswith("model.layers.1.") or not n.startswith("model.layers.") and n != "model.embed_tokens.weight"
                 else 1) for n in P}
    files = {k: f"model-0000{k}-of-00002.safetensors" for k in (1, 2)}
    for k in (1, 2):
        st_write(os.path.join(folder, files[k]), {n: t.to(torch.bfloat16) for n, t in P.items() if shard[n] == k})
    index = {"metadata": {"total_size": sum(t.numel() * 2 for t in P.values())},
             "weight_map": {n: files[shard[n]] for n in sorted(P)}}
    with open(os.path.join(folder, "model.safetensors.index.json"), "w") as f:
        json.dump(index, f, indent=2)
    st_write(inputs, {"idx": torch.randint(0, c["vocab_size"], (BATCH, SEQ), generator=g, dtype=torch.int32),
                      "targets": torch.randint(0, c["vocab_size"], (BATCH, SEQ), generator=g, dtype=torch.int32)})
    return 0


def grads(folder, inputs, dump_path):
    c = json.load(open(os.path.join(folder, "config.json")))
    index_path, weights = os.path.join(folder, "model.safetensors.index.json"), {}
    files = (sorted(set(json.load(open(index_path))["weight_map"].values())) if os.path.exists(index_path)
             else ["model.safetensors"])
    for file in files:
        weights.update(st_read(os.path.join(folder, file)))
    names = names_and_shapes(c)
    P = {n: weights[n].float().requires_grad_() for n in names}   # bf16 widened, as fusion loads them
    I, dump = st_read(inputs), st_read(dump_path)
    loss = llama_loss(c, P, I["idx"].long(), I["targets"].long())
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
    print(f"hf llama: loss {loss.item():.6f}, {len(P)} gradients: max |fusion - torch| {worst_abs:.2e}, "
          f"{worst_rel:.2e} of the tensor's largest: {'match' if ok else 'DIFFER'}")
    return 0 if ok else 1


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
