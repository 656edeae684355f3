# Supervised data (fusionc tokenize --jsonl, runtime/data.h's mask, the
# loss's ignored targets):
#  - the shard: header[3] = 1, the ids of prompt then completion then the
#    end of text, one mask byte an id (0 prompt, 1 completion and end of
#    text); a line that is not JSON, or has no completion, refused naming
#    the file and line, no shard written; a mask byte other than 0 or 1,
#    or an unknown flag, refused when the data is opened;
#  - the loss: targets of -100 (a masked token) against PyTorch's
#    cross_entropy with ignore_index (the mean over the others): the loss
#    and every gradient within 1e-4; every target masked: loss 0, every
#    gradient 0 (a prompt adds no gradient);
#  - the same mathematics: 20 steps on the masked shard on one device and
#    as 2 stages x 2 replicas on local-4, the losses within 1e-5 (each
#    step's mean is over the whole batch's trained targets).
. "$(dirname "$0")/lib.sh"
no_leak_scan_in_threaded_programs
py=/usr/bin/python3
claim_ports

# A byte-level tokenizer.json: GPT-2's bytes-to-unicode alphabet, no merges, <|endoftext|> = 256.
"$py" - "$work/tokenizer.json" <<'PYEOF'
import json, sys
bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
cs, n = bs[:], 0
for b in range(256):
    if b not in bs:
        bs.append(b); cs.append(256 + n); n += 1
vocab = {chr(c): i for i, c in enumerate(cs)}
tok = {"version": "1.0", "added_tokens": [{"id": 256, "content": "<|endoftext|>", "single_word": False, "lstrip": False,
       "rstrip": False, "normalized": False, "special": True}], "normalizer": None,
       "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True},
       "post_processor": None, "decoder": {"type": "ByteLevel"},
       "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": "",
                 "end_of_word_suffix": "", "fuse_unk": False, "byte_fallback": False, "vocab": vocab, "merges": []}}
json.dump(tok, open(sys.argv[1], "w"))
PYEOF
"$py" - "$work/sft.jsonl" <<'PYEOF'
import json, sys, random
r = random.Random(3)
words = "the a cat dog sat ran on under mat log red blue".split()
with open(sys.argv[1], "w") as f:
    for i in range(400):
        q = " ".join(r.choice(words) for _ in range(6))
        f.write(json.dumps({"prompt": f"Q: {q}\nA:", "completion": " " + " ".join(reversed(q.split()))}) + "\n")
        if i == 5:
            f.write("\n")   # a blank line is skipped
PYEOF
"$FUSIONC" tokenize --jsonl "$work/tokenizer.json" "$work/sft.jsonl" --eos -o "$work/sft.bin" 2>"$work/tok.err" && pass ||
  fail "tokenize --jsonl: $(cat "$work/tok.err")"
grep -q "^tokenize: 400 examples, " "$work/tok.err" && pass || fail "no summary: $(cat "$work/tok.err")"
"$py" - "$work" <<'PYEOF' && pass || fail "the masked shard: see above"
import json, struct, sys
w = sys.argv[1]
raw = open(w + "/sft.bin", "rb").read()
h = struct.unpack("<256i", raw[:1024])
n, bad = h[2], []
if h[0] != 20240520 or h[1] != 1 or h[3] != 1:
    bad.append(f"header {h[:4]}")
if len(raw) != 1024 + 3 * n:
    bad.append(f"{len(raw)} bytes for {n} ids")
ids = struct.unpack(f"<{n}H", raw[1024:1024 + 2 * n])
mask = raw[1024 + 2 * n:]
vocab = json.load(open(w + "/tokenizer.json"))["model"]["vocab"]
first = json.loads(open(w + "/sft.jsonl").readline())
p, c = len(first["prompt"].encode()), len(first["completion"].encode())   # one id a byte, no merges
want_mask = [0] * p + [1] * c + [1]
if list(mask[:p + c + 1]) != want_mask:
    bad.append(f"the first example's mask {list(mask[:p + c + 1])}, expected {want_mask}")
if ids[p + c] != 256:
    bad.append(f"no end of text after the first example: {ids[p + c]}")
print("\n".join(bad) if bad else f"supervised: {n} ids, {sum(mask)} trained on, the first example's mask as expected",
      file=sys.stderr)
sys.exit(1 if bad else 0)
PYEOF
printf '{"prompt": "a", "completion": "b"}\nnot json\n' >"$work/bad1.jsonl"
printf '{"prompt": "a", "completion": "b"}\n\n{"prompt": "a"}\n' >"$work/bad2.jsonl"
for k in 1 2; do
  "$FUSIONC" tokenize --jsonl "$work/tokenizer.json" "$work/bad$k.jsonl" -o "$work/bad$k.bin" >"$work/bad$k.out" 2>&1
  expect_eq "bad$k: exit status" 1 $?
  [ ! -e "$work/bad$k.bin" ] && pass || fail "bad$k: a shard was written"
done
grep -q "bad1.jsonl:2: not a JSON object" "$work/bad1.out" && pass || fail "bad1: $(cat "$work/bad1.out")"
grep -q "bad2.jsonl:3: no \"completion\" string" "$work/bad2.out" && pass || fail "bad2: $(cat "$work/bad2.out")"

# A damaged mask or flag is refused when the data is opened.
"$py" - "$work" <<'PYEOF' || fail "making damaged shards"
import struct, sys
w = sys.argv[1]
raw = bytearray(open(w + "/sft.bin", "rb").read())
n = struct.unpack("<i", raw[8:12])[0]
bad_mask = bytearray(raw); bad_mask[1024 + 2 * n + 7] = 2
open(w + "/badmask.bin", "wb").write(bad_mask)
bad_flag = bytearray(raw); bad_flag[12:16] = struct.pack("<i", 3)
open(w + "/badflag.bin", "wb").write(bad_flag)
PYEOF

# ---- the loss against PyTorch's ignore_index
cfg="vocab=257,ctx=32,layers=2,dim=64,heads=4,kv_heads=2,ffn=172,batch=4,seq=24"
model=(models/llama.xml)
IFS=, read -ra kv <<<"$cfg"
for s in "${kv[@]}"; do model+=(--set "$s"); done
"$FUSIONC" compile "${model[@]}" clusters/local-1.xml -o "$work/one" >"$work/one.compile" 2>&1 && pass ||
  fail "compile: $(cat "$work/one.compile")"
"$py" tests/parity/torch_parity.py make llama "$cfg" "$work/w.st" "$work/in.st" 5 || fail "making weights"
"$py" - "$work" <<'PYEOF' || fail "making masked inputs"
import sys, torch
sys.path.insert(0, "tests/parity")
from torch_parity import st_read, st_write
w = sys.argv[1]
I = st_read(w + "/in.st")
t = I["targets"].clone()
t[:, :10] = -100          # each row's first 10 targets: a prompt
t[2, :] = -100            # one row all prompt
st_write(w + "/masked.st", {"idx": I["idx"], "targets": t})
st_write(w + "/none.st", {"idx": I["idx"], "targets": torch.full_like(t, -100)})
PYEOF
"$work/one/cpu0/fusion-cpu0" --init "$work/w.st" --inputs "$work/masked.st" --steps 1 --dump-grads "$work/masked.dump" \
  >"$work/masked.run" 2>&1 && pass || fail "masked run: $(tail -2 "$work/masked.run")"
"$py" tests/parity/torch_parity.py grads llama "$cfg" "$work/w.st" "$work/masked.dump" >"$work/masked.cmp" 2>&1 && pass ||
  fail "masked targets against PyTorch's ignore_index: $(cat "$work/masked.cmp")"
echo "  supervised: $(tail -1 "$work/masked.cmp")" >&2
"$work/one/cpu0/fusion-cpu0" --init "$work/w.st" --inputs "$work/none.st" --steps 1 --dump-grads "$work/none.dump" \
  >"$work/none.run" 2>&1 && pass || fail "all-masked run: $(tail -2 "$work/none.run")"
"$py" - "$work/none.dump" <<'PYEOF' && pass || fail "every target masked: not a zero loss and zero gradients"
import sys
sys.path.insert(0, "tests/parity")
from torch_parity import st_read
d = st_read(sys.argv[1])
worst = max(t.abs().max().item() for k, t in d.items() if k.startswith("grad."))
sys.exit(0 if d["loss"].item() == 0 and worst == 0 else 1)
PYEOF

for k in mask flag; do
  "$work/one/cpu0/fusion-cpu0" --data "$work/bad$k.bin" --steps 1 >"$work/bad$k.run" 2>&1
  expect_eq "a damaged $k: exit status" 1 $?
done
grep -q "badmask.bin: mask byte 2 at token 7: 0 (not a target) or 1 only" "$work/badmask.run" && pass ||
  fail "bad mask: $(tail -1 "$work/badmask.run")"
grep -q "badflag.bin: token shard flags 3 (header\[3\]): only 1 (a loss mask) is known" "$work/badflag.run" && pass ||
  fail "bad flag: $(tail -1 "$work/badflag.run")"

# ---- the same mathematics on the masked shard
"$work/one/cpu0/fusion-cpu0" --data "$work/sft.bin" --seed 2 --steps 20 >"$work/one.out" 2>&1 && pass ||
  fail "one device on the shard: $(tail -2 "$work/one.out")"
"$FUSIONC" compile "${model[@]}" clusters/local-4.xml -o "$work/pipe" --stages 2 --replicas 2 --micro-batches 2 \
  --compress none --port-base $((ports + 10)) >"$work/pipe.compile" 2>&1 && pass || fail "pipe: $(cat "$work/pipe.compile")"
"$work/pipe/launch-local.sh" --data "$work/sft.bin" --seed 2 --steps 20 >"$work/pipe.out" 2>&1 && pass ||
  fail "2 x 2 on the shard: $(tail -5 "$work/pipe.out")"
reporter=$(sed -n 's/^reporter=//p' "$work/pipe/launch-local.sh")
losses() { awk '/^step .*loss/{print $4}' "$1"; }
paste <(losses "$work/one.out") <(losses "$work/pipe/logs/$reporter.log") | awk '
  { d = $1 - $2; if (d < 0) d = -d; if (d / $1 > w) w = d / $1 }
  END { if (NR != 20 || w > 1e-5) { printf "FAIL: %d steps, worst %.2g\n", NR, w > "/dev/stderr"; exit 1 }
        printf "supervised: 2 x 2 against one device on the masked shard: worst %.2g over %d steps\n", w, NR > "/dev/stderr" }' &&
  pass || fail "masked data: 2 x 2 is not one device's mathematics"
first=$(losses "$work/one.out" | head -1); last=$(losses "$work/one.out" | tail -1)
awk -v a="$first" -v b="$last" 'BEGIN { exit !(b < a) }' && pass || fail "the completions' loss $first -> $last did not fall"
finish
