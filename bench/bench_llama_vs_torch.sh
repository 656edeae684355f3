#!/usr/bin/env bash
# bench_llama_vs_torch: one training step of a Llama of about 100M
# parameters (8 layers, width 768, 12 query heads over 4 key/value heads,
# SwiGLU width 2048, vocabulary 32,000: 99.6M), batch 4 x 64 tokens, on one
# CPU device with 2 threads, compiled by fusion and run side by side with
# PyTorch (Debian's python3-torch, bench/torch_llama.py: the same
# architecture, optimizer and threads) in this one run.
#
# Prints one line a figure: what, value, unit, anchor, ratio.  Target
# (issue 19): ms/step ratio <= 0.6.
# usage: bench/bench_llama_vs_torch.sh [BUILD_DIR] [STEPS]
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
steps=${2:-12}
threads=2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
shape=(8 768 12 4 2048 32000)
llama=(--set layers=8 --set dim=768 --set heads=12 --set kv_heads=4 --set ffn=2048 --set vocab=32000
       --set ctx=64 --set batch=4 --set seq=64)

"$build/fusionc" compile models/llama.xml clusters/local-1.xml -o "$work/out" "${llama[@]}" >/dev/null
params=$("$build/fusionc" stats models/llama.xml "${llama[@]}" | awk '$1 == "parameters" { print $2 }')
cat /usr/share/common-licenses/* > "$work/corpus.txt"

/usr/bin/time -f "%M" -o "$work/fusion.rss" "$work/out/cpu0/fusion-cpu0" --data "$work/corpus.txt" \
  --steps "$steps" --threads "$threads" >"$work/fusion.out"
fusion_ms=$(awk '/^step/ { n++; if (n > 2) for (i = 2; i <= NF; i++) if ($i == "ms/step") print $(i - 1) }' "$work/fusion.out" | sort -n |
  awk '{ a[NR] = $1 } END { print (NR % 2) ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2 }')
fusion_mib=$(awk '{ printf "%.1f", $1 / 1024 }' "$work/fusion.rss")
read -r torch_ms torch_mib < <(/usr/bin/python3 bench/torch_llama.py "${shape[@]}" 4 64 "$threads" "$steps")

row() { printf '%-46s %10s %-7s %-30s %s\n' "$@"; }
row "what" "value" "unit" "anchor" "ratio"
row "llama $params params step, B=4 T=64, 2 threads" "$fusion_ms" "ms" "pytorch $torch_ms ms" \
    "$(awk -v a="$fusion_ms" -v b="$torch_ms" 'BEGIN { printf "%.3f", a / b }')"
row "peak resident memory" "$fusion_mib" "MiB" "pytorch $torch_mib MiB" \
    "$(awk -v a="$fusion_mib" -v b="$torch_mib" 'BEGIN { printf "%.3f", a / b }')"
