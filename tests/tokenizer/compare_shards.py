#!/usr/bin/python3
"""compare_shards: do two llm.c-style token shards hold the same ids, and
where do they first part?

Meant for `fusionc tokenize` against tests/tokenizer/reference_encode.mjs:
on a difference it prints the position, the file it falls in (given the
reference's ids per file), and the ids around it on both sides with the
tokens they stand for (given the tokenizer.json).  Exits 0 when the shards
are the same, 1 when they differ, 2 when one cannot be read.

usage:
  compare_shards.py A.bin B.bin [--files LIST.tsv] [--tokenizer tokenizer.json] [--context N]
      LIST.tsv: "ids<TAB>file" a line, in shard order, as
      `reference_encode.mjs --list` writes it for A.
  compare_shards.py --dirs DIR_A DIR_B [--tokenizer tokenizer.json] [--context N]
      every *.bin in DIR_A against the one of the same name in DIR_B (one
      shard per input file): one line per file that differs.

The shard: 256 little-endian int32 (20240520, version 1 for uint16 ids or
2 for uint32, the id count, zeros), then the ids from byte 1024.
"""
import argparse
import json
import os
import struct
import sys

MAGIC = 20240520


class BadShard(Exception):
    pass


def read_shard(path):
    """The shard's version and ids."""
    with open(path, "rb") as f:
        data = f.read()
    if len(data) < 1024:
        raise BadShard("%s: %d bytes, shorter than the 1024-byte header" % (path, len(data)))
    header = struct.unpack("<256i", data[:1024])
    magic, version, count = header[:3]
    if magic != MAGIC:
        raise BadShard("%s: header[0] is %d, expected %d" % (path, magic, MAGIC))
    if version not in (1, 2):
        raise BadShard("%s: header[1] (version) is %d, expected 1 or 2" % (path, version))
    if any(header[3:]):
        raise BadShard("%s: header[3..255] are not all 0" % path)
    width = 2 if version == 1 else 4
    if len(data) != 1024 + count * width:
        raise BadShard("%s: %d bytes, expected %d for %d ids of %d bytes"
                       % (path, len(data), 1024 + count * width, count, width))
    ids = struct.unpack("<%d%s" % (count, "H" if width == 2 else "I"), data[1024:])
    return version, ids


class Vocab:
    """id -> what the token stands for, from a tokenizer.json."""

    def __init__(self, path):
        with open(path, encoding="utf-8") as f:
            tj = json.load(f)
        self.tokens = {i: t for t, i in tj["model"]["vocab"].items()}
        for t in tj["added_tokens"]:
            self.tokens[t["id"]] = t["content"]
        self.added = {t["id"] for t in tj["added_tokens"]}
        # Byte-level vocabularies spell each byte as a printable character
        # (GPT-2's table): undo it to show the text.
        self.byte_level = "ByteLevel" in json.dumps(tj.get("pre_tokenizer"))
        printable = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
        self.unbyte = {chr(b): b for b in printable}
        n = 0
        for b in range(256):
            if b not in printable:
                self.unbyte[chr(256 + n)] = b
                n += 1

    def show(self, i):
        t = self.tokens.get(i)
        if t is None:
            return "(no such id)"
        if self.byte_level and i not in self.added and all(c in self.unbyte for c in t):
            raw = bytes(self.unbyte[c] for c in t)
            try:
                return "%r = %r" % (t, raw.decode("utf-8"))
            except UnicodeDecodeError:  # part of a character: its bytes
                return "%r = bytes %s" % (t, raw.hex(" "))
        return repr(t)


def show(i, vocab):
    return "%d %s" % (i, vocab.show(i)) if vocab else str(i)


def first_difference(a, b):
    """The first position where a and b differ, or None when they are the same."""
    for k, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return k
    return None if len(a) == len(b) else min(len(a), len(b))


def locate(k, files):
    """The file that position k falls in, and k's place in it, from (count, file) pairs."""
    start = 0
    for count, name in files:
        if k < start + count:
            return name, k - start, count
        start += count
    return None, None, None


def print_context(k, a, b, name_a, name_b, vocab, context):
    print("  %-9s %-40s %s" % ("position", name_a, name_b))
    for p in range(max(0, k - context), min(max(len(a), len(b)), k + context + 1)):
        left = show(a[p], vocab) if p < len(a) else "(end)"
        right = show(b[p], vocab) if p < len(b) else "(end)"
        print("%s %-9d %-40s %s" % (">" if p == k else " ", p, left, right))


def compare_pair(path_a, path_b, vocab, files, context):
    va, a = read_shard(path_a)
    vb, b = read_shard(path_b)
    print("%s: %d ids, version %d; %s: %d ids, version %d" % (path_a, len(a), va, path_b, len(b), vb))
    k = first_difference(a, b)
    if k is None and va == vb:
        print("same")
        return True
    if k is None:
        print("the same ids, but the header's version differs (%d and %d)" % (va, vb))
        return False
    where = ""
    if files:
        name, at, count = locate(k, files)
        where = " (past the files listed)" if name is None else " in %s, its id %d of %d" % (name, at, count)
    print("first difference at id %d%s" % (k, where))
    if len(a) == len(b):
        print("%d of %d ids differ" % (sum(x != y for x, y in zip(a, b)), len(a)))
    print_context(k, a, b, os.path.basename(path_a), os.path.basename(path_b), vocab, context)
    return False


def compare_dirs(dir_a, dir_b, vocab, context):
    names = sorted(f for f in os.listdir(dir_a) if f.endswith(".bin"))
    differ = 0
    for f in names:
        pb = os.path.join(dir_b, f)
        if not os.path.exists(pb):
            print("%s: only in %s" % (f, dir_a))
            differ += 1
            continue
        _, a = read_shard(os.path.join(dir_a, f))
        _, b = read_shard(pb)
        k = first_difference(a, b)
        if k is None:
            continue
        differ += 1
        print("%s: %d and %d ids, first difference at id %d" % (f, len(a), len(b), k))
        print_context(k, a, b, dir_a, dir_b, vocab, context)
    only_b = sorted(f for f in os.listdir(dir_b) if f.endswith(".bin") and f not in names)
    for f in only_b:
        print("%s: only in %s" % (f, dir_b))
    differ += len(only_b)
    print("%d of %d shards differ" % (differ, len(names) + len(only_b)))
    return differ == 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 usage="compare_shards.py A.bin B.bin [--files LIST.tsv] [--tokenizer T.json]\n"
                                       "       compare_shards.py --dirs DIR_A DIR_B [--tokenizer T.json]")
    ap.add_argument("a")
    ap.add_argument("b")
    ap.add_argument("--dirs", action="store_true", help="A and B are folders of per-file shards")
    ap.add_argument("--files", help="ids per file of A: 'count<TAB>file' lines (reference_encode.mjs --list)")
    ap.add_argument("--tokenizer", help="tokenizer.json, to show the tokens")
    ap.add_argument("--context", type=int, default=4, help="ids shown either side of the difference (4)")
    args = ap.parse_args()
    try:
        vocab = Vocab(args.tokenizer) if args.tokenizer else None
        if args.dirs:
            same = compare_dirs(args.a, args.b, vocab, args.context)
        else:
            files = None
            if args.files:
                with open(args.files, encoding="utf-8") as f:
                    files = [(int(c), n) for c, n in (line.rstrip("\n").split("\t", 1) for line in f if line.strip())]
            same = compare_pair(args.a, args.b, vocab, files, args.context)
    except (OSError, BadShard, ValueError, KeyError) as e:
        print("compare_shards: %s" % e, file=sys.stderr)
        sys.exit(2)
    sys.exit(0 if same else 1)


if __name__ == "__main__":
    main()
