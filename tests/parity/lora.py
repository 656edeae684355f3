"""lora.py: PEFT's LoRA, written for the test, against fusion's --lora (run
with Debian's /usr/bin/python3).

  lora.py adapters CONFIG OUT RANK SEED TARGET...
      write random adapters for every linear of torch_parity's Llama that
      ends with a TARGET: <linear>.lora_A.weight [RANK, in] and
      <linear>.lora_B.weight [out, RANK], both non-zero (a fresh LoRA's B
      is zero; a trained one's is not, and then both gradients matter)
  lora.py grads CONFIG BASE ADAPTERS INPUTS DUMP SCALE
      the loss and the adapters' gradients of torch_parity's Llama with
      the adapters on (W h + SCALE * B A h), against fusion's --dump-grads:
      per tensor max |fusion - torch| <= 1e-4 * max |torch|; a gradient of
      a base weight in the dump is a failure
  lora.py merge CONFIG BASE ADAPTERS SCALE MERGED
      PEFT's merge_and_unload: every wrapped W + SCALE * B @ A, against the
      weights of the folder or file MERGED: max |fusion - torch| <= 1e-6 *
      max |torch| per tensor, every other weight bit for bit

CONFIG is torch_parity's "name=value,..." of the --set options.  Exits 1
on any mismatch, printing the tensor and the numbers.
"""
import math
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from torch_parity import check_step, config, llama_loss, llama_params, st_read, st_write  # noqa: E402


def wrapped(c, targets):
    """{linear: (out, in)} for the linears ending with a target."""
    out = {}
    for name, shape in llama_params(c).items():
        lin = name[:-len(".weight")]
        if len(shape) == 2 and any(lin == t or lin.endswith("." + t) for t in targets):
            out[lin] = shape
    return out


def main():
    torch.set_num_threads(2)
    mode, c = sys.argv[1], config("llama", sys.argv[2])
    if mode == "adapters":
        out, r, seed, targets = sys.argv[3], int(sys.argv[4]), int(sys.argv[5]), sys.argv[6:]
        g = torch.Generator().manual_seed(seed)
        A = {}
        for lin, (o, i) in wrapped(c, targets).items():
            A[lin + ".lora_A.weight"] = torch.randn(r, i, generator=g) / math.sqrt(i)
            A[lin + ".lora_B.weight"] = torch.randn(o, r, generator=g) * 0.1
        st_write(out, A)
        return 0
    base, adapters = st_read(sys.argv[3]), st_read(sys.argv[4])
    names = llama_params(c)
    if mode == "grads":
        inputs, dump = st_read(sys.argv[5]), st_read(sys.argv[6])
        c["lora_scale"] = float(sys.argv[7])
        P = {n: base[n].float() for n in names}
        Pa = {n: t.float().requires_grad_() for n, t in adapters.items()}
        loss = llama_loss(c, {**P, **Pa}, inputs)
        loss.backward()
        return check_step("lora", loss, Pa, dump)
    if mode == "merge":
        scale, merged = float(sys.argv[5]), st_read(sys.argv[6])
        bad, worst = [], 0.0
        for n in names:
            lin = n[:-len(".weight")]
            want = base[n].float()
            if lin + ".lora_A.weight" in adapters:
                want = want + scale * adapters[lin + ".lora_B.weight"].float() @ adapters[lin + ".lora_A.weight"].float()
                d = (merged[n].float() - want).abs().max().item() / max(want.abs().max().item(), 1e-30)
                worst = max(worst, d)
                if d > 1e-6:
                    bad.append(f"{n}: merged differs by {d:.3g} of its largest")
            elif not torch.equal(merged[n].float(), want):
                bad.append(f"{n}: not the base weight")
        bad += [f"an adapter left in the merged weights: {n}" for n in merged if ".lora_" in n]
        print("\n".join(bad) if bad else f"lora merge: {len(names)} weights, the merged within {worst:.2g} of PyTorch's")
        return 1 if bad else 0
    print(__doc__)
    return 2


if __name__ == "__main__":
    sys.exit(main())
