# Llama (models/llama.xml, issue 19) trains and keeps its mathematics:
# - a small Llama trained on text falls below the text's byte unigram
#   entropy (what a model knowing only byte frequencies reaches);
# - on clusters/local-4.xml, as a 4-stage pipeline and as 2 stages x 2
#   replicas, its per-step losses equal the one-device run's within 1e-5;
# - a checkpoint shipped the way Hugging Face ships Llama's (every tensor in
#   bf16, by Hugging Face's names) loads with --init as it is: the loss and
#   every gradient equal an independent PyTorch Llama's on the widened
#   weights within 1e-4 of each tensor's largest magnitude;
# - a checkpoint fusion saves holds every parameter by those names, and
#   loads back with --init; a file that lacks one is refused, naming it.
. "$(dirname "$0")/lib.sh"
no_leak_scan_in_threaded_programs
py=/usr/bin/python3
"$py" -c 'import torch' 2>/dev/null || { echo "FAIL: /usr/bin/python3 cannot import torch (install python3-torch)" >&2; exit 1; }
parity=tests/parity/torch_parity.py

cat /usr/share/common-licenses/* > "$work/corpus.txt"
cfg="vocab=256,ctx=32,layers=2,dim=64,heads=4,kv_heads=2,ffn=172,batch=8,seq=32"
model=()
IFS=, read -ra kv <<<"$cfg"
for s in "${kv[@]}"; do model+=(--set "$s"); done
losses() { awk '/^step /{print $4}' "$1"; }

# ---- training: below the byte entropy ----
"$FUSIONC" compile models/llama.xml clusters/local-1.xml -o "$work/one" "${model[@]}" >"$work/c1" 2>&1 \
  && pass || fail "one-device compile: $(cat "$work/c1")"
"$work/one/cpu0/fusion-cpu0" --data "$work/corpus.txt" --steps 150 --seed 5 --save "$work/ckpt" >"$work/train.out" 2>&1 \
  && pass || fail "training: $(tail -3 "$work/train.out")"
entropy=$(od -An -v -tu1 "$work/corpus.txt" | tr -s ' ' '\n' |
  awk 'NF { c[$1]++; n++ } END { for (k in c) { p = c[k] / n; h -= p * log(p) }; printf "%.4f", h }')
losses "$work/train.out" | tail -10 | awk -v h="$entropy" '{ s += $1; n++ }
  END { m = s / n; printf "  llama: mean loss of steps 141-150 %.4f nats/byte; byte entropy %.4f\n", m, h > "/dev/stderr"; exit !(n == 10 && m < h) }' \
  && pass || fail "the last 10 losses are not below the byte entropy $entropy: $(losses "$work/train.out" | tail -10 | tr '\n' ' ')"

# ---- many devices, the same mathematics ----
steps=20
claim_ports   # tests/lib.sh: this test's own ports
base=$ports
"$work/one/cpu0/fusion-cpu0" --data "$work/corpus.txt" --steps $steps --seed 5 >"$work/one.out" 2>&1 \
  && pass || fail "one-device run: $(tail -3 "$work/one.out")"
losses "$work/one.out" >"$work/one.loss"
same_math() {
  local name=$1; shift
  if "$FUSIONC" compile models/llama.xml clusters/local-4.xml -o "$work/$name" "${model[@]}" \
       --port-base "$base" --compress none "$@" >"$work/$name.compile" 2>&1; then pass
  else fail "$name compile: $(cat "$work/$name.compile")"; return; fi
  base=$((base + 20))
  if "$work/$name/launch-local.sh" --data "$work/corpus.txt" --steps $steps --seed 5 >"$work/$name.out" 2>&1; then
    pass; else fail "$name run: $(tail -5 "$work/$name.out"; tail -n 3 "$work/$name"/logs/*.log)"; return; fi
  sed 's/^\[[^]]*\] //' "$work/$name.out" | losses /dev/stdin >"$work/$name.loss"
  expect_eq "$name steps" $steps "$(wc -l <"$work/$name.loss")"
  losses_within "llama $name" "$work/one.loss" "$work/$name.loss"
}
same_math pipeline4 --scheduler uniform --micro-batches 4
grep -q "4 stages x 1 replica" "$work/pipeline4.compile" && pass || fail "pipeline4: $(cat "$work/pipeline4.compile")"
same_math grid2x2 --stages 2 --replicas 2 --micro-batches 2
grep -q "2 stages x 2 replicas" "$work/grid2x2.compile" && pass || fail "grid2x2: $(cat "$work/grid2x2.compile")"

# ---- Hugging Face's names and bf16 checkpoints ----
"$py" "$parity" names llama "$cfg" "$work/ckpt/latest/checkpoint.safetensors" >"$work/names" 2>&1 \
  && pass || fail "saved checkpoint: $(cat "$work/names")"
"$py" "$parity" make llama "$cfg" "$work/w.st" "$work/in.st" 9 && "$py" "$parity" tobf16 llama "$cfg" "$work/w.st" "$work/w-bf16.st" \
  && pass || fail "making the bf16 checkpoint"
grep -q '"BF16"' "$work/w-bf16.st" && pass || fail "the checkpoint is not in bf16"
if "$work/one/cpu0/fusion-cpu0" --init "$work/w-bf16.st" --inputs "$work/in.st" --steps 1 --dump-grads "$work/dump.st" \
     >"$work/bf16.run" 2>&1; then pass; else fail "--init from bf16: $(tail -2 "$work/bf16.run")"; fi
if "$py" "$parity" grads llama "$cfg" "$work/w-bf16.st" "$work/dump.st" >"$work/bf16.cmp" 2>&1; then
  pass; echo "  bf16 checkpoint: $(tail -1 "$work/bf16.cmp")" >&2
else fail "bf16 checkpoint: $(cat "$work/bf16.cmp")"; fi
# The saved checkpoint loads back by name: its loss at step 151 is the one
# the run would print (the same weights, moments left behind).
"$work/one/cpu0/fusion-cpu0" --init "$work/ckpt/latest/checkpoint.safetensors" --inputs "$work/in.st" --steps 1 \
  --dump-grads "$work/dump2.st" >"$work/reload.run" 2>&1 && pass || fail "--init from a saved checkpoint: $(tail -2 "$work/reload.run")"
if "$py" "$parity" grads llama "$cfg" "$work/ckpt/latest/checkpoint.safetensors" "$work/dump2.st" >"$work/reload.cmp" 2>&1; then
  pass; else fail "saved checkpoint as weights: $(cat "$work/reload.cmp")"; fi
# A checkpoint without lm_head.weight: refused, naming the tensor.
"$py" - "$work/w.st" "$work/nohead.st" <<'PYEOF'
import sys
sys.path.insert(0, "tests/parity")
from torch_parity import st_read, st_write
t = st_read(sys.argv[1]); del t["lm_head.weight"]; st_write(sys.argv[2], t)
PYEOF
"$work/one/cpu0/fusion-cpu0" --init "$work/nohead.st" --inputs "$work/in.st" --steps 1 >/dev/null 2>"$work/nohead.err"
expect_eq "--init without lm_head.weight: exit" 1 $?
grep -q "lm_head.weight" "$work/nohead.err" && pass || fail "--init without lm_head.weight: $(cat "$work/nohead.err")"
finish
