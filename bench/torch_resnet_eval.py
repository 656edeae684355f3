"""torch_resnet_eval.py: fusion's ResNet-18 checkpoint evaluated by PyTorch.

An independent check of fusion's validation (bench_resnet_fashion.sh): the
parameters and batch norm's running statistics of a fusion checkpoint step
folder (every part's, names mapped to torch_resnet.py's ResNet18), in
eval() mode, on the Fashion-MNIST test set normalised as fusion normalises
it (the training set's mean and standard deviation), in f32.  Prints one
line: accuracy (top-1, a tie counted wrong as fusion counts it), mean loss,
images.

usage: /usr/bin/python3 torch_resnet_eval.py STEP_FOLDER [DATASET_FOLDER]
"""
import glob
import gzip
import json
import os
import struct
import sys

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from torch_resnet import ResNet18  # noqa: E402


def read_safetensors(path):
    raw = open(path, "rb").read()
    n = struct.unpack("<Q", raw[:8])[0]
    header, base, out = json.loads(raw[8:8 + n]), 8 + n, {}
    for name, v in header.items():
        if name == "__metadata__" or v["dtype"] != "F32":
            continue
        a, b = v["data_offsets"]
        out[name] = torch.from_numpy(np.frombuffer(raw[base + a:base + b], dtype=np.float32).reshape(v["shape"]).copy())
    return out


def torch_name(name):
    """layer.S.B.conv1.w -> layers.(S-1)*2+B.conv1.weight; downsample -> down."""
    last = {"w": "weight", "b": "bias"}.get(name.rsplit(".", 1)[1], name.rsplit(".", 1)[1])
    name = name.rsplit(".", 1)[0] + "." + last
    if name.startswith("layer."):
        p = name.split(".")
        rest = ".".join(p[3:]).replace("downsample.", "down.")
        return f"layers.{(int(p[1]) - 1) * 2 + int(p[2])}.{rest}"
    return name


def idx(path):
    d = gzip.open(path).read()
    nd = struct.unpack(">I", d[:4])[0] & 255
    dims = struct.unpack(">" + "I" * nd, d[4:4 + 4 * nd])
    return np.frombuffer(d[4 + 4 * nd:], np.uint8).reshape(dims)


def main():
    step, data = sys.argv[1], sys.argv[2] if len(sys.argv) > 2 else "/usr/share/datasets/fashion-mnist"
    torch.set_num_threads(2)
    model = ResNet18(1, 10)
    state = model.state_dict()
    loaded = set()
    for part in sorted(glob.glob(os.path.join(step, "*.safetensors"))):
        for name, t in read_safetensors(part).items():
            if name.startswith("adamw.") or torch_name(name) not in state:
                continue
            state[torch_name(name)] = t
            loaded.add(torch_name(name))
    wanted = {k for k in state if not k.endswith("num_batches_tracked")}
    if wanted - loaded:
        sys.exit(f"torch_resnet_eval: {step} lacks {sorted(wanted - loaded)[:4]}")
    model.load_state_dict(state)
    model.eval()
    train = idx(os.path.join(data, "train-images-idx3-ubyte.gz")).astype(np.float32) / 255
    test = idx(os.path.join(data, "t10k-images-idx3-ubyte.gz")).astype(np.float32) / 255
    labels = torch.from_numpy(idx(os.path.join(data, "t10k-labels-idx1-ubyte.gz")).astype(np.int64))
    x = torch.from_numpy((test - train.mean()) / train.std()).unsqueeze(1)
    correct, loss = 0, 0.0
    with torch.no_grad():
        for i in range(0, len(x), 500):
            h = model.layers(F.relu(model.bn1(model.conv1(x[i:i + 500]))))
            z = model.fc(F.adaptive_avg_pool2d(h, 1).flatten(1))
            top = z.max(1, keepdim=True).values
            alone = (z == top).sum(1) == 1
            correct += int(((z.argmax(1) == labels[i:i + 500]) & alone).sum())
            loss += float(F.cross_entropy(z, labels[i:i + 500], reduction="sum"))
    print(f"accuracy {correct / len(x):.4f} loss {loss / len(x):.6f} images {len(x)}")


if __name__ == "__main__":
    main()
