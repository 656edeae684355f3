#!/usr/bin/env python3
"""image_sets.py OUT: small image datasets for tests/test_image_data.sh, in
the formats runtime/image_data.h reads, standard library only:

  OUT/idx/     train (64 images, gzipped) and t10k (24, plain) IDX files, 28x28
  OUT/cifar/   CIFAR-10 binary batches: data_batch_1..5.bin (8 records each), test_batch.bin
  OUT/folder/  an ImageFolder: train/ and test/, classes ant, bee, cat, of PNG
               images (gray and RGB, 20x24 to 48x40) and BMP ones
  OUT/bad-*/   faulty copies: an images file cut short, labels of another
               count, a text file in a class folder, a cut CIFAR batch

Pixels are random from a fixed seed; each class's images are brighter or
darker on average, so there is something to learn."""
import gzip
import os
import random
import struct
import sys
import zlib


def idx_pair(folder, split, n, rng, gz, cut=0, labels_n=None):
    os.makedirs(folder, exist_ok=True)
    opener = gzip.open if gz else open
    ext = ".gz" if gz else ""
    labels = [rng.randrange(10) for _ in range(n)]
    pixels = bytes(min(255, max(0, rng.randrange(256) // 2 + 12 * labels[i])) for i in range(n) for _ in range(784))
    with opener(f"{folder}/{split}-images-idx3-ubyte{ext}", "wb") as f:
        f.write(struct.pack(">IIII", 0x803, n, 28, 28) + pixels[:len(pixels) - cut])
    m = n if labels_n is None else labels_n
    with opener(f"{folder}/{split}-labels-idx1-ubyte{ext}", "wb") as f:
        f.write(struct.pack(">II", 0x801, m) + bytes((labels * 2)[:m]))


def cifar(folder, rng, cut=0):
    os.makedirs(folder, exist_ok=True)
    names = [f"data_batch_{i}.bin" for i in range(1, 6)] + ["test_batch.bin"]
    for name in names:
        data = b""
        for _ in range(8):
            label = rng.randrange(10)
            data += bytes([label]) + bytes(min(255, rng.randrange(200) + 5 * label) for _ in range(3072))
        with open(f"{folder}/{name}", "wb") as f:
            f.write(data[:len(data) - cut] if name == "data_batch_3.bin" else data)


def png(path, w, h, channels, rng, bias):
    rows = b"".join(b"\x00" + bytes(min(255, rng.randrange(200) + bias) for _ in range(w * channels))
                    for _ in range(h))

    def chunk(kind, body):
        return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body) & 0xFFFFFFFF)
    head = struct.pack(">IIBBBBB", w, h, 8, 0 if channels == 1 else 2, 0, 0, 0)
    with open(path, "wb") as f:
        f.write(b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", head) + chunk(b"IDAT", zlib.compress(rows)) + chunk(b"IEND", b""))


def bmp(path, w, h, rng, bias):
    stride = (w * 3 + 3) & ~3
    body = b"".join(bytes(min(255, rng.randrange(200) + bias) for _ in range(w * 3)) + b"\0" * (stride - w * 3)
                    for _ in range(h))
    head = struct.pack("<2sIHHI", b"BM", 54 + len(body), 0, 0, 54)
    info = struct.pack("<IiiHHIIiiII", 40, w, h, 1, 24, 0, len(body), 2835, 2835, 0, 0)
    with open(path, "wb") as f:
        f.write(head + info + body)


def folder(root, rng, junk=False):
    for split, n in (("train", 6), ("test", 3)):
        for k, cls in enumerate(("ant", "bee", "cat")):
            d = f"{root}/{split}/{cls}"
            os.makedirs(d, exist_ok=True)
            for i in range(n):
                w, h = rng.choice([(20, 24), (32, 32), (48, 40)])
                if i % 3 == 2:
                    bmp(f"{d}/{i}.bmp", w, h, rng, 20 * k)
                else:
                    png(f"{d}/{i}.png", w, h, 1 if i % 2 else 3, rng, 20 * k)
    if junk:
        with open(f"{root}/train/bee/notes.txt", "w") as f:
            f.write("not an image\n")


def main():
    out = sys.argv[1]
    rng = random.Random(7)
    idx_pair(f"{out}/idx", "train", 64, rng, gz=True)
    idx_pair(f"{out}/idx", "t10k", 24, rng, gz=False)
    cifar(f"{out}/cifar", rng)
    folder(f"{out}/folder", rng)
    idx_pair(f"{out}/bad-cut", "train", 64, rng, gz=True, cut=500)
    idx_pair(f"{out}/bad-count", "train", 64, rng, gz=False, labels_n=63)
    folder(f"{out}/bad-folder", rng, junk=True)
    cifar(f"{out}/bad-cifar", rng, cut=100)


if __name__ == "__main__":
    main()
