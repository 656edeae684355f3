#!/usr/bin/env python3
"""bad_token_inputs.py GRADS OUT: an --inputs safetensors file whose idx and
targets, shaped as in GRADS (a --dump-grads file), are all token id 300,
past a 256-token vocabulary: what gets past the data loader to a CUDA
kernel's status word (test_cuda_emulated_training.sh,
bench/real_gpu_check.sh).  Standard library only."""
import json
import struct
import sys

raw = open(sys.argv[1], "rb").read()
head = json.loads(raw[8:8 + struct.unpack("<Q", raw[:8])[0]])
out, data = {}, b""
for name in ("idx", "targets"):
    shape = head[name]["shape"]
    n = shape[0] * shape[1]
    out[name] = {"dtype": "I32", "shape": shape, "data_offsets": [len(data), len(data) + 4 * n]}
    data += struct.pack(f"<{n}i", *([300] * n))
h = json.dumps(out).encode()
open(sys.argv[2], "wb").write(struct.pack("<Q", len(h)) + h + data)
