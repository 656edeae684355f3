# Many devices, the same mathematics: a small GPT on clusters/local-4.xml
# as a 4-stage pipeline (4 micro-batches, 1F1B) and as 2 stages x 2
# data-parallel replicas (2 micro-batches) gives, step for step, the losses
# of the one-device run of the same global batch and seed, within 1e-5
# relative, for 20 steps (with --compress none: local-4 has two regions, so
# adatopk, which changes the mathematics on purpose, is its default); with
# --recompute on, the 4-stage pipeline's losses are bit-equal to its losses
# without, and so with --recompute keep:1 (partial replay: each stage keeps
# one waiting micro-batch whole, the others replay).  Also: launch-local.sh, plan.txt and the
# per-device manifests are written, and every device reports completion.
. "$(dirname "$0")/lib.sh"
no_leak_scan_in_threaded_programs

cat /usr/share/common-licenses/* > "$work/corpus.txt"
model=(--set vocab=256 --set ctx=32 --set layers=4 --set dim=48 --set heads=4 --set batch=8 --set seq=32
       --set lr=3e-3 --set warmup=5)
steps=20
# Ports: one range per test run, so parallel tests do not collide.
claim_ports   # tests/lib.sh: this test's own ports
base=$ports

losses() { awk '/^step /{print $4}' "$1"; }

"$FUSIONC" compile models/gpt2.xml clusters/local-1.xml -o "$work/one" "${model[@]}" >"$work/c1" 2>&1 \
  && pass || fail "one-device compile: $(cat "$work/c1")"
"$work/one/cpu0/fusion-cpu0" --data "$work/corpus.txt" --steps $steps --seed 5 >"$work/one.out" 2>&1 \
  && pass || fail "one-device run: $(tail -3 "$work/one.out")"
losses "$work/one.out" >"$work/one.loss"
expect_eq "one-device steps" $steps "$(wc -l <"$work/one.loss")"

# run NAME COMPILE-OPTIONS...: compile for local-4, train with launch-local.sh.
run() {
  local name=$1; shift
  if "$FUSIONC" compile models/gpt2.xml clusters/local-4.xml -o "$work/$name" "${model[@]}" \
       --port-base "$base" --compress none "$@" >"$work/$name.compile" 2>&1; then pass
  else fail "$name compile: $(cat "$work/$name.compile")"; return; fi
  base=$((base + 20))
  [ -x "$work/$name/launch-local.sh" ] && pass || fail "$name: no launch-local.sh"
  [ -s "$work/$name/plan.txt" ] && pass || fail "$name: no plan.txt"
  if "$work/$name/launch-local.sh" --data "$work/corpus.txt" --steps $steps --seed 5 >"$work/$name.out" 2>&1; then
    pass; else fail "$name run: $(tail -5 "$work/$name.out"; tail -n 3 "$work/$name"/logs/*.log)"; fi
  sed 's/^\[[^]]*\] //' "$work/$name.out" | losses /dev/stdin >"$work/$name.loss"
  expect_eq "$name steps" $steps "$(wc -l <"$work/$name.loss")"
  # Every loss within 1e-5 relative of the one-device run's.
  losses_within "$name" "$work/one.loss" "$work/$name.loss"
}

run pipeline4 --scheduler uniform --micro-batches 4
grep -q "4 stages x 1 replica" "$work/pipeline4.compile" && pass || fail "pipeline4: $(cat "$work/pipeline4.compile")"
# replays_same NAME PLAN-LINE MANIFEST-LINE RECOMPUTE: the pipeline again
# recomputing; plan.txt and cpu-a0's manifest say so (grep patterns) and
# the same ops on the same inputs give pipeline4's losses, bit for bit.
replays_same() {
  local name=$1 plan=$2 manifest=$3; shift 3
  run "$name" --scheduler uniform --micro-batches 4 --recompute "$1"
  grep -q "$plan" "$work/$name/plan.txt" && pass \
    || fail "$name: plan.txt does not say '$plan': $(cat "$work/$name/plan.txt")"
  grep -q "$manifest" "$work/$name/cpu-a0/manifest.txt" && pass \
    || fail "$name: cpu-a0's manifest does not say '$manifest': $(cat "$work/$name/cpu-a0/manifest.txt")"
  cmp -s "$work/pipeline4.loss" "$work/$name.loss" && pass \
    || fail "$name: losses differ from pipeline4's: $(paste "$work/pipeline4.loss" "$work/$name.loss" | head -5)"
}
# Recomputation: stages 0-2 keep only what their forward receives and run it
# again before each waiting backward.
replays_same recompute4 "^recompute: stages 0, 1, 2 " "^schedule .*, recomputes" on
# Partial replay: stages 0-2 keep one waiting micro-batch whole at a time
# and replay the others.
replays_same keep4 "^recompute: stage 0 keeps 1 of its 4 micro-batches in flight whole; the other 3 " \
  "^schedule .*, recomputes.*(but up to 1 kept whole" keep:1
run grid2x2 --stages 2 --replicas 2 --micro-batches 2
grep -q "2 stages x 2 replicas" "$work/grid2x2.compile" && pass || fail "grid2x2: $(cat "$work/grid2x2.compile")"
for d in cpu-a0 cpu-a1 cpu-b0 cpu-b1; do
  [ -s "$work/grid2x2/$d/manifest.txt" ] && pass || fail "grid2x2: no manifest for $d"
done
finish
