#!/usr/bin/env bash
# bench_recompute: what recomputation buys when memory caps the micro-batches
# a stage keeps in flight over a slow link (passes/schedule.c).
#
# A GPT (4 layers, width 128, batch 16 x 64 tokens, 16 micro-batches) on
# clusters/local-4.xml (a 20 Mbps / 40 ms link between its two sites,
# emulated by the runtime's link shaper: --emulate-links), every device a
# stage (--scheduler uniform), with the devices' memory declared as 6 MiB
# (a copy of the cluster file) so that keeping each micro-batch's
# activations holds stage 0 to 3 warm-up forwards where the 106 ms round
# trip of the slow cut asks for about 20.  Compiled twice: --recompute off
# (plain warm-up, capped by memory) and auto (the schedule pass has the
# capped stages keep only their forward's inputs and run it again).  Both
# are simulated (fusionc simulate) and trained STEPS steps from the same
# seed, one after the other.
#
# Prints one line a figure: what, value, unit, anchor, ratio:
#   - each run's warm-up and recompute flags (from the manifests);
#   - each run's measured step (median of steps 3..) against the
#     simulator's (ratio: measured / simulated, target 0.8..1.2);
#   - auto's tokens/s over off's;
#   - whether the losses are bit-equal (they must be: the same mathematics).
# Takes about a minute.  Not a ctest test.
# usage: bench/bench_recompute.sh [BUILD_DIR] [STEPS]
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
steps=${2:-20}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
model=(--set vocab=256 --set ctx=64 --set layers=4 --set dim=128 --set heads=4 --set batch=16 --set seq=64
       --scheduler uniform --micro-batches 16 --compress none)
cat /usr/share/common-licenses/* > "$work/corpus.txt"
sed 's/memory="4GiB"/memory="6MiB"/' clusters/local-4.xml > "$work/local-4-6MiB.xml"
base=$((43000 + ($$ % 400) * 40))

median() { sort -n | awk '{ a[NR] = $1 } END { print (NR % 2) ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2 }'; }

for r in off auto; do
  mkdir -p "$work/$r.sim"
  "$build/fusionc" simulate models/gpt2.xml "$work/local-4-6MiB.xml" "${model[@]}" --recompute "$r" \
    -o "$work/$r.sim" >"$work/$r.simout"
  "$build/fusionc" compile models/gpt2.xml "$work/local-4-6MiB.xml" -o "$work/$r" "${model[@]}" --recompute "$r" \
    --port-base "$base" >"$work/$r.compile"
  base=$((base + 20))
  "$work/$r/launch-local.sh" --data "$work/corpus.txt" --steps "$steps" --seed 1 --emulate-links >"$work/$r.out" 2>&1 \
    || { tail -5 "$work/$r.out" >&2; exit 1; }
  sed 's/^\[[^]]*\] //' "$work/$r.out" | awk '/^step .* loss / { print $2, $4 }' >"$work/$r.loss"
  sed 's/^\[[^]]*\] //' "$work/$r.out" \
    | awk '/^step/ { split($2, s, "/"); if (s[1] + 0 >= 3) for (i = 2; i <= NF; i++) if ($i == "ms/step") print $(i - 1) }' \
    | median >"$work/$r.ms"
  sim=$(awk '/^simulated step:/ { print $3 }' "$work/$r.simout")
  plan=$(for d in cpu-a0 cpu-a1 cpu-b0 cpu-b1; do sed -n 's/^schedule *\([0-9]*\) warm-up forwards\(, recomputes\)\{0,1\}.*/\1\2/p' "$work/$r/$d/manifest.txt"; done \
         | sed 's/, recomputes/r/' | paste -sd,)
  printf 'recompute %-4s plan        %-22s (warm-up a stage; r: recomputes)\n' "$r" "$plan"
  printf 'recompute %-4s step   %10.1f ms    anchor simulated %8.1f ms   ratio %.2f (target 0.8..1.2)\n' \
    "$r" "$(cat "$work/$r.ms")" "$sim" "$(awk -v m="$(cat "$work/$r.ms")" -v s="$sim" 'BEGIN { print m / s }')"
done
tokens=$((16 * 64))
awk -v o="$(cat "$work/off.ms")" -v a="$(cat "$work/auto.ms")" -v t="$tokens" 'BEGIN {
  printf "recompute auto tokens/s %8.0f tok/s  anchor off %8.0f tok/s     ratio %.2f\n", t / a * 1000, t / o * 1000, o / a }'
if cmp -s "$work/off.loss" "$work/auto.loss"; then
  echo "losses: bit-equal over $(wc -l <"$work/off.loss") steps"
else
  echo "losses: DIFFER"; paste "$work/off.loss" "$work/auto.loss" | head -5; exit 1
fi
