"""torch_bench.py: the PyTorch anchors' shared step loop (torch_gpt2.py,
torch_llama.py): AdamW as fusion's optimizer pass configures it (betas
0.9/0.95, weight decay 0.1 on matrices, eps 1e-8), global-norm clipping at
1.0, random tokens; times each whole step (forward, backward, clip, update).
"""
import resource
import statistics
import time

import torch


def time_steps(model, vocab, batch, seq, steps, bf16=False, device="cpu"):
    """Train `steps` steps of model(idx, targets) -> loss; return the median
    ms a step (the first two left out: warm-up) and the peak resident MiB
    (on "cuda": the peak GPU memory PyTorch allocated)."""
    decay = [p for p in model.parameters() if p.dim() >= 2]
    rest = [p for p in model.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": rest, "weight_decay": 0.0}],
                            lr=6e-4, betas=(0.9, 0.95), eps=1e-8)
    times = []
    for _ in range(steps):
        idx = torch.randint(0, min(vocab, 256), (batch, seq), device=device)
        targets = torch.randint(0, min(vocab, 256), (batch, seq), device=device)
        if device == "cuda":
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        with torch.autocast(device, dtype=torch.bfloat16, enabled=bf16):
            loss = model(idx, targets)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        if device == "cuda":
            torch.cuda.synchronize()
        times.append(time.perf_counter() - t0)
    peak_mib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0
    if device == "cuda":
        peak_mib = torch.cuda.max_memory_allocated() / 2**20
    return statistics.median(times[2:]) * 1e3, peak_mib
