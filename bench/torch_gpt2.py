"""torch_gpt2.py: the PyTorch anchor of bench_gpt2_vs_torch.sh.

GPT-2 as models/gpt2.xml builds it (pre-norm blocks, learned positions,
tanh GELU, the output projection tied to the token table), trained with
torch.optim.AdamW as the optimizer pass configures it (betas 0.9/0.95,
weight decay 0.1 on matrices, global-norm clipping at 1.0), on random
tokens.  Prints one line: median ms/step, peak resident MiB.

usage: /usr/bin/python3 torch_gpt2.py LAYERS DIM HEADS VOCAB CTX BATCH SEQ THREADS STEPS [bf16] [cuda]
  bf16: the forward under torch.autocast(torch.bfloat16), as a
  PyTorch user trains in mixed precision (bench_precision.sh)
  cuda: on the GPU (bench/real_gpu_check.sh)
"""
import math
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F

from torch_bench import time_steps


class Block(nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.heads = heads
        self.ln_1 = nn.LayerNorm(dim)
        self.c_attn = nn.Linear(dim, 3 * dim)
        self.c_proj = nn.Linear(dim, dim)
        self.ln_2 = nn.LayerNorm(dim)
        self.c_fc = nn.Linear(dim, 4 * dim)
        self.mlp_proj = nn.Linear(4 * dim, dim)

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = self.c_attn(self.ln_1(x)).split(C, dim=2)
        q, k, v = (t.view(B, T, self.heads, C // self.heads).transpose(1, 2) for t in (q, k, v))
        att = (q @ k.transpose(-2, -1)) / math.sqrt(C // self.heads)
        att = att.masked_fill(torch.ones(T, T, dtype=torch.bool, device=x.device).triu(1), float("-inf")).softmax(-1)
        y = (att @ v).transpose(1, 2).reshape(B, T, C)
        x = x + self.c_proj(y)
        return x + self.mlp_proj(F.gelu(self.c_fc(self.ln_2(x)), approximate="tanh"))


class GPT(nn.Module):
    def __init__(self, layers, dim, heads, vocab, ctx):
        super().__init__()
        self.wte = nn.Embedding(vocab, dim)
        self.wpe = nn.Embedding(ctx, dim)
        self.h = nn.ModuleList(Block(dim, heads) for _ in range(layers))
        self.ln_f = nn.LayerNorm(dim)

    def forward(self, idx, targets):
        T = idx.shape[1]
        x = self.wte(idx) + self.wpe(torch.arange(T, device=idx.device))
        for block in self.h:
            x = block(x)
        logits = self.ln_f(x) @ self.wte.weight.t()
        return F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1))


def main():
    layers, dim, heads, vocab, ctx, batch, seq, threads, steps = map(int, sys.argv[1:10])
    bf16 = "bf16" in sys.argv[10:]
    device = "cuda" if "cuda" in sys.argv[10:] else "cpu"
    torch.set_num_threads(threads)
    torch.manual_seed(0)
    model = GPT(layers, dim, heads, vocab, ctx).to(device)
    ms, peak_mib = time_steps(model, vocab, batch, seq, steps, bf16, device)
    print(f"{ms:.1f} {peak_mib:.1f}")


if __name__ == "__main__":
    main()
