"""torch_generate.py: the PyTorch anchor of bench_generate.sh: greedy
decoding of a Llama with a key/value cache, written as a PyTorch user
would (torch.inference_mode, preallocated caches written in place, one
token a step), from the weights fusion reads (Hugging Face's names).

Prints one line: prefill tok/s (the prompt in one forward), decode tok/s
(each new token a forward of one position), and the generated ids.

usage: /usr/bin/python3 torch_generate.py WEIGHTS.safetensors LAYERS DIM HEADS KV_HEADS CTX PROMPT_IDS N THREADS [bf16]
(bf16: the weights, activations and caches in bfloat16, as torch computes them)
"""
import math
import os
import sys
import time

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "parity"))
from torch_parity import st_read  # noqa: E402


def main():
    path, layers, dim, H, KV, ctx = sys.argv[1], *map(int, sys.argv[2:7])
    prompt, n, threads = [int(x) for x in sys.argv[7].split(",")], int(sys.argv[8]), int(sys.argv[9])
    dt = torch.bfloat16 if len(sys.argv) > 10 and sys.argv[10] == "bf16" else torch.float32
    torch.set_num_threads(threads)
    W = {k: v.to(dt) for k, v in st_read(path).items()}
    hd, eps = dim // H, 1e-6
    inv = 1.0 / (10000.0 ** (torch.arange(0, hd, 2, dtype=torch.float64) / hd))
    ang = torch.outer(torch.arange(ctx, dtype=torch.float64), inv)
    cos = torch.cat([ang.cos(), ang.cos()], -1).to(dt)
    sin = torch.cat([ang.sin(), ang.sin()], -1).to(dt)
    kc = [torch.zeros(1, KV, ctx, hd, dtype=dt) for _ in range(layers)]
    vc = [torch.zeros(1, KV, ctx, hd, dtype=dt) for _ in range(layers)]

    def rms(x, w):
        return w * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps))

    def rot(x, c, s):
        return x * c + torch.cat([-x[..., hd // 2:], x[..., :hd // 2]], -1) * s

    def forward(ids, at):
        T = len(ids)
        x = W["model.embed_tokens.weight"][torch.tensor(ids)].unsqueeze(0)
        c, s = cos[at:at + T], sin[at:at + T]
        mask = torch.full((T, at + T), float("-inf"), dtype=dt).triu(at + 1)
        for i in range(layers):
            p = f"model.layers.{i}."
            h = rms(x, W[p + "input_layernorm.weight"])
            q = F.linear(h, W[p + "self_attn.q_proj.weight"]).view(1, T, H, hd).transpose(1, 2)
            k = F.linear(h, W[p + "self_attn.k_proj.weight"]).view(1, T, KV, hd).transpose(1, 2)
            v = F.linear(h, W[p + "self_attn.v_proj.weight"]).view(1, T, KV, hd).transpose(1, 2)
            q, k = rot(q, c, s), rot(k, c, s)
            kc[i][:, :, at:at + T] = k
            vc[i][:, :, at:at + T] = v
            K = kc[i][:, :, :at + T].repeat_interleave(H // KV, dim=1)
            V = vc[i][:, :, :at + T].repeat_interleave(H // KV, dim=1)
            att = ((q @ K.transpose(-2, -1)) / math.sqrt(hd) + mask).softmax(-1)
            y = (att @ V).transpose(1, 2).reshape(1, T, dim)
            x = x + F.linear(y, W[p + "self_attn.o_proj.weight"])
            h = rms(x, W[p + "post_attention_layernorm.weight"])
            g, u = F.linear(h, W[p + "mlp.gate_proj.weight"]), F.linear(h, W[p + "mlp.up_proj.weight"])
            x = x + F.linear(F.silu(g) * u, W[p + "mlp.down_proj.weight"])
        return F.linear(rms(x[:, -1], W["model.norm.weight"]), W["lm_head.weight"])

    with torch.inference_mode():
        t0 = time.perf_counter()
        logits = forward(prompt, 0)
        t1 = time.perf_counter()
        out, at = [], len(prompt)
        for _ in range(n):
            nxt = int(logits.argmax(-1))
            out.append(nxt)
            if len(out) == n:
                break
            logits = forward([nxt], at)
            at += 1
        t2 = time.perf_counter()
    print(f"{len(prompt) / (t1 - t0):.2f} {(n - 1) / (t2 - t1):.2f} {','.join(map(str, out))}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
