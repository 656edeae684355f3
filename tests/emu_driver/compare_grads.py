#!/usr/bin/env python3
"""compare_grads.py REF.safetensors FOUND.safetensors [BOUND]: every tensor
of REF (a --dump-grads file: grad.<param>, the inputs, the loss; F32, I32,
BF16 or F16) must be in
FOUND with the same shape, and agree within BOUND (default 1e-4) x the
largest magnitude of REF's tensor.  Prints the worst tensor; exit 1 on any
difference.  Standard library only."""
import json
import struct
import sys
from array import array


def read(path):
    data = open(path, "rb").read()
    n = struct.unpack_from("<Q", data, 0)[0]
    header = json.loads(data[8:8 + n])
    out = {}
    for name, t in header.items():
        if name == "__metadata__":
            continue
        begin, end = t["data_offsets"]
        raw = data[8 + n + begin:8 + n + end]
        if t["dtype"] == "BF16":  # the upper half of an f32 (a 16-bit dropout mask, say)
            bits = array("H")
            bits.frombytes(raw)
            values = array("f", struct.unpack(f"<{len(bits)}f", struct.pack(f"<{len(bits)}I", *(h << 16 for h in bits))))
        elif t["dtype"] == "F16":
            values = array("f", struct.unpack(f"<{len(raw) // 2}e", raw))
        else:
            values = array({"F32": "f", "I32": "i"}[t["dtype"]])
            values.frombytes(raw)
        out[name] = (t["shape"], values)
    return out


def main():
    ref, found = read(sys.argv[1]), read(sys.argv[2])
    bound = float(sys.argv[3]) if len(sys.argv) > 3 else 1e-4
    worst, worst_name, bad = 0.0, "", []
    for name, (shape, a) in ref.items():
        if name not in found:
            bad.append(f"{name}: missing")
            continue
        fshape, b = found[name]
        if fshape != shape:
            bad.append(f"{name}: shape {fshape}, expected {shape}")
            continue
        scale = max((abs(x) for x in a), default=0.0)
        diff = max((abs(x - y) for x, y in zip(a, b)), default=0.0)
        rel = diff / scale if scale > 0 else diff
        if rel > worst:
            worst, worst_name = rel, name
        if not rel <= bound:
            bad.append(f"{name}: max |difference| {diff:.3g} = {rel:.3g} x max |ref| (bound {bound:g})")
    print(f"{len(ref)} tensors; worst {worst_name}: {worst:.2g} x its largest magnitude")
    for line in bad:
        print("  " + line, file=sys.stderr)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
