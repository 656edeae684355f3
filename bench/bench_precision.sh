#!/usr/bin/env bash
# bench_precision: what --precision buys and costs on this CPU, side by
# side in one run.
#
#   1. One training step of GPT-2 small (124M parameters, B=4, T=64) on one
#      CPU device with 2 threads, compiled in fp32, bf16 and fp16: median
#      ms/step and peak resident memory, each against fp32's; PyTorch
#      (Debian's python3-torch) fp32 and bf16 autocast on the same model as
#      the anchor of what a user would get instead.
#   2. bf16 matrix products: bench_bf16_gemm (widened around sgemm, against
#      sgemm, and OpenBLAS's cblas_sbgemm when it has one).
#   3. Quality: the demo's GPT (4 layers, d 128, byte-level, 600 steps on
#      the licence texts, clusters/local-4.xml, links emulated) in fp32,
#      bf16 and fp16: the final loss (mean of the last 20 steps, the noise of
#      one batch averaged out) against fp32's.  Target: within 2%.
#
# Prints one line a figure: what, value, unit, anchor, ratio.  Takes about
# three minutes on two cores.  Not a ctest test.
# usage: bench/bench_precision.sh [BUILD_DIR] [STEPS]
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
steps=${2:-10}
threads=2
export OMP_WAIT_POLICY=passive
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cat /usr/share/common-licenses/* > "$work/corpus.txt"
row() { printf '%-46s %10s %-7s %-28s %s\n' "$@"; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.3f", a / b }'; }
median() { sort -n | awk '{ a[NR] = $1 } END { print (NR % 2) ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2 }'; }

declare -A ms mib
for p in fp32 bf16 fp16; do
  "$build/fusionc" compile models/gpt2.xml clusters/local-1.xml -o "$work/$p" --set batch=4 --set seq=64 \
    --precision $p >/dev/null
  /usr/bin/time -f "%M" -o "$work/$p.rss" "$work/$p/cpu0/fusion-cpu0" --data "$work/corpus.txt" --steps "$steps" \
    --threads $threads >"$work/$p.out"
  ms[$p]=$(awk '/^step +[0-9]+\// { n++; if (n > 2) for (i = 2; i <= NF; i++) if ($i == "ms/step") print $(i - 1) }' "$work/$p.out" | median)
  mib[$p]=$(awk '{ printf "%.1f", $1 / 1024 }' "$work/$p.rss")
done
read -r t32 tm32 < <(/usr/bin/python3 bench/torch_gpt2.py 12 768 12 50257 1024 4 64 $threads "$steps")
read -r t16 tm16 < <(/usr/bin/python3 bench/torch_gpt2.py 12 768 12 50257 1024 4 64 $threads "$steps" bf16)

row "what" "value" "unit" "anchor" "ratio"
for p in bf16 fp16; do
  row "gpt2-small step $p, B=4 T=64, 2 threads" "${ms[$p]}" "ms" "fusion fp32 ${ms[fp32]} ms" "$(ratio "${ms[$p]}" "${ms[fp32]}")"
  row "gpt2-small peak memory $p" "${mib[$p]}" "MiB" "fusion fp32 ${mib[fp32]} MiB" "$(ratio "${mib[$p]}" "${mib[fp32]}")"
done
row "pytorch gpt2-small step bf16 autocast" "$t16" "ms" "pytorch fp32 $t32 ms" "$(ratio "$t16" "$t32")"
row "pytorch gpt2-small peak memory bf16 autocast" "$tm16" "MiB" "pytorch fp32 $tm32 MiB" "$(ratio "$tm16" "$tm32")"
row "gpt2-small step fusion bf16" "${ms[bf16]}" "ms" "pytorch bf16 autocast $t16 ms" "$(ratio "${ms[bf16]}" "$t16")"
row "gpt2-small step fusion fp32" "${ms[fp32]}" "ms" "pytorch fp32 $t32 ms" "$(ratio "${ms[fp32]}" "$t32")"
"$build/bench/bench_bf16_gemm" $threads | tail -n +2

gpt=(--set vocab=256 --set ctx=64 --set layers=4 --set dim=128 --set heads=4 --set batch=8 --set seq=64
     --set lr=2e-3 --set warmup=20 --set steps=600 --set min_lr=2e-4)
declare -A final
for p in fp32 bf16 fp16; do
  "$build/fusionc" compile models/gpt2.xml clusters/local-4.xml -o "$work/demo-$p" "${gpt[@]}" --precision $p >/dev/null
  "$work/demo-$p/launch-local.sh" --data "$work/corpus.txt" --steps 600 --log "$work/demo-$p.jsonl" --emulate-links \
    >"$work/demo-$p.out" 2>&1
  reporter=$(sed -n 's/^reporter=//p' "$work/demo-$p/launch-local.sh")
  final[$p]=$(tail -n 20 "$work/demo-$p.$reporter.jsonl" | sed 's/.*"loss": \([0-9.]*\).*/\1/' |
    awk '{ s += $1 } END { printf "%.4f", s / NR }')
done
for p in bf16 fp16; do
  row "demo GPT 600 steps on local-4, $p final loss" "${final[$p]}" "nats" "fp32 ${final[fp32]} (target <= 2% off)" \
      "$(ratio "${final[$p]}" "${final[fp32]}")"
done
