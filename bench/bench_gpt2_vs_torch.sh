#!/usr/bin/env bash
# bench_gpt2_vs_torch: one training step of GPT-2 small (124M parameters),
# batch 4 x 64 tokens, on one CPU device with 2 threads, compiled by fusion
# and run side by side with PyTorch (Debian's python3-torch, same
# architecture, same optimizer, same threads) in this one run.
#
# Prints one line a figure: what, value, unit, anchor, ratio.  Targets:
# ms/step ratio <= 1.0 (faster than PyTorch), peak memory ratio <= 1.0.
# usage: bench/bench_gpt2_vs_torch.sh [BUILD_DIR] [STEPS]
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
steps=${2:-12}
threads=2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
gpt=(--set batch=4 --set seq=64)

t0=$(date +%s.%N)
"$build/fusionc" compile models/gpt2.xml clusters/local-1.xml -o "$work/out" "${gpt[@]}" >/dev/null
t1=$(date +%s.%N)
cat /usr/share/common-licenses/* > "$work/corpus.txt"
flops=$("$build/fusionc" stats models/gpt2.xml "${gpt[@]}" |
  awk '$1 == "forward" || $1 == "backward" { gsub(/[()]/, ""); s += $6 } END { print s }')   # GFLOP per step

/usr/bin/time -f "%M" -o "$work/fusion.rss" "$work/out/cpu0/fusion-cpu0" --data "$work/corpus.txt" \
  --steps "$steps" --threads "$threads" >"$work/fusion.out"
fusion_ms=$(awk '/^step/ { n++; if (n > 2) for (i = 2; i <= NF; i++) if ($i == "ms/step") print $(i - 1) }' "$work/fusion.out" | sort -n |
  awk '{ a[NR] = $1 } END { print (NR % 2) ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2 }')
fusion_mib=$(awk '{ printf "%.1f", $1 / 1024 }' "$work/fusion.rss")
read -r torch_ms torch_mib < <(/usr/bin/python3 bench/torch_gpt2.py 12 768 12 50257 1024 4 64 "$threads" "$steps")
sgemm=$("$build/bench/sgemm_gflops" "$threads")

row() { printf '%-42s %10s %-7s %-30s %s\n' "$@"; }
row "what" "value" "unit" "anchor" "ratio"
row "gpt2-small step, B=4 T=64, 2 threads" "$fusion_ms" "ms" "pytorch $torch_ms ms" \
    "$(awk -v a="$fusion_ms" -v b="$torch_ms" 'BEGIN { printf "%.3f", a / b }')"
row "achieved matrix throughput" "$(awk -v f="$flops" -v t="$fusion_ms" 'BEGIN { printf "%.1f", f / (t / 1e3) }')" \
    "GFLOP/s" "openblas sgemm $sgemm GFLOP/s" \
    "$(awk -v f="$flops" -v t="$fusion_ms" -v s="$sgemm" 'BEGIN { printf "%.3f", f / (t / 1e3) / s }')"
row "peak resident memory" "$fusion_mib" "MiB" "pytorch $torch_mib MiB" \
    "$(awk -v a="$fusion_mib" -v b="$torch_mib" 'BEGIN { printf "%.3f", a / b }')"
row "compile gpt2-small (fusionc compile)" "$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.2f", b - a }')" "s" \
    "5 s budget" "$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.3f", (b - a) / 5 }')"
