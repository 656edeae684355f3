#!/usr/bin/env bash
# bench_cuda_compile: how long `fusionc compile` takes for GPT-2 small on a
# 4-GPU cluster (clusters/local-gpu-4.xml, four pipeline stages), cold (an
# empty kernel cache: NVRTC compiles every module for sm_80, sm_90 and PTX)
# and warm (the same compile again: every module from the cache).  Best of
# RUNS runs each; the anchors are issue 6's bounds, 30 s cold and 5 s warm
# (ratio = bound / measured: above 1 is within it).
#
# Prints one line a figure: what, seconds, unit, anchor, ratio.  Not a ctest
# test.  No GPU is involved: NVRTC compiles on the CPU.
# usage: bench/bench_cuda_compile.sh [BUILD_DIR] [RUNS]
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
runs=${2:-3}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

seconds() { local t0 t1; t0=$(date +%s.%N); "$@" >/dev/null; t1=$(date +%s.%N); echo "$t1 - $t0" | bc -l; }
compile() { "$build/fusionc" compile models/gpt2.xml clusters/local-gpu-4.xml --stages 4 -o "$work/out"; }

best_cold= best_warm=
for r in $(seq 1 "$runs"); do
  export FUSION_CACHE_DIR="$work/cache-$r"
  cold=$(seconds compile)
  warm=$(seconds compile)
  best_cold=$(printf '%s\n' $cold ${best_cold:-} | sort -g | head -1)
  best_warm=$(printf '%s\n' $warm ${best_warm:-} | sort -g | head -1)
done
kernels=$(cat "$work"/out/*/kernels.cu | grep -c '^extern "C" __global__')
printf 'gpt2-small 4-gpu compile, cold cache, %.2f, s, anchor 30 s, ratio %.1f\n' "$best_cold" "$(echo "30 / $best_cold" | bc -l)"
printf 'gpt2-small 4-gpu compile, warm cache, %.2f, s, anchor 5 s, ratio %.1f\n' "$best_warm" "$(echo "5 / $best_warm" | bc -l)"
printf 'gpt2-small 4-gpu kernels over the 4 modules, %d, kernels, anchor -, ratio -\n' "$kernels"
