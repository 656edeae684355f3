#!/usr/bin/env bash
# bench_overlap: what reducing the gradient buckets during the backward
# (runtime/comm/overlap.h) saves, measured on this machine, side by side in
# one run, against the same programs with --no-overlap (the same buckets,
# reduced after the backward: the same bits).
#
# clusters/local-4.xml with its devices' peaks set to 6 GFLOPS (four paced
# processes must fit on two cores), --emulate-links (the sites' 20 Mbps /
# 40 ms link) and --emulate-devices; a GPT of 2 layers, d 256, byte-level,
# 128 sequences of 64 tokens a step, one micro-batch, fp32, placed as
# 1 stage x 4 replicas (the all-reduce hierarchical: inside each site, then
# between the sites' leaders over the slow link), so that the backward and
# the all-reduce take about as long as each other.  Also `fusionc simulate`'s
# step for both, and its error.
#
# Prints one line a figure: what, value, unit, anchor.  About two minutes on
# two cores.  Not a ctest test.
# usage: bench/bench_overlap.sh [BUILD_DIR] [STEPS]
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
steps=${2:-8}
fusionc="$build/fusionc"
export OMP_WAIT_POLICY=passive
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cat /usr/share/common-licenses/* > "$work/corpus.txt"
row() { printf '%-58s %10s %-6s %s\n' "$@"; }
gpt=(models/gpt2.xml --set vocab=256 --set ctx=64 --set layers=2 --set dim=256 --set heads=4 --set batch=128
     --set seq=64)
plan=(--compress none --stages 1 --replicas 4 --micro-batches 1)
sed -E 's/(peak-[a-z0-9]+)="[0-9.]+GFLOPS"/\1="6GFLOPS"/g' clusters/local-4.xml >"$work/four.xml"
"$fusionc" compile "${gpt[@]}" "$work/four.xml" -o "$work/out" "${plan[@]}" \
  --port-base $((35000 + ($$ % 200) * 20)) >"$work/compile"
grep -q hierarchical "$work/out/plan.txt" || { echo "bench_overlap: the plan is not hierarchical" >&2; exit 1; }

# mean ms a step over the steps after the first (the first holds the start).
ms() { sed 's/^\[[^]]*\] //' "$1" | awk '/^step / && $2 !~ /^1\// { for (i = 1; i < NF; i++) if ($(i+1) == "ms/step") { s += $i; n++ } }
                                      END { if (n) printf "%.1f", s / n }'; }
sim() { "$fusionc" simulate "${gpt[@]}" "$work/four.xml" "${plan[@]}" "$@" -o "$work" | awk '/^simulated step:/{print $3}'; }

for mode in overlap serial; do
  extra=()
  [ $mode = serial ] && extra=(--no-overlap)
  "$work/out/launch-local.sh" --data "$work/corpus.txt" --steps "$steps" --emulate-links --emulate-devices \
    "${extra[@]}" >"$work/$mode.out" 2>&1 || { tail -5 "$work/$mode.out" >&2; exit 1; }
done
a=$(ms "$work/overlap.out"); b=$(ms "$work/serial.out")
sa=$(sim); sb=$(sim --no-overlap)
la=$(sed 's/^\[[^]]*\] //' "$work/overlap.out" | awk '/^step /{l = $4} END {print l}')
lb=$(sed 's/^\[[^]]*\] //' "$work/serial.out" | awk '/^step /{l = $4} END {print l}')
row "measured step, buckets during the backward" "$a" ms "(mean of steps 2..$steps)"
row "measured step, --no-overlap" "$b" ms ""
row "measured overlap / --no-overlap" "$(awk -v a="$a" -v b="$b" 'BEGIN { printf "%.3f", a / b }')" x "< 1 is a saving"
row "simulated step, buckets during the backward" "$sa" ms "$(awk -v m="$a" -v s="$sa" 'BEGIN { printf "%+.1f%% off the measured", 100 * (s - m) / m }')"
row "simulated step, --no-overlap" "$sb" ms "$(awk -v m="$b" -v s="$sb" 'BEGIN { printf "%+.1f%% off the measured", 100 * (s - m) / m }')"
row "last loss, overlap / --no-overlap" "$la" "" "$lb (the same bits: must be equal)"
grep -h "gradient buckets:" "$work/overlap.out" | head -1 | sed 's/^\[[^]]*\] //'
[ "$la" = "$lb" ] || { echo "bench_overlap: the losses differ" >&2; exit 1; }
