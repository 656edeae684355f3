# --lora (passes/adapters.c): LoRA adapters as a graph rewrite.
#  - parity: a tiny Llama with adapters on q_proj, v_proj and down_proj,
#    from given base weights and adapters (B non-zero, so both gradients
#    count; --init twice): the loss and every adapter's gradient within
#    1e-4 of PyTorch's LoRA (tests/parity/lora.py), no base weight with a
#    gradient;
#  - 20 steps from the base: every base weight bit-identical to the one it
#    started from; the adapters trained; no moments for the base;
#  - the checkpoint holds the adapters and their moments alone, and a hash
#    of each base weight; resumed at 10 with the base again, steps 11-20
#    are the straight run's; resumed without it, or on another base, it is
#    refused naming the weight;
#  - export --adapter: PEFT's adapter_config.json and adapter model by
#    PEFT's names; --merge --base: PyTorch's merge (W + 2 B A) within 1e-6,
#    the rest of the base bit for bit, and the merged model's loss the
#    LoRA model's; another base, or a plain export, refused;
#  - GPT-2 (Conv1D weights, [in, out]): a LoRA on c_attn from a trained
#    base exports --merge as W + 2 (B A)ᵀ within 1e-6, every other
#    weight bit for bit, and --adapter with fan_in_fan_out true;
#  - a fresh LoRA (B zero) starts at the base model's loss exactly;
#  - dropout=0.25 (PEFT's lora_dropout): the loss and the adapters'
#    gradients within 1e-4 of the PyTorch LoRA given the masks the run drew
#    (--dump-grads writes them with the inputs); each mask 0 or 4/3, about a
#    quarter 0, every one its own; 2 stages x 2 replicas, recomputing,
#    draw the same masks (one device's losses within 1e-6); validation
#    drops nothing (at lr 1e-30, the val_loss of the model without
#    dropout); export --adapter says lora_dropout 0.25;
#  - quality: a base trained on the licences (--init of its --save
#    folder), fine-tuned with LoRA on Python's library, lowers its
#    validation loss on a held-out module of it;
#  - 2 stages x 2 replicas on local-4: one device's losses within 1e-5;
#  - the schedule pass counts a frozen weight once (no gradient, no
#    moments), as the fence pass's cost model does, and the cost model
#    runs a stage's replay before its backward waits, as the runtime
#    does: an 8B-shaped LoRA on dtfm-worldwide simulates within 3% of its
#    plan's estimate at 64 micro-batches, and at 128 with every stage
#    recomputing (the frozen base counted 4 x: 22.5 s simulated for 15.8
#    s estimated at 64; the replay after the wait: 16.65 s for 18.61 s at
#    128);
#  - bad input: a target that wraps no linear, a malformed --lora, a
#    frozen weight missing from --init.
. "$(dirname "$0")/lib.sh"
no_leak_scan_in_threaded_programs

py=/usr/bin/python3
cfg="vocab=256,ctx=32,layers=2,dim=64,heads=4,kv_heads=2,ffn=172,batch=4,seq=24"
model=(models/llama.xml)
IFS=, read -ra kv <<<"$cfg"
for s in "${kv[@]}"; do model+=(--set "$s"); done
lora=(--lora rank=4,alpha=8,targets=q_proj,v_proj,down_proj)   # scale alpha/rank = 2
claim_ports
losses() { awk '/^step .*loss/{print $4}' "$1"; }
cat /usr/share/common-licenses/* >"$work/corpus.txt"

"$py" tests/parity/torch_parity.py make llama "$cfg" "$work/base.st" "$work/in.st" 7 || fail "making the base"
"$py" tests/parity/lora.py adapters "$cfg" "$work/adapters.st" 4 8 q_proj v_proj down_proj || fail "making adapters"
"$FUSIONC" compile "${model[@]}" "${lora[@]}" clusters/local-1.xml -o "$work/one" >"$work/one.compile" 2>&1 && pass ||
  fail "compile: $(cat "$work/one.compile")"
prog=$work/one/cpu0/fusion-cpu0

# ---- parity with PyTorch's LoRA
"$prog" --init "$work/base.st" --init "$work/adapters.st" --inputs "$work/in.st" --steps 1 \
  --dump-grads "$work/dump.st" >"$work/parity.run" 2>&1 && pass || fail "parity run: $(tail -3 "$work/parity.run")"
"$py" tests/parity/lora.py grads "$cfg" "$work/base.st" "$work/adapters.st" "$work/in.st" "$work/dump.st" 2 \
  >"$work/parity" 2>&1 && pass || fail "LoRA against PyTorch: $(cat "$work/parity")"
echo "  $(tail -1 "$work/parity")" >&2

# ---- GPT-2's transposed weights: the merge and the adapter config
g2=(models/gpt2.xml --set vocab=256 --set ctx=16 --set layers=1 --set dim=32 --set heads=2 --set batch=2 --set seq=16)
"$FUSIONC" compile "${g2[@]}" clusters/local-1.xml -o "$work/g2" >/dev/null 2>&1 || fail "GPT-2 compile"
"$FUSIONC" compile "${g2[@]}" --lora rank=2,alpha=4,targets=c_attn clusters/local-1.xml -o "$work/g2l" >/dev/null 2>&1 ||
  fail "GPT-2 LoRA compile"
"$work/g2/cpu0/fusion-cpu0" --data "$work/corpus.txt" --steps 2 --save "$work/g2base" >/dev/null 2>&1 || fail "GPT-2 base"
"$FUSIONC" export "$work/g2base" -o "$work/g2hf" >/dev/null 2>&1 || fail "GPT-2 base export"
"$work/g2l/cpu0/fusion-cpu0" --init "$work/g2base" --data "$work/corpus.txt" --steps 3 --save "$work/g2ck" >/dev/null 2>&1 ||
  fail "GPT-2 LoRA training"
"$FUSIONC" export "$work/g2ck" -o "$work/g2m" --merge --base "$work/g2hf" >"$work/g2m.out" 2>&1 && pass ||
  fail "GPT-2 --merge: $(cat "$work/g2m.out")"
"$FUSIONC" export "$work/g2ck" -o "$work/g2p" --adapter >"$work/g2p.out" 2>&1 && pass ||
  fail "GPT-2 --adapter: $(cat "$work/g2p.out")"
"$py" - "$work" <<'PYEOF' && pass || fail "GPT-2's merge: see above"
import glob, json, sys
sys.path.insert(0, "tests/parity")
from torch_parity import st_read
w = sys.argv[1]
base, merged = st_read(w + "/g2hf"), st_read(w + "/g2m")
ck = st_read(sorted(glob.glob(w + "/g2ck/step-*/checkpoint.safetensors"))[-1])
lin = "h.0.attn.c_attn"
A, B, W = ck[lin + ".lora_A.weight"], ck[lin + ".lora_B.weight"], base[lin + ".weight"]
want = W + 2 * (B @ A).T
d = (merged[lin + ".weight"] - want).abs().max().item() / want.abs().max().item()
bad = [f"{lin}.weight: merged differs by {d:.3g} of its largest"] if d > 1e-6 else []
bad += ["B A is zero: the adapters did not train"] if not (B @ A).abs().max() > 0 else []
bad += [f"{n}: not the base's" for n in base if n != lin + ".weight" and not merged[n].equal(base[n])]
if not json.load(open(w + "/g2p/adapter_config.json"))["fan_in_fan_out"]:
    bad.append("adapter_config.json: fan_in_fan_out is not true for GPT-2")
print("\n".join(bad) if bad else f"lora: GPT-2's merge W + 2 (B A)^T within {d:.2g}", file=sys.stderr)
sys.exit(1 if bad else 0)
PYEOF

# ---- dropout on the adapters
dlora=(--lora rank=4,alpha=8,targets=q_proj,v_proj,down_proj,dropout=0.25)
"$FUSIONC" compile "${model[@]}" "${dlora[@]}" clusters/local-1.xml -o "$work/drop" >"$work/drop.compile" 2>&1 && pass ||
  fail "compile with dropout: $(cat "$work/drop.compile")"
"$work/drop/cpu0/fusion-cpu0" --init "$work/base.st" --init "$work/adapters.st" --data "$work/corpus.txt" --seed 3 \
  --steps 1 --dump-grads "$work/drop.st" >"$work/drop.run" 2>&1 && pass || fail "dropout run: $(tail -3 "$work/drop.run")"
"$py" tests/parity/lora.py grads "$cfg" "$work/base.st" "$work/adapters.st" "$work/drop.st" "$work/drop.st" 2 \
  >"$work/drop.parity" 2>&1 && pass || fail "LoRA with dropout against PyTorch: $(cat "$work/drop.parity")"
echo "  dropout: $(tail -1 "$work/drop.parity")" >&2
"$py" - "$work/drop.st" <<'PYEOF' && pass || fail "the dropout masks: see above"
import sys
sys.path.insert(0, "tests/parity")
from torch_parity import st_read
d = st_read(sys.argv[1])
masks = {n: t for n, t in d.items() if n.endswith(".lora_dropout.mask")}
bad = [] if len(masks) == 6 else [f"{len(masks)} masks, expected 6"]
for n, t in masks.items():
    zero = (t == 0).float().mean().item()
    if not ((t == 0) | (t == 4.0 / 3.0)).all():
        bad.append(f"{n}: a value neither 0 nor 4/3")
    if not 0.2 < zero < 0.3:
        bad.append(f"{n}: {zero:.3f} of it 0, expected about 0.25")
flat = [t.flatten() for t in masks.values() if t.shape[-1] == 64]
bad += ["two masks are the same"] if any(a.equal(b) for i, a in enumerate(flat) for b in flat[i + 1:]) else []
print("\n".join(bad) if bad else f"dropout: {len(masks)} masks of 0 and 4/3, each its own", file=sys.stderr)
sys.exit(1 if bad else 0)
PYEOF
"$FUSIONC" compile "${model[@]}" "${dlora[@]}" clusters/local-4.xml -o "$work/drop4" --stages 2 --replicas 2 \
  --micro-batches 2 --compress none --recompute on --port-base $((ports + 40)) >"$work/drop4.compile" 2>&1 && pass ||
  fail "dropout 2 x 2 compile: $(cat "$work/drop4.compile")"
"$work/drop/cpu0/fusion-cpu0" --init "$work/base.st" --data "$work/corpus.txt" --seed 3 --steps 8 >"$work/drop1.out" 2>&1 ||
  fail "dropout, one device: $(tail -3 "$work/drop1.out")"
"$work/drop4/launch-local.sh" --init "$work/base.st" --data "$work/corpus.txt" --seed 3 --steps 8 >"$work/drop4.out" 2>&1 &&
  pass || fail "dropout, 2 x 2: $(tail -5 "$work/drop4.out")"
reporter=$(sed -n 's/^reporter=//p' "$work/drop4/launch-local.sh")
expect_eq "dropout, 2 x 2: steps logged" 8 "$(losses "$work/drop4/logs/$reporter.log" | wc -l)"
losses_within "dropout: 2 x 2 recomputing against one device" <(losses "$work/drop1.out") \
  <(losses "$work/drop4/logs/$reporter.log") 1e-6
for d in 0 0.25; do # validation drops nothing: lr 1e-30 leaves the weights as they are
  "$FUSIONC" compile "${model[@]}" --set lr=1e-30 --lora "rank=4,alpha=8,targets=q_proj,v_proj,down_proj,dropout=$d" \
    clusters/local-1.xml -o "$work/val$d" >/dev/null 2>&1 || fail "compile dropout=$d"
  "$work/val$d/cpu0/fusion-cpu0" --init "$work/base.st" --init "$work/adapters.st" --data "$work/corpus.txt" --seed 3 \
    --val-data docs/testing.md --val-every 1 --val-batches 2 --steps 1 >"$work/val$d.out" 2>&1 || fail "validation, dropout=$d"
done
expect_eq "validation with dropout: the val_loss without" "$(sed -n 's/.*val_loss //p' "$work/val0.out")" \
  "$(sed -n 's/.*val_loss //p' "$work/val0.25.out")"
[ "$(losses "$work/val0.out")" != "$(losses "$work/val0.25.out")" ] && pass ||
  fail "dropout changed nothing in training: $(losses "$work/val0.out")"
"$work/drop/cpu0/fusion-cpu0" --init "$work/base.st" --data "$work/corpus.txt" --seed 3 --steps 2 --save "$work/dropck" \
  >/dev/null 2>&1 || fail "dropout: save"
"$FUSIONC" export "$work/dropck" -o "$work/droppeft" --adapter >/dev/null 2>&1 || fail "dropout: export --adapter"
"$py" -c "import json, sys; sys.exit(json.load(open('$work/droppeft/adapter_config.json'))['lora_dropout'] != 0.25)" &&
  pass || fail "adapter_config.json: lora_dropout is not 0.25: $(cat "$work/droppeft/adapter_config.json")"

# ---- 20 steps from the base: the base never moves
"$prog" --init "$work/base.st" --data "$work/corpus.txt" --seed 3 --steps 20 --save "$work/ck" >"$work/train" 2>&1 &&
  pass || fail "training: $(tail -3 "$work/train")"
grep -q "^fusion: --init: 12 trained parameters in none of the sources start from their initialiser" "$work/train" &&
  pass || fail "no line about the adapters' start: $(head -5 "$work/train")"
"$py" - "$work" <<'PYEOF' && pass || fail "the base moved, or the adapters did not: see above"
import sys
sys.path.insert(0, "tests/parity")
from torch_parity import st_read
import json, re, struct
w = sys.argv[1]
base, ck = st_read(w + "/base.st"), st_read(w + "/ck/step-20/checkpoint.safetensors")
bad = [f"base weight {n} in the checkpoint" for n in base if n in ck]
raw = open(w + "/ck/step-20/checkpoint.safetensors", "rb").read()
meta = json.loads(raw[8:8 + struct.unpack("<Q", raw[:8])[0]])["__metadata__"]
recorded = dict(line.split(" ")[::-1] for line in meta["fusion.frozen"].splitlines())
bad += [f"base weight {n} not recorded by a hash" for n in base if not re.fullmatch("[0-9a-f]{16}", recorded.get(n, ""))]
adapters = [n for n in ck if ".lora_" in n and not n.startswith("adamw.")]
bad += [f"adapter {n} is still zero" for n in adapters if n.endswith("lora_B.weight") and not ck[n].abs().max() > 0]
bad += [f"moments of a base weight: {n}" for n in ck if n.startswith("adamw.") and ".lora_" not in n]
if len(adapters) != 12:
    bad.append(f"{len(adapters)} adapters in the checkpoint, expected 12")
print("\n".join(bad) if bad else f"lora: {len(base)} base weights recorded by hash, 12 adapters trained",
      file=sys.stderr)
sys.exit(1 if bad else 0)
PYEOF
# resume: with the base again, as the straight run; without it, or another, refused
"$prog" --init "$work/base.st" --data "$work/corpus.txt" --seed 3 --steps 10 --save "$work/ck10" >/dev/null 2>&1 ||
  fail "10 steps"
"$prog" --init "$work/base.st" --data "$work/corpus.txt" --steps 20 --resume "$work/ck10" >"$work/resumed" 2>&1 && pass ||
  fail "resume: $(tail -3 "$work/resumed")"
expect_eq "resumed steps 11-20" "$(losses "$work/train" | tail -10 | xargs)" "$(losses "$work/resumed" | xargs)"
# the step-20 record matches the base it started from: every base weight bit for bit after 20 steps
"$prog" --init "$work/base.st" --data "$work/corpus.txt" --steps 21 --resume "$work/ck" >"$work/at20" 2>&1 && pass ||
  fail "the base after 20 steps is not the one it started from: $(tail -2 "$work/at20")"
"$prog" --data "$work/corpus.txt" --steps 20 --resume "$work/ck10" >"$work/nobase" 2>&1
expect_eq "resumed without the base: exit status" 1 $?
grep -q "error: .*ck10: frozen parameter 'model.embed_tokens.weight' is not the one the checkpoint was trained on" \
  "$work/nobase" && pass || fail "no other-base error: $(tail -2 "$work/nobase")"
"$py" -c "
import sys; sys.path.insert(0, 'tests/parity')
from torch_parity import st_read, st_write
t = st_read('$work/base.st'); t['model.layers.1.mlp.up_proj.weight'][0, 0] += 1e-3; st_write('$work/other.st', t)"
"$prog" --init "$work/other.st" --data "$work/corpus.txt" --steps 20 --resume "$work/ck10" >"$work/other" 2>&1
expect_eq "resumed on another base: exit status" 1 $?
grep -q "frozen parameter 'model.layers.1.mlp.up_proj.weight' is not the one the checkpoint was trained on (its values hash to [0-9a-f]*, the checkpoint's to [0-9a-f]*): give --init the base the run started from" \
  "$work/other" && pass || fail "no other-base error: $(tail -2 "$work/other")"

# ---- export: PEFT's adapter folder, and the merge
"$FUSIONC" export "$work/ck" -o "$work/peft" --adapter >"$work/peft.out" 2>&1 && pass || fail "--adapter: $(cat "$work/peft.out")"
"$py" - "$work" <<'PYEOF' && pass || fail "the adapter folder: see above"
import json, sys
sys.path.insert(0, "tests/parity")
from torch_parity import st_read
w = sys.argv[1]
c = json.load(open(w + "/peft/adapter_config.json"))
want = {"peft_type": "LORA", "task_type": "CAUSAL_LM", "r": 4, "lora_alpha": 8, "lora_dropout": 0.0, "bias": "none",
        "fan_in_fan_out": False}
bad = [f"{k}: {c.get(k)!r}, expected {v!r}" for k, v in want.items() if c.get(k) != v]
if sorted(c.get("target_modules", [])) != ["down_proj", "q_proj", "v_proj"]:
    bad.append(f"target_modules {c.get('target_modules')}")
a, ck = st_read(w + "/peft/adapter_model.safetensors"), st_read(w + "/ck/step-20/checkpoint.safetensors")
pre = "base_model.model."
bad += [f"not PEFT's name: {n}" for n in a if not n.startswith(pre)]
bad += [f"{n}: not the checkpoint's" for n in a if n.startswith(pre) and not a[n].equal(ck[n[len(pre):]])]
if len(a) != 12:
    bad.append(f"{len(a)} tensors, expected 12")
print("\n".join(bad) if bad else "lora: --adapter: PEFT's config and 12 tensors by PEFT's names", file=sys.stderr)
sys.exit(1 if bad else 0)
PYEOF
"$FUSIONC" export "$work/ck" -o "$work/merged" --merge --base "$work/base.st" >"$work/merged.out" 2>&1 && pass ||
  fail "--merge: $(cat "$work/merged.out")"
"$py" tests/parity/lora.py merge "$cfg" "$work/base.st" "$work/ck/step-20/checkpoint.safetensors" 2 "$work/merged" \
  >"$work/merge.cmp" 2>&1 && pass || fail "the merge against PyTorch's: $(cat "$work/merge.cmp")"
echo "  $(tail -1 "$work/merge.cmp")" >&2
"$FUSIONC" compile "${model[@]}" clusters/local-1.xml -o "$work/plain" >/dev/null 2>&1 || fail "compile plain"
"$work/plain/cpu0/fusion-cpu0" --init "$work/merged" --inputs "$work/in.st" --steps 1 >"$work/merged.run" 2>&1 ||
  fail "the merged model: $(tail -2 "$work/merged.run")"
"$prog" --init "$work/base.st" --init "$work/ck/step-20/checkpoint.safetensors" --inputs "$work/in.st" --steps 1 \
  >"$work/lora.run" 2>&1 || fail "the LoRA model on the inputs: $(tail -2 "$work/lora.run")"
awk -v a="$(losses "$work/merged.run")" -v b="$(losses "$work/lora.run")" \
  'BEGIN { d = a - b; if (d < 0) d = -d; exit !(a != "" && d <= 1e-4 * b) }' && pass ||
  fail "the merged model's loss $(losses "$work/merged.run") is not the LoRA model's $(losses "$work/lora.run")"
"$FUSIONC" export "$work/ck" -o "$work/merged2" --merge --base "$work/other.st" >"$work/merged2.out" 2>&1
expect_eq "--merge on another base: exit status" 1 $?
grep -q "'model.layers.1.mlp.up_proj.weight' is not the weight the adapters were trained on" "$work/merged2.out" && pass ||
  fail "no other-base error: $(cat "$work/merged2.out")"
"$FUSIONC" export "$work/ck" -o "$work/plainexp" >"$work/plainexp.out" 2>&1
expect_eq "a plain export of a fine-tune: exit status" 1 $?
grep -q "a fine-tune's checkpoint, which records its frozen base weights but does not hold them: export --merge --base PATH" \
  "$work/plainexp.out" && pass || fail "no plain-export error: $(cat "$work/plainexp.out")"

"$work/plain/cpu0/fusion-cpu0" --init "$work/base.st" --data "$work/corpus.txt" --seed 3 --steps 1 >"$work/plain.1" 2>&1 ||
  fail "plain run: $(tail -2 "$work/plain.1")"
expect_eq "a fresh LoRA's first loss is the base model's" "$(losses "$work/plain.1")" "$(losses "$work/train" | head -1)"

# ---- quality: LoRA on a second text lowers the validation loss on it
# (Python's own library, [a-s]*.py, validated on textwrap.py: text that
# does not change with this project; the docs did, and a docs edit once
# left the drop at 0.047.  Measured: 3.239 -> 2.833.)
"$work/plain/cpu0/fusion-cpu0" --data "$work/corpus.txt" --seed 3 --steps 60 --save "$work/pre" >/dev/null 2>&1 ||
  fail "pre-training"
pylib=$("$py" -c 'import os; print(os.path.dirname(os.__file__))')
cat "$pylib"/[a-s]*.py >"$work/python.txt"
"$FUSIONC" compile "${model[@]}" --set lr=1e-2 "${lora[@]}" clusters/local-1.xml -o "$work/ft" >/dev/null 2>&1 ||
  fail "compile the fine-tune"
"$work/ft/cpu0/fusion-cpu0" --init "$work/pre" --data "$work/python.txt" --val-data "$pylib/textwrap.py" --val-every 1 \
  --val-batches 8 --seed 3 --steps 60 >"$work/ft.out" 2>&1 && pass || fail "the fine-tune: $(tail -3 "$work/ft.out")"
first=$(sed -n 's/^step  *1\/60 .*val_loss \([0-9.]*\)$/\1/p' "$work/ft.out")
last=$(sed -n 's/^step  *60\/60 .*val_loss \([0-9.]*\)$/\1/p' "$work/ft.out")
awk -v a="$first" -v b="$last" 'BEGIN { exit !(a != "" && b != "" && b < a - 0.05) }' && pass ||
  fail "LoRA on Python's library did not lower the validation loss on textwrap.py: $first after step 1, $last after 60"
echo "  lora quality: textwrap.py's val_loss $first after step 1, $last after 60" >&2

# ---- a pipeline of replicas
"$FUSIONC" compile "${model[@]}" "${lora[@]}" clusters/local-4.xml -o "$work/pipe" --stages 2 --replicas 2 \
  --micro-batches 2 --compress none --port-base $((ports + 20)) >"$work/pipe.compile" 2>&1 && pass ||
  fail "pipe compile: $(cat "$work/pipe.compile")"
"$work/pipe/launch-local.sh" --init "$work/base.st" --data "$work/corpus.txt" --seed 3 --steps 20 >"$work/pipe.out" 2>&1 &&
  pass || fail "pipeline: $(tail -5 "$work/pipe.out")"
reporter=$(sed -n 's/^reporter=//p' "$work/pipe/launch-local.sh")
paste <(losses "$work/train") <(losses "$work/pipe/logs/$reporter.log") | awk '
  { d = $1 - $2; if (d < 0) d = -d; if (d / $1 > w) w = d / $1 }
  END { if (NR != 20 || w > 1e-5) { printf "FAIL: %d steps, worst %.2g\n", NR, w > "/dev/stderr"; exit 1 } }' && pass ||
  fail "2 x 2 with LoRA is not one device's mathematics"

# ---- the plan's estimate of a recomputing LoRA pipeline (passes/schedule.c, fence_cost.c)
far=(clusters/dtfm-worldwide.xml --set vocab=128256 --set dim=4096 --set layers=32 --set heads=32 --set kv_heads=8
     --set ffn=14336 --set ctx=2048 --set seq=2048 --set batch=1024 --precision fp16 --compress none
     --lora rank=16,alpha=32,targets=q_proj,k_proj,v_proj,o_proj --frozen-dtype fp16)
for how in "--micro-batches 64" "--micro-batches 128 --recompute on"; do
  # shellcheck disable=SC2086
  "$FUSIONC" simulate "${model[@]}" "${far[@]}" $how --steps 2 >"$work/far.out" 2>&1 ||
    fail "simulate the 8B LoRA ($how): $(cat "$work/far.out")"
  awk '/^simulated step:/ { s = $3 } /^plan estimate:/ { e = $3 }
       END { d = s / e - 1; if (d < 0) d = -d; exit !(s > 0 && e > 0 && d <= 0.03) }' "$work/far.out" && pass ||
    fail "the 8B LoRA's simulated step ($how) is not its plan's estimate: $(grep -E 'simulated step|plan estimate' "$work/far.out")"
done

# ---- bad input
"$FUSIONC" plan "${model[@]}" clusters/local-1.xml --lora rank=4,targets=qproj -o "$work/bad" >"$work/bad.out" 2>&1
expect_eq "a target matching no linear: exit status" 1 $?
grep -q "error: adapters: --lora target 'qproj' matches no linear of the model; its linears: model.layers.0.self_attn.q_proj," \
  "$work/bad.out" && pass || fail "no target error: $(cat "$work/bad.out")"
"$FUSIONC" plan "${model[@]}" clusters/local-1.xml --lora rank=0,targets=q_proj -o "$work/bad" >"$work/bad.out" 2>&1
expect_eq "rank 0: exit status" 2 $?
grep -q -- "--lora expects rank=R,alpha=A,targets=NAME,NAME...\[,dropout=P\] (rank >= 1, alpha > 0, 0 <= P < 1), found 'rank=0,targets=q_proj'" \
  "$work/bad.out" && pass || fail "no --lora syntax error: $(cat "$work/bad.out")"
"$py" -c "
import sys; sys.path.insert(0, 'tests/parity')
from torch_parity import st_read, st_write
t = st_read('$work/base.st'); del t['model.layers.1.mlp.up_proj.weight']; st_write('$work/short.st', t)"
"$prog" --init "$work/short.st" --data "$work/corpus.txt" --steps 1 >"$work/short.out" 2>&1
expect_eq "a frozen weight missing: exit status" 1 $?
grep -q "short.st: has no parameter 'model.layers.1.mlp.up_proj.weight' (frozen: it must come from --init)" \
  "$work/short.out" && pass || fail "no missing-frozen error: $(cat "$work/short.out")"
finish
