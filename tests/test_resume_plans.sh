# Checkpoints of a many-device run, resumed exactly, and loaded under
# another plan (runtime/checkpoint.h).  A GPT on local-4 as 2 stages x 2
# replicas (2 micro-batches):
#   - 80 steps straight, saved at the end;
#   - 40 steps saved, then resumed to 80: steps 41..80 print the straight
#     run's losses, and every device's final part (parameters, AdamW's
#     moments) is byte for byte the straight run's;
#   - the step-40 checkpoint resumed on one device (local-1) and as a
#     4-stage pipeline: read by tensor name from the parts, steps 41..80
#     within 1e-5 relative of the straight run (the sums go in another
#     order on another plan);
#   - compressed (--compress adatopk), the error feedback travels in the
#     checkpoint: resumed runs equal the straight ones, parts byte for byte;
#   - bad input: a checkpoint of another model (a tensor of another shape),
#     a folder with no checkpoint, parts of two different steps: one clear
#     line each, exit 1.
. "$(dirname "$0")/lib.sh"
no_leak_scan_in_threaded_programs

cat /usr/share/common-licenses/* > "$work/corpus.txt"
model=(--set vocab=256 --set ctx=32 --set layers=2 --set dim=48 --set heads=4 --set batch=8 --set seq=32
       --set lr=3e-3 --set warmup=5)
claim_ports   # tests/lib.sh: this test's own ports
base=$ports
losses() { sed 's/^\[[^]]*\] //' "$1" | awk '/^step /{split($2, s, "/"); print s[1], $4}'; }

compile() {   # compile NAME CLUSTER OPTIONS...
  local name=$1 cluster=$2
  shift 2
  "$FUSIONC" compile models/gpt2.xml "$cluster" -o "$work/$name" "${model[@]}" --port-base "$base" --compress none \
    "$@" >"$work/$name.compile" 2>&1 && pass || fail "$name compile: $(cat "$work/$name.compile")"
  base=$((base + 20))
}
launch() {   # launch NAME OUT-FILE ARGS...
  local name=$1 out=$2
  shift 2
  "$work/$name/launch-local.sh" --data "$work/corpus.txt" --seed 7 "$@" >"$out" 2>&1 && pass \
    || fail "$name $*: $(tail -5 "$out"; tail -n 3 "$work/$name"/logs/*.log)"
}

compile dp clusters/local-4.xml --stages 2 --replicas 2 --micro-batches 2
launch dp "$work/straight.out" --steps 80 --save "$work/straight"
launch dp "$work/first.out" --steps 40 --save "$work/ck40"
cp -r "$work/ck40" "$work/ck40.kept"
launch dp "$work/resumed.out" --steps 80 --resume "$work/ck40" --save "$work/ck40"
losses "$work/straight.out" | awk '$1 > 40' >"$work/straight.41"
losses "$work/resumed.out" >"$work/resumed.41"
expect_eq "resumed steps" 40 "$(wc -l <"$work/resumed.41")"
cmp -s "$work/straight.41" "$work/resumed.41" && pass \
  || fail "steps 41..80 resumed differ from the straight run: $(diff "$work/straight.41" "$work/resumed.41" | head -4)"
parts=0
for f in "$work/straight"/latest/checkpoint-*.safetensors; do
  parts=$((parts + 1))
  cmp -s "$f" "$work/ck40/latest/$(basename "$f")" && pass || fail "$(basename "$f") at step 80 differs after the resume"
done
expect_eq "parts of the 2 x 2 checkpoint" 4 "$parts"

# Another plan: the parts read by name.
other() {   # other NAME: resume NAME's bundle from the kept step-40 checkpoint to 80, compare
  local name=$1 out="$work/$1.out"
  rm -rf "$work/$name.ck" && cp -r "$work/ck40.kept" "$work/$name.ck"
  if [ -x "$work/$name/cpu0/fusion-cpu0" ]; then
    "$work/$name/cpu0/fusion-cpu0" --data "$work/corpus.txt" --seed 7 --steps 80 --resume "$work/$name.ck" >"$out" 2>&1 \
      && pass || fail "$name resume: $(tail -3 "$out")"
  else
    launch "$name" "$out" --steps 80 --resume "$work/$name.ck"
  fi
  grep -q "a checkpoint of another compile (4 parts), read by tensor name" "$out" && pass \
    || fail "$name: does not say it read another plan's checkpoint: $(grep -m3 fusion: "$out")"
  losses "$out" >"$work/$name.41"
  expect_eq "$name resumed steps" 40 "$(wc -l <"$work/$name.41")"
  paste "$work/straight.41" "$work/$name.41" | awk -v n="$name" '
    { d = $2 - $4; if (d < 0) d = -d; r = d / $2; if ($1 != $3) bad = 1; if (r > worst) { worst = r; at = $1 } }
    END { if (bad || worst > 1e-5) { printf "FAIL: %s: step %d relative %.2g\n", n, at, worst > "/dev/stderr"; exit 1 }
          printf "%s: worst relative loss difference %.2g over steps 41..80\n", n, worst > "/dev/stderr" }' \
    && pass || fail "$name: losses after the resume part from the straight run's"
}
compile one clusters/local-1.xml
other one
compile pipe clusters/local-4.xml --stages 4 --replicas 1 --micro-batches 4
other pipe

# Compressed, the error feedback in the checkpoint (runtime/comm/feedback.h):
# the quantised all-reduce's (1 stage x 4 replicas over local-4's two
# sites: 8 bits) and AdaTopK's residual on the tied embedding's gradient
# (a 4-stage pipeline across them).  20 steps straight against 10 saved
# and resumed to 20: the same losses and every part byte for byte.
# (Without the feedback, 9 of the 10 resumed steps' losses differed, by up
# to 1.1e-5 and 2.3e-3 relative.)
compressed() {   # compressed NAME DEVICES-WITH-FEEDBACK OPTIONS...
  local name=$1 holders=$2
  shift 2
  "$FUSIONC" compile models/gpt2.xml clusters/local-4.xml -o "$work/$name" "${model[@]}" --port-base "$base" \
    --compress adatopk "$@" >"$work/$name.compile" 2>&1 && pass || fail "$name compile: $(cat "$work/$name.compile")"
  base=$((base + 20))
  launch "$name" "$work/$name.straight.out" --steps 20 --save "$work/$name.straight"
  launch "$name" "$work/$name.first.out" --steps 10 --save "$work/$name.ck"
  launch "$name" "$work/$name.resumed.out" --steps 20 --resume "$work/$name.ck" --save "$work/$name.ck"
  expect_eq "$name: devices that resumed with their error feedback" "$holders" \
    "$(grep -l "resumed with the error feedback the run saved" "$work/$name"/logs/*.log | wc -l)"
  losses "$work/$name.straight.out" | awk '$1 > 10' >"$work/$name.straight.11"
  losses "$work/$name.resumed.out" >"$work/$name.resumed.11"
  expect_eq "$name resumed steps" 10 "$(wc -l <"$work/$name.resumed.11")"
  cmp -s "$work/$name.straight.11" "$work/$name.resumed.11" && pass \
    || fail "$name: steps 11..20 resumed differ from the straight run: $(diff "$work/$name.straight.11" "$work/$name.resumed.11" | head -4)"
  for f in "$work/$name.straight"/latest/checkpoint-*.safetensors; do
    cmp -s "$f" "$work/$name.ck/latest/$(basename "$f")" && pass || fail "$name: $(basename "$f") at step 20 differs after the resume"
  done
}
compressed quantised 4 --stages 1 --replicas 4 --micro-batches 2
grep -q "all-reduce: stage 0 quantised to 8 bits" "$work/quantised/plan.txt" && pass \
  || fail "quantised: the plan does not quantise its all-reduce: $(cat "$work/quantised/plan.txt")"
compressed adatopk 1 --scheduler uniform --micro-batches 4   # the last stage sends wte.weight's gradient back
grep -q "density=" <("$FUSIONC" compile models/gpt2.xml clusters/local-4.xml -o "$work/adatopk-ir" "${model[@]}" \
  --compress adatopk --scheduler uniform --micro-batches 4 --dump-ir=compress 2>&1 >/dev/null) && pass \
  || fail "adatopk: the plan compresses no send"

# Bad input.
bad() {   # bad WHAT EXPECTED-TEXT ARGS...: one device's program, exit 1, the text
  local what=$1 text=$2
  shift 2
  "$work/one/cpu0/fusion-cpu0" --data "$work/corpus.txt" --steps 50 "$@" >"$work/bad.out" 2>&1
  local rc=$?
  expect_eq "$what: exit status" 1 "$rc"
  grep -q "$text" "$work/bad.out" && pass || fail "$what: expected '$text', found: $(cat "$work/bad.out")"
}
"$FUSIONC" compile models/gpt2.xml clusters/local-1.xml -o "$work/wide" "${model[@]}" --set dim=64 >/dev/null 2>&1
"$work/wide/cpu0/fusion-cpu0" --data "$work/corpus.txt" --steps 2 --save "$work/widecheck" >/dev/null 2>&1
bad "another model's shapes" "its parameters (names and shapes) hash to [0-9a-f]*, this program's to" --resume "$work/widecheck"
mkdir -p "$work/empty"
bad "an empty folder" "no complete checkpoint (no step-N folder with a MANIFEST)" --resume "$work/empty"
mkdir -p "$work/loose" && cp "$work/widecheck/latest/checkpoint.safetensors" "$work/loose/"
bad "a part without a MANIFEST" "1 checkpoint file but no step-N/MANIFEST" --resume "$work/loose"
cp -r "$work/ck40.kept" "$work/mixed"
cp "$work/straight/latest/checkpoint-cpu-b0.safetensors" "$work/mixed/step-40/"
bad "parts of two steps" "checkpoint-cpu-b0.safetensors: its XXH3 is [0-9a-f]*, the manifest says" --resume "$work/mixed"
finish
