"""torch_llama.py: the PyTorch anchor of bench_llama_vs_torch.sh.

Llama as models/llama.xml builds it and as Hugging Face's eager
LlamaForCausalLM computes it (RMSNorm pre-norm, rotary embedding with
rotate_half, grouped-query attention by repeating key/value heads, SwiGLU,
no biases, an untied head), written as a PyTorch user would, trained with
torch.optim.AdamW as the optimizer pass configures it (betas 0.9/0.95,
weight decay 0.1 on matrices, global-norm clipping at 1.0), on random
tokens.  Prints one line: median ms/step, peak resident MiB.

usage: /usr/bin/python3 torch_llama.py LAYERS DIM HEADS KV_HEADS FFN VOCAB BATCH SEQ THREADS STEPS
"""
import math
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F

from torch_bench import time_steps


class RMSNorm(nn.Module):
    def __init__(self, dim, eps=1e-6):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x):
        return self.weight * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps))


def rotate_half(x):
    half = x.shape[-1] // 2
    return torch.cat([-x[..., half:], x[..., :half]], -1)


class Layer(nn.Module):
    def __init__(self, dim, heads, kv_heads, ffn):
        super().__init__()
        self.heads, self.kv_heads, self.hd = heads, kv_heads, dim // heads
        self.input_layernorm = RMSNorm(dim)
        self.q_proj = nn.Linear(dim, heads * self.hd, bias=False)
        self.k_proj = nn.Linear(dim, kv_heads * self.hd, bias=False)
        self.v_proj = nn.Linear(dim, kv_heads * self.hd, bias=False)
        self.o_proj = nn.Linear(heads * self.hd, dim, bias=False)
        self.post_attention_layernorm = RMSNorm(dim)
        self.gate_proj = nn.Linear(dim, ffn, bias=False)
        self.up_proj = nn.Linear(dim, ffn, bias=False)
        self.down_proj = nn.Linear(ffn, dim, bias=False)

    def forward(self, x, cos, sin, mask):
        B, T, _ = x.shape
        h = self.input_layernorm(x)
        q = self.q_proj(h).view(B, T, self.heads, self.hd).transpose(1, 2)
        k = self.k_proj(h).view(B, T, self.kv_heads, self.hd).transpose(1, 2)
        v = self.v_proj(h).view(B, T, self.kv_heads, self.hd).transpose(1, 2)
        q, k = q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin
        group = self.heads // self.kv_heads
        k, v = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)
        att = ((q @ k.transpose(-2, -1)) / math.sqrt(self.hd)).masked_fill(mask, float("-inf")).softmax(-1)
        x = x + self.o_proj((att @ v).transpose(1, 2).reshape(B, T, -1))
        h = self.post_attention_layernorm(x)
        return x + self.down_proj(F.silu(self.gate_proj(h)) * self.up_proj(h))


class Llama(nn.Module):
    def __init__(self, layers, dim, heads, kv_heads, ffn, vocab):
        super().__init__()
        self.embed_tokens = nn.Embedding(vocab, dim)
        self.layers = nn.ModuleList(Layer(dim, heads, kv_heads, ffn) for _ in range(layers))
        self.norm = RMSNorm(dim)
        self.lm_head = nn.Linear(dim, vocab, bias=False)
        self.hd = dim // heads

    def forward(self, idx, targets):
        T = idx.shape[1]
        inv_freq = 1.0 / (10000.0 ** (torch.arange(0, self.hd, 2).float() / self.hd))
        freqs = torch.outer(torch.arange(T).float(), inv_freq)
        emb = torch.cat([freqs, freqs], -1)
        cos, sin = emb.cos(), emb.sin()
        mask = torch.ones(T, T, dtype=torch.bool).triu(1)
        x = self.embed_tokens(idx)
        for layer in self.layers:
            x = layer(x, cos, sin, mask)
        logits = self.lm_head(self.norm(x))
        return F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1))


def main():
    layers, dim, heads, kv_heads, ffn, vocab, batch, seq, threads, steps = map(int, sys.argv[1:11])
    torch.set_num_threads(threads)
    torch.manual_seed(0)
    model = Llama(layers, dim, heads, kv_heads, ffn, vocab)
    ms, peak_mib = time_steps(model, vocab, batch, seq, steps)
    print(f"{ms:.1f} {peak_mib:.1f}")


if __name__ == "__main__":
    main()
