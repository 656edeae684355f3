#!/usr/bin/env bash
# bench_quant_allreduce: the quantised all-reduce (passes/allreduce_plan.h,
# runtime/comm/quant_allreduce.c) against the dense all-reduce it replaces,
# measured on this machine, side by side in one run: time a step and loss.
#
# clusters/local-4.xml (two sites of two CPU devices, 20 Mbps / 40 ms
# between them) with --emulate-links; a GPT of 4 layers, d 128, byte-level,
# 8 sequences of 64 tokens a step in 2 micro-batches, fp32, placed as
# 1 stage x 4 replicas, so that a step is mostly the all-reduce over the
# slow link.  Rows: --compress none (the hierarchy: a ring inside each site,
# one between the sites' leaders; exact) and --compress adatopk (the
# quantised exchange at the bits plan.txt names); the same seed and data.
# Also `fusionc simulate`'s step for both and its error.
#
# Prints one line a figure: what, value, unit, anchor.  About four minutes
# on two cores.  Not a ctest test.
# usage: bench/bench_quant_allreduce.sh [BUILD_DIR] [STEPS]
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
steps=${2:-100}
fusionc="$build/fusionc"
export OMP_WAIT_POLICY=passive
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cat /usr/share/common-licenses/* > "$work/corpus.txt"
row() { printf '%-58s %10s %-6s %s\n' "$@"; }
gpt=(models/gpt2.xml --set vocab=256 --set ctx=64 --set layers=4 --set dim=128 --set heads=4 --set batch=8
     --set seq=64 --set lr=1e-3 --set warmup=10)
plan=(--stages 1 --replicas 4 --micro-batches 2)
base=$((36000 + ($$ % 200) * 20))

# mean ms a step over the steps after the first (the first holds the start).
ms() { sed 's/^\[[^]]*\] //' "$1" | awk '/^step / && $2 !~ /^1\// { for (i = 1; i < NF; i++) if ($(i+1) == "ms/step") { s += $i; n++ } }
                                      END { if (n) printf "%.1f", s / n }'; }
# mean loss of the last 10 steps.
tail_loss() { sed 's/^\[[^]]*\] //' "$1" | awk '/^step /{l[NR] = $4; n = NR} END { for (i = n - 9; i <= n; i++) s += l[i]; printf "%.4f", s / 10 }'; }
for mode in dense quant; do
  compress=none
  [ $mode = quant ] && compress=adatopk
  "$fusionc" compile "${gpt[@]}" clusters/local-4.xml -o "$work/$mode" "${plan[@]}" --compress $compress \
    --port-base $base >"$work/$mode.compile"
  base=$((base + 20))
  "$fusionc" simulate "${gpt[@]}" clusters/local-4.xml "${plan[@]}" --compress $compress -o "$work/$mode.sim" \
    | awk '/^simulated step:/{print $3}' >"$work/$mode.simulated"
  "$work/$mode/launch-local.sh" --data "$work/corpus.txt" --steps "$steps" --seed 3 --emulate-links \
    >"$work/$mode.out" 2>&1 || { tail -5 "$work/$mode.out" >&2; exit 1; }
done
bits=$(sed -n 's/^all-reduce: stage 0 quantised to \([48]\) bits.*/\1/p' "$work/quant/plan.txt")
[ -n "$bits" ] || { echo "bench_quant_allreduce: --compress adatopk did not quantise: $(cat "$work/quant/plan.txt")" >&2; exit 1; }
! grep -q quantised "$work/dense/plan.txt" || { echo "bench_quant_allreduce: --compress none quantised" >&2; exit 1; }
a=$(ms "$work/quant.out"); b=$(ms "$work/dense.out")
sa=$(cat "$work/quant.simulated"); sb=$(cat "$work/dense.simulated")
la=$(tail_loss "$work/quant.out"); lb=$(tail_loss "$work/dense.out")
row "measured step, quantised to $bits bits" "$a" ms "(mean of steps 2..$steps)"
row "measured step, dense (hierarchical)" "$b" ms ""
row "measured quantised / dense" "$(awk -v a="$a" -v b="$b" 'BEGIN { printf "%.3f", a / b }')" x "< 1 is a saving"
row "simulated step, quantised" "$sa" ms "$(awk -v m="$a" -v s="$sa" 'BEGIN { printf "%+.1f%% off the measured", 100 * (s - m) / m }')"
row "simulated step, dense" "$sb" ms "$(awk -v m="$b" -v s="$sb" 'BEGIN { printf "%+.1f%% off the measured", 100 * (s - m) / m }')"
row "loss, mean of the last 10 steps, quantised" "$la" "" "dense $lb: $(awk -v a="$la" -v b="$lb" 'BEGIN { printf "%+.2f%%", 100 * (a - b) / b }')"
