#!/usr/bin/env bash
# bench_simulate: does `fusionc simulate` predict the step the devices take?
#
# A small GPT (4 layers, width 48, batch 8 x 32 tokens) on clusters/local-4.xml
# (two sites of two CPU devices on this machine, a 20 Mbps / 40 ms link
# between the sites, emulated by the runtime's link shaper), in seven
# configurations: uniform with 1 and 4 micro-batches, dense, opfence (its
# default micro-batches), uniform with 4 micro-batches and top-k at 5% on
# the slow link, and with adatopk (rows of bits, top-k with feedback),
# gcma (DT-FM's scheduler) with 4 micro-batches, and uniform on
# local-4-hetero (site B 4 times slower).  Each is simulated (fusionc simulate) and compiled and trained for
# STEPS steps (launch-local.sh --emulate-links); the measured step is the
# median of steps 3.. (after connections and caches), over every device's
# lines.
#
# Prints one line a configuration: what, simulated ms, measured ms, ratio
# (measured / simulated; target within 20%: 0.8 to 1.2).  Takes about a
# minute.  Not a ctest test.
# usage: bench/bench_simulate.sh [BUILD_DIR] [STEPS]
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
steps=${2:-8}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
model=(--set vocab=256 --set ctx=32 --set layers=4 --set dim=48 --set heads=4 --set batch=8 --set seq=32)
cat /usr/share/common-licenses/* > "$work/corpus.txt"
base=$((41000 + ($$ % 400) * 40))

median() { sort -n | awk '{ a[NR] = $1 } END { print (NR % 2) ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2 }'; }

configs=("uniform-M1|--scheduler uniform --micro-batches 1 --compress none"
         "uniform-M4|--scheduler uniform --micro-batches 4 --compress none"
         "opfence|--scheduler opfence"
         "uniform-M4-topk0.05|--scheduler uniform --micro-batches 4 --compress topk:0.05"
         "uniform-M4-adatopk|--scheduler uniform --micro-batches 4 --compress adatopk"
         "gcma-M4|--scheduler gcma --micro-batches 4 --compress none"
         "hetero-uniform-M4|--scheduler uniform --micro-batches 4 --compress none|clusters/local-4-hetero.xml")
printf '%-22s %12s %12s %8s\n' "what" "simulated" "measured" "ratio"
for c in "${configs[@]}"; do
  IFS='|' read -r name spec cluster <<<"$c"
  cluster=${cluster:-clusters/local-4.xml}
  read -r -a opts <<<"$spec"
  mkdir -p "$work/$name.sim"
  "$build/fusionc" simulate models/gpt2.xml "$cluster" "${model[@]}" "${opts[@]}" -o "$work/$name.sim" \
    >"$work/$name.simout"
  sim=$(awk '/^simulated step:/ { print $3 }' "$work/$name.simout")
  "$build/fusionc" compile models/gpt2.xml "$cluster" -o "$work/$name" "${model[@]}" "${opts[@]}" \
    --port-base "$base" >"$work/$name.compile"
  base=$((base + 20))
  "$work/$name/launch-local.sh" --data "$work/corpus.txt" --steps "$steps" --emulate-links >"$work/$name.out" 2>&1
  measured=$(sed 's/^\[[^]]*\] //' "$work/$name.out" | awk '/^step/ { split($2, s, "/"); if (s[1] + 0 >= 3) for (i = 2; i <= NF; i++) if ($i == "ms/step") print $(i - 1) }' | median)
  printf '%-22s %9.1f ms %9.1f ms %8.2f\n' "$name" "$sim" "$measured" "$(awk -v m="$measured" -v s="$sim" 'BEGIN { print m / s }')"
done
