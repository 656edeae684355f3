"""generate.py: a greedy decoding loop in PyTorch, written for the test,
against fusion's inference programs (run with Debian's /usr/bin/python3).

  generate.py KIND CONFIG WEIGHTS PROMPT_IDS N
      KIND llama or gpt2 (torch_parity's models), CONFIG its "name=value,..."
      of the --set options, WEIGHTS a safetensors file or a Hugging Face
      folder, PROMPT_IDS "1,2,3": prints the N ids that greedy decoding
      appends, comma-separated.  No cache: every step runs the whole
      sequence so far, so nothing is shared with a KV-cache implementation
      but the model's equations.
"""
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from torch_parity import config, gpt2_logits, llama_logits, st_read  # noqa: E402


def main():
    torch.set_num_threads(2)
    kind, c = sys.argv[1], config(sys.argv[1], sys.argv[2])
    W = {n: t.float() for n, t in st_read(sys.argv[3]).items() if not n.startswith("adamw.")}
    ids = [int(x) for x in sys.argv[4].split(",")]
    n = int(sys.argv[5])
    logits_of = llama_logits if kind == "llama" else gpt2_logits
    out = []
    with torch.no_grad():
        for _ in range(n):
            logits = logits_of(c, W, torch.tensor([ids], dtype=torch.int64))
            nxt = int(logits[0, -1].argmax())
            ids.append(nxt)
            out.append(nxt)
    print(",".join(str(i) for i in out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
