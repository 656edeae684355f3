#!/usr/bin/env bash
# bench_heterogeneity: does a bandwidth- and speed-aware placement pay?
#
# A GPT (4 layers, width 128, batch 16 x 64 tokens, 4 micro-batches) on
# clusters/local-4-hetero.xml: two sites of two CPU devices on this
# machine, site B's devices emulated 4 times slower, a 20 Mbps / 40 ms
# link between the sites (the runtime's link shaper, --emulate-links).
# Compiled twice, with --scheduler uniform (Megatron's default: every
# device a stage, equal layers, in file order) and with --scheduler opfence
# (the default), both trained here in one run, side by side.
#
# Prints one line a figure: what, value, unit, anchor, ratio:
#   - tokens/s of each, and opfence's over uniform's (target >= 1.5);
#   - each plan's estimated step (fusionc plan) against its measured step
#     (target: within 25%).
# Both runs print their losses; they must agree step for step within 1e-5
# relative (the same mathematics), and the script checks it.
# usage: bench/bench_heterogeneity.sh [BUILD_DIR] [STEPS]
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
steps=${2:-10}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
model=(--set vocab=256 --set ctx=64 --set layers=4 --set dim=128 --set heads=4 --set batch=16 --set seq=64)
cat /usr/share/common-licenses/* > "$work/corpus.txt"
base=$((40000 + ($$ % 500) * 40))

median() { sort -n | awk '{ a[NR] = $1 } END { print (NR % 2) ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2 }'; }

for s in uniform opfence; do
  "$build/fusionc" compile models/gpt2.xml clusters/local-4-hetero.xml -o "$work/$s" "${model[@]}" \
    --scheduler "$s" --port-base "$base" >"$work/$s.compile"
  base=$((base + 20))
  head -1 "$work/$s/plan.txt" | sed "s/^/# /"
  "$work/$s/launch-local.sh" --data "$work/corpus.txt" --steps "$steps" --emulate-links >"$work/$s.out"
  sed 's/^\[[^]]*\] //' "$work/$s.out" | awk '/^step/ { print $4 }' >"$work/$s.loss"
  # The median step after the first two (connections, caches).
  sed 's/^\[[^]]*\] //' "$work/$s.out" | awk '/^step/ { n++; if (n > 2) for (i = 2; i <= NF; i++) if ($i == "ms/step") print $(i - 1) }' | median >"$work/$s.ms"
  awk '/^estimated step/ { print $3 }' "$work/$s/plan.txt" >"$work/$s.est"
done
tokens=$((16 * 64))
u_ms=$(cat "$work/uniform.ms"); o_ms=$(cat "$work/opfence.ms")
u_est=$(cat "$work/uniform.est"); o_est=$(cat "$work/opfence.est")
awk -v u="$u_ms" -v o="$o_ms" -v t="$tokens" 'BEGIN {
  printf "uniform tokens/s      %10.0f tok/s   anchor -                 ratio -\n", t / u * 1000
  printf "opfence tokens/s      %10.0f tok/s   anchor uniform %8.0f  ratio %.2f (target >= 1.5)\n", t / o * 1000, t / u * 1000, u / o }'
awk -v e="$u_est" -v m="$u_ms" 'BEGIN { printf "uniform step estimate %10.1f ms      anchor measured %7.1f  ratio %.2f (target 0.75..1.25)\n", e, m, e / m }'
awk -v e="$o_est" -v m="$o_ms" 'BEGIN { printf "opfence step estimate %10.1f ms      anchor measured %7.1f  ratio %.2f (target 0.75..1.25)\n", e, m, e / m }'
paste "$work/uniform.loss" "$work/opfence.loss" | awk -v n="$steps" '
  { d = $1 - $2; if (d < 0) d = -d; if (d / $1 > worst) worst = d / $1 }
  END { printf "losses: the two placements agree within %.2g relative over %d steps\n", worst, n; exit !(NR == n && worst <= 1e-5) }'
