#!/usr/bin/env bash
# bench_compile_scaling: does compile time grow near-linearly with the
# model's size?  (issue 29, item 3)
#
# GPT-2 small's width (768, 12 heads, batch 4 x 1,024 tokens) at 12, 48,
# 100, 200, 400 and 1,000 layers on clusters/local-4.xml (four CPU devices
# in two sites: OP-Fence cuts a pipeline across them, so every pass has
# work to do: cut edges, send/recv pairs, four arenas).  Times
# `fusionc plan` (frontend, every pass, the plan printed) and
# `fusionc compile` (the same plus the device programs: lowering, LLVM,
# linking), each the best of REPS runs (one run past 5 s), each run cut
# off after LIMIT seconds (a size that does not finish stops that command's
# series).  Only wall time: nothing is checked here (the plans' bytes are
# tests/test_roundtrip*'s and tests/unit/test_memory_place.c's business).
#
# Prints one line a figure: what, value, unit, anchor, ratio:
#   - each size's seconds against linear growth from the size before it
#     (anchor: the previous size's seconds times the ratio of layers;
#     ratio 1.00: linear), and the growth exponent k of t ~ layers^k
#     between the two sizes (1: linear, 2: quadratic);
#   - the exponent from the first size to the last that finished.
# Takes about a minute when near-linear (one core's worth).  Not a ctest
# test.
# usage: bench/bench_compile_scaling.sh [BUILD_DIR] [LIMIT_S] [REPS] [SIZES...]
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
limit=${2:-120}
reps=${3:-3}
shift $(($# < 3 ? $# : 3))
sizes=("$@")
[ ${#sizes[@]} -gt 0 ] || sizes=(12 48 100 200 400 1000)
cluster=clusters/local-4.xml
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# seconds COMMAND...: the wall time of one run, or "" when it failed or ran past the limit.
seconds() {
  local t0 t1
  t0=$(date +%s.%N)
  timeout "$limit" "$@" >"$work/out" 2>&1 || return 0
  t1=$(date +%s.%N)
  awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.3f", b - a }'
}

# best COMMAND...: the best of $reps runs (one when a run takes over 5 s).
best() {
  local b="" t
  for ((r = 0; r < reps; r++)); do
    t=$(seconds "$@")
    [ -n "$t" ] || { echo ""; return; }
    b=$(awk -v a="$b" -v t="$t" 'BEGIN { print (a == "" || t < a) ? t : a }')
    awk -v t="$t" 'BEGIN { exit !(t > 5) }' && break
  done
  echo "$b"
}

for what in plan compile; do
  first_l="" first_t="" prev_l="" prev_t=""
  for l in "${sizes[@]}"; do
    if [ "$what" = plan ]; then
      t=$(best "$build/fusionc" plan models/gpt2.xml "$cluster" --set layers="$l" -o "$work")
    else
      t=$(best "$build/fusionc" compile models/gpt2.xml "$cluster" --set layers="$l" -o "$work/bundles")
      rm -rf "$work/bundles"
    fi
    if [ -z "$t" ]; then
      printf '%-8s %5d layers  did not finish in %d s (or failed)\n' "$what" "$l" "$limit"
      break
    fi
    if [ -z "$prev_l" ]; then
      printf '%-8s %5d layers %9.2f s   anchor -                          ratio -\n' "$what" "$l" "$t"
      first_l=$l first_t=$t
    else
      awk -v w="$what" -v l="$l" -v t="$t" -v pl="$prev_l" -v pt="$prev_t" 'BEGIN {
        lin = pt * l / pl
        printf "%-8s %5d layers %9.2f s   anchor linear from %4d: %8.2f s   ratio %.2f (exponent %.2f)\n",
               w, l, t, pl, lin, t / lin, log(t / pt) / log(l / pl) }'
    fi
    prev_l=$l prev_t=$t
  done
  if [ -n "$first_l" ] && [ "$prev_l" != "$first_l" ]; then
    awk -v w="$what" -v a="$first_l" -v ta="$first_t" -v b="$prev_l" -v tb="$prev_t" 'BEGIN {
      printf "%-8s growth exponent %d..%d layers %5.2f     anchor 1.00 (linear)             ratio %.2f\n",
             w, a, b, log(tb / ta) / log(b / a), log(tb / ta) / log(b / a) }'
  fi
done
