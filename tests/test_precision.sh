# Mixed precision (--precision fp32|bf16|fp16), end to end:
#   - bf16's losses for 5 AdamW steps from the same weights and batch are
#     within 1e-2 relative of PyTorch's bf16 autocast (Debian's
#     python3-torch), and differ from fusion's own fp32 losses (so the run
#     really stored its activations in bf16);
#   - every CPU kernel in bf16 and fp16: ResNet-18 (conv2d, batchnorm,
#     maxpool, average pool, relu, linear) in bf16, its first loss within
#     2e-2 of torch autocast's (measured 1.4e-2: ResNet-18's first step in
#     bf16 lands 0.5% (ours) and 0.9% (autocast's) off fp32's, on opposite
#     sides), and in bf16 and fp16 its loss falls over 3 steps;
#   - bf16 on clusters/local-4.xml (2 stages x 2 replicas, raw bf16 on the
#     links, the tied embedding f32: CPU products do not round it) gives
#     the one-device bf16 run's losses within 2e-4 relative (fp32
#     runs agree to 1e-5: the replicas sum the parameters' gradients in
#     another order, the last bits of the updated weights differ, and bf16
#     rounds a few activations to the other neighbour; measured: 4e-5);
#   - the codecs compose with it: bf16 activations crossing local-4's slow
#     link as rows of 8 or 4 bits (adatopk) and as top-k (topk:0.1; at 0.3
#     the encoding, 8 bytes a kept element, is larger than bf16 dense) train;
#   - fp16 with an overflow forced at step 4: the step is skipped (every
#     parameter and AdamW moment after it equals the checkpoint before it),
#     the loss scale halves (65536 -> 32768), training goes on and its loss
#     falls; a run resumed from a checkpoint after the overflow goes on at
#     32768;
#   - --save-dtype bf16 writes the checkpoint's parameters as BF16 (AdamW's
#     moments F32), and a run resumed from it goes on within 1e-3 of one
#     resumed from the fp32 checkpoint;
#   - memory and bytes: GPT-2 small (B=4, T=64) stores <= 0.6x the
#     activation bytes in bf16; `fusionc plan` shows each stage link's
#     bytes a step, halved in bf16;
#   - honest peaks: GPT-3 XL on dtfm-datacenter-ondemand (bench_paper.sh's
#     settings) simulates >= 4x slower in fp32 than in fp16 (V100: 15.7 vs
#     125 TFLOPS), and bf16 there is refused naming the device (V100s have
#     no bf16);
#   - the IR's precision line reads back; --precision int3 is a usage error;
#     --init from a safetensors file whose tensor is F64 stops with a message
#     naming the file, the tensor and the dtype.
. "$(dirname "$0")/lib.sh"
no_leak_scan_in_threaded_programs
py=/usr/bin/python3
"$py" -c 'import torch' 2>/dev/null || { echo "FAIL: /usr/bin/python3 cannot import torch (install python3-torch)" >&2; exit 1; }
parity=tests/parity/torch_parity.py
cat /usr/share/common-licenses/* > "$work/corpus.txt"
rel_within() { awk -v a="$1" -v b="$2" -v t="$3" 'BEGIN { d = a - b; if (d < 0) d = -d; m = b < 0 ? -b : b; exit !(d <= t * m) }'; }
losses() { awk '/^step +[0-9]+\//{print $4}' "$1"; }
jsonl_loss() { sed 's/.*"loss": \([0-9.]*\).*/\1/' "$@"; }
# sets_of "a=1,b=2" NAME: the array NAME=(--set a=1 --set b=2)
sets_of() { local -n out=$2; local kv s; out=(); IFS=, read -ra kv <<<"$1"; for s in "${kv[@]}"; do out+=(--set "$s"); done; }

# ---- bf16 against torch autocast --------------------------------------------
cfg="vocab=256,ctx=32,layers=2,dim=64,heads=4,batch=4,seq=32,lr=1e-3"
sets_of "$cfg" sets
"$py" "$parity" make gpt2 "$cfg" "$work/w.st" "$work/in.st" 7 || fail "torch_parity make"
for p in fp32 bf16; do
  "$FUSIONC" compile models/gpt2.xml clusters/local-1.xml -o "$work/par-$p" "${sets[@]}" --precision $p \
    >"$work/par-$p.log" 2>&1 && pass || fail "compile --precision $p: $(tail -2 "$work/par-$p.log")"
  "$work/par-$p/cpu0/fusion-cpu0" --init "$work/w.st" --inputs "$work/in.st" --steps 5 --log "$work/$p.jsonl" \
    >"$work/par-$p.run" 2>&1 && pass || fail "run $p: $(tail -2 "$work/par-$p.run")"
done
if "$py" "$parity" autocast gpt2 "$cfg" "$work/w.st" "$work/in.st" "$work/bf16.jsonl" 5 bfloat16 >"$work/cmp" 2>&1; then
  pass; echo "  $(tail -1 "$work/cmp")" >&2
else fail "bf16 vs torch autocast: $(cat "$work/cmp")"; fi
differ=$(paste <(jsonl_loss "$work/fp32.jsonl") <(jsonl_loss "$work/bf16.jsonl") |
  awk '{ d = $1 - $2; if (d < 0) d = -d; if (d > 1e-5 * $1) n++ } END { print n + 0 }')
[ "$differ" -ge 3 ] && pass || fail "bf16's losses equal fp32's in $((5 - differ)) of 5 steps: is it storing bf16 at all?"

# ---- every CPU kernel: ResNet-18 in bf16 and fp16 ------------------------------
rcfg="depth=18,batch=8,size=32,classes=7,lr=1e-3"
sets_of "$rcfg" rsets
"$py" "$parity" make resnet "$rcfg" "$work/rw.st" "$work/rin.st" 7 || fail "torch_parity make resnet"
for p in bf16 fp16; do
  "$FUSIONC" compile models/resnet.xml clusters/local-1.xml -o "$work/rn-$p" "${rsets[@]}" --precision $p >/dev/null &&
    "$work/rn-$p/cpu0/fusion-cpu0" --init "$work/rw.st" --inputs "$work/rin.st" --steps 3 --log "$work/rn-$p.jsonl" \
      >"$work/rn-$p.run" 2>&1 && pass || fail "resnet18 $p: $(tail -2 "$work/rn-$p.run")"
  first=$(head -1 "$work/rn-$p.jsonl" | jsonl_loss)
  last=$(tail -1 "$work/rn-$p.jsonl" | jsonl_loss)
  awk -v a="$first" -v b="$last" 'BEGIN { exit !(b < 0.5 * a) }' && pass || fail "resnet18 $p: loss $first -> $last over 3 steps"
done
if "$py" "$parity" autocast resnet "$rcfg" "$work/rw.st" "$work/rin.st" "$work/rn-bf16.jsonl" 1 bfloat16 2e-2 >"$work/rcmp" 2>&1
then pass; echo "  resnet18 $(tail -1 "$work/rcmp")" >&2
else fail "resnet18 bf16 vs torch autocast: $(cat "$work/rcmp")"; fi

# ---- bf16 on four devices: the one-device mathematics -------------------------
model=(--set vocab=256 --set ctx=32 --set layers=4 --set dim=48 --set heads=4 --set batch=8 --set seq=32
       --set lr=3e-3 --set warmup=5)
claim_ports   # tests/lib.sh: this test's own ports
base=$ports
"$FUSIONC" compile models/gpt2.xml clusters/local-1.xml -o "$work/one" "${model[@]}" --precision bf16 >/dev/null &&
  "$work/one/cpu0/fusion-cpu0" --data "$work/corpus.txt" --steps 10 --seed 5 >"$work/one.out" 2>&1 && pass ||
  fail "one-device bf16 run: $(tail -3 "$work/one.out")"
"$FUSIONC" compile models/gpt2.xml clusters/local-4.xml -o "$work/four" "${model[@]}" --precision bf16 \
  --stages 2 --replicas 2 --compress none --port-base "$base" >"$work/four.log" 2>&1 && pass ||
  fail "local-4 bf16 compile: $(tail -2 "$work/four.log")"
# CPU devices read f32 weights unrounded: the tied embedding crosses whole (passes.h).
grep -q "crosses from stage" "$work/four/plan.txt" \
  && fail "local-4 bf16: a parameter crosses to a CPU stage in 16 bits: $(grep crosses "$work/four/plan.txt")" || pass
"$work/four/launch-local.sh" --data "$work/corpus.txt" --steps 10 --seed 5 >"$work/four.out" 2>&1 && pass ||
  fail "local-4 bf16 run: $(tail -5 "$work/four.out")"
awk '/^\[[^]]*\] step +[0-9]+\//{print $5}' "$work/four.out" >"$work/four.loss"
losses "$work/one.out" >"$work/one.loss"
expect_eq "bf16 steps on local-4" 10 "$(wc -l <"$work/four.loss")"
bad=$(paste "$work/one.loss" "$work/four.loss" | awk '{ d = $1 - $2; if (d < 0) d = -d; if (d > 2e-4 * $1) n++ } END { print n + 0 }')
expect_eq "local-4 bf16 steps off the one-device bf16 losses by > 2e-4" 0 "$bad"

# ---- the codecs on 16-bit activations -------------------------------------------
for spec in adatopk topk:0.1; do
  name=${spec%%:*}
  "$FUSIONC" compile models/gpt2.xml clusters/local-4.xml -o "$work/c-$name" "${model[@]}" --precision bf16 \
    --stages 4 --compress "$spec" --port-base $((base + 20)) >"$work/c-$name.log" 2>&1 && pass ||
    fail "local-4 bf16 --compress $spec: $(tail -2 "$work/c-$name.log")"
  # The slow link (stage 1 -> 2, between the sites) carries fewer bytes than the fast one before it.
  fast=$(sed -n 's/^link stage 0 <-> 1 .*: \([0-9.]*\) KiB a step forward.*/\1/p' "$work/c-$name/plan.txt")
  slow=$(sed -n 's/^link stage 1 <-> 2 .*: \([0-9.]*\) KiB a step forward.*/\1/p' "$work/c-$name/plan.txt")
  awk -v f="$fast" -v s="$slow" 'BEGIN { exit !(f > 0 && s > 0 && s < 0.75 * f) }' && pass ||
    fail "--compress $spec: the slow link carries '$slow' KiB a step, the fast one '$fast': not compressed"
  "$work/c-$name/launch-local.sh" --data "$work/corpus.txt" --steps 10 --seed 5 >"$work/c-$name.out" 2>&1 && pass ||
    fail "local-4 bf16 --compress $spec run: $(tail -5 "$work/c-$name.out")"
  awk '/^\[[^]]*\] step +[0-9]+\//{print $5}' "$work/c-$name.out" >"$work/c-$name.loss"
  first=$(head -1 "$work/c-$name.loss"); last=$(tail -1 "$work/c-$name.loss")
  awk -v a="$first" -v b="$last" 'BEGIN { exit !(b < a - 0.5) }' && pass ||
    fail "local-4 bf16 --compress $spec: loss $first -> $last over 10 steps"
done

# ---- fp16: a forced overflow is skipped, the scale halves, training goes on ----
"$FUSIONC" compile models/gpt2.xml clusters/local-1.xml -o "$work/h" "${model[@]}" --precision fp16 >/dev/null && pass ||
  fail "fp16 compile"
"$work/h/cpu0/fusion-cpu0" --data "$work/corpus.txt" --steps 3 --seed 5 --save "$work/ck3" >"$work/h3.out" 2>&1 &&
  "$work/h/cpu0/fusion-cpu0" --data "$work/corpus.txt" --steps 4 --seed 5 --save "$work/ck4" --inject-overflow 4 \
    >"$work/h4.out" 2>&1 && pass || fail "fp16 runs: $(tail -3 "$work/h4.out")"
"$py" - "$work/ck3/latest/checkpoint.safetensors" "$work/ck4/latest/checkpoint.safetensors" >"$work/same" 2>&1 <<'EOF' && pass ||
import sys
sys.path.insert(0, "tests/parity")
from torch_parity import st_read
a, b = st_read(sys.argv[1]), st_read(sys.argv[2])
names = [n for n in a if n.startswith("adamw.") or n in b and not n.startswith("loss")]
bad = [n for n in names if n in b and not a[n].equal(b[n])]
print(f"{len(names)} tensors compared, {len(bad)} changed by the skipped step: {bad[:3]}")
sys.exit(1 if bad or len(names) < 3 else 0)
EOF
  fail "the skipped step changed the model: $(cat "$work/same")"
grep -q "step     4: gradients overflowed: step skipped, loss scale 65536 -> 32768" "$work/h4.out" && pass ||
  fail "no skip line for step 4: $(grep -n 'step     4' "$work/h4.out")"
"$work/h/cpu0/fusion-cpu0" --data "$work/corpus.txt" --steps 30 --seed 5 --inject-overflow 4 --log "$work/h.jsonl" \
  >"$work/h30.out" 2>&1 && pass || fail "fp16 30 steps: $(tail -3 "$work/h30.out")"
expect_eq "fp16 step 5's loss scale" 32768 "$(sed -n 5p "$work/h.jsonl" | sed 's/.*"loss_scale": \([0-9]*\).*/\1/')"
expect_eq "fp16 steps skipped" 1 "$(grep -c '"skipped": true' "$work/h.jsonl")"
"$work/h/cpu0/fusion-cpu0" --data "$work/corpus.txt" --steps 6 --seed 5 --resume "$work/ck4" --log "$work/hr.jsonl" \
  >"$work/hr.out" 2>&1 && pass || fail "fp16 resume: $(tail -3 "$work/hr.out")"
expect_eq "fp16 resumed at step 5: its loss scale" 32768 "$(head -1 "$work/hr.jsonl" | sed 's/.*"loss_scale": \([0-9]*\).*/\1/')"
first=$(losses "$work/h30.out" | head -1); last=$(losses "$work/h30.out" | tail -1)
awk -v a="$first" -v b="$last" 'BEGIN { exit !(b < a - 0.5) }' && pass ||
  fail "fp16 after the overflow: loss $first -> $last, expected it to fall by > 0.5"

# ---- bf16 checkpoints --------------------------------------------------------------
"$work/one/cpu0/fusion-cpu0" --data "$work/corpus.txt" --steps 3 --seed 5 --save "$work/s32" >/dev/null 2>&1 &&
  "$work/one/cpu0/fusion-cpu0" --data "$work/corpus.txt" --steps 3 --seed 5 --save "$work/s16" --save-dtype bf16 \
    >/dev/null 2>&1 && pass || fail "--save-dtype bf16 run"
"$py" - "$work/s16/latest/checkpoint.safetensors" >"$work/dt" 2>&1 <<'EOF' && pass || fail "bf16 checkpoint dtypes: $(cat "$work/dt")"
import json, struct, sys
f = open(sys.argv[1], "rb")
h = json.loads(f.read(struct.unpack("<Q", f.read(8))[0]))
d = {n: e["dtype"] for n, e in h.items() if n != "__metadata__"}
bad = [n for n, t in d.items() if t != ("F32" if n.startswith("adamw.") else "BF16")]
print(f"{len(d)} tensors, wrong dtype: {bad[:3]}")
sys.exit(1 if bad or not d else 0)
EOF
for s in 32 16; do
  "$work/one/cpu0/fusion-cpu0" --data "$work/corpus.txt" --steps 5 --resume "$work/s$s" >"$work/r$s.out" 2>&1 ||
    fail "resume from s$s: $(tail -2 "$work/r$s.out")"
done
r32=$(losses "$work/r32.out" | tail -1); r16=$(losses "$work/r16.out" | tail -1)
rel_within "$r16" "$r32" 1e-3 && pass || fail "resumed from the bf16 checkpoint: loss $r16, from fp32's $r32"

# ---- memory and bytes ------------------------------------------------------------
act() { "$FUSIONC" stats models/gpt2.xml --set batch=4 --set seq=64 --precision "$1" |
          awk '/^activations/ { gsub(/\(/, "", $6); print $6 }'; }
a32=$(act fp32); a16=$(act bf16)
awk -v a="$a32" -v b="$a16" 'BEGIN { exit !(b > 0 && b <= 0.6 * a) }' && pass ||
  fail "GPT-2 small activations: bf16 $a16 MiB, fp32 $a32 MiB: expected <= 0.6x"
echo "  GPT-2 small B=4 T=64 activations a step: fp32 $a32 MiB, bf16 $a16 MiB" >&2
# "link stage 1 <-> 2 (cpu-a1 <-> cpu-b0): 768.0 KiB a step forward, 768.0 KiB back" -> bytes forward
link() { "$FUSIONC" plan models/gpt2.xml clusters/local-4.xml --set batch=4 --set seq=64 --stages 4 --micro-batches 4 \
           --compress none --precision "$1" -o "$work" |
         awk '/^link stage 1 <-> 2 / { for (i = 1; i < NF; i++) if ($(i+1) == "KiB" || $(i+1) == "MiB" || $(i+1) == "B") {
                  print $i * ($(i+1) == "MiB" ? 1048576 : $(i+1) == "KiB" ? 1024 : 1); exit } }'; }
l32=$(link fp32); l16=$(link bf16)
awk -v a="$l32" -v b="$l16" 'BEGIN { d = a - 2 * b; exit !(a > 0 && d < 1e-3 * a && d > -1e-3 * a) }' && pass ||
  fail "plan's stage 1 <-> 2 link: fp32 '$l32' bytes a step forward, bf16 '$l16': expected half"
echo "  plan, GPT-2 small on local-4, stage 1 -> 2: fp32 $l32 bytes a step, bf16 $l16" >&2

# ---- honest peaks ------------------------------------------------------------------
gpt3xl=(models/gpt2.xml --set layers=24 --set dim=2048 --set heads=16 --set ctx=2048 --set seq=2048
        --set batch=1024 --micro-batches 128)
step() { "$FUSIONC" simulate "${gpt3xl[@]}" clusters/dtfm-datacenter-ondemand.xml --scheduler gcma --compress none \
           --precision "$1" -o "$work" | awk '/^simulated step:/ { print $3 }'; }
s32=$(step fp32); s16=$(step fp16)
awk -v a="$s32" -v b="$s16" 'BEGIN { exit !(b > 0 && a >= 4 * b) }' && pass ||
  fail "GPT-3 XL on V100s: fp32 $s32 ms, fp16 $s16 ms: expected fp32 >= 4x fp16"
echo "  GPT-3 XL on dtfm-datacenter-ondemand (gcma): fp32 $s32 ms, fp16 $s16 ms a step" >&2
"$FUSIONC" simulate "${gpt3xl[@]}" clusters/dtfm-datacenter-ondemand.xml --precision bf16 -o "$work" >"$work/v100" 2>&1
expect_eq "bf16 on V100s: exit" 1 "$?"
grep -q "clusters/dtfm-datacenter-ondemand.xml:[0-9]*: error: device 'node0-g0' sm_70 states no peak-bf16" "$work/v100" &&
  pass || fail "bf16 on V100s: $(cat "$work/v100")"

# ---- the IR's precision line; bad input --------------------------------------------
"$FUSIONC" dump models/gpt2.xml --set layers=1 --precision fp16 -o "$work/g.fir" && "$FUSIONC" dump "$work/g.fir" -o "$work/g2.fir" &&
  cmp -s "$work/g.fir" "$work/g2.fir" && pass || fail "the fp16 IR does not read back byte-identical"
grep -q "^precision f16$" "$work/g.fir" && pass || fail "no 'precision f16' line in the IR"
"$FUSIONC" compile models/gpt2.xml clusters/local-1.xml -o "$work/x" --precision int3 >"$work/bad" 2>&1
expect_eq "--precision int3: exit" 2 "$?"
grep -q "fusionc compile: --precision expects fp32, bf16 or fp16, found 'int3'" "$work/bad" && pass || fail "int3: $(head -2 "$work/bad")"
[ ! -e "$work/x" ] && pass || fail "--precision int3 left an output folder"
"$py" - "$work/w.st" "$work/f64.st" <<'EOF' || fail "making an F64 file"
import sys
sys.path.insert(0, "tests/parity")
from torch_parity import st_read
import json, struct
t = st_read(sys.argv[1])
header, blobs, off = {}, [], 0
for n, v in t.items():
    raw = v.double().numpy().tobytes() if n == "wte.weight" else v.numpy().tobytes()
    header[n] = {"dtype": "F64" if n == "wte.weight" else "F32", "shape": list(v.shape), "data_offsets": [off, off + len(raw)]}
    blobs.append(raw)
    off += len(raw)
text = json.dumps(header).encode()
text += b" " * (-len(text) % 8)
open(sys.argv[2], "wb").write(struct.pack("<Q", len(text)) + text + b"".join(blobs))
EOF
"$work/par-bf16/cpu0/fusion-cpu0" --init "$work/f64.st" --inputs "$work/in.st" --steps 1 >"$work/f64.out" 2>&1
expect_eq "--init with an F64 tensor: exit" 1 "$?"
grep -q "f64.st: tensor 'wte.weight': dtype F64 is not supported (fusion reads F32, F16, BF16, I32)" "$work/f64.out" && pass ||
  fail "--init with an F64 tensor: $(tail -2 "$work/f64.out")"
finish
