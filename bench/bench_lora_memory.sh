#!/usr/bin/env bash
# bench_lora_memory: what LoRA saves in memory, side by side in one run.
# The ~20M-parameter Llama of bench_convergence (vocab 50,257 tied, dim
# 256, 8 layers, 8 query heads over 4, ffn 688: 18.7M parameters; 4 x 128
# tokens a step) on clusters/local-1.xml, trained for STEPS steps:
#   full   every parameter trained by AdamW (weights, gradients and two
#          moments: four copies);
#   lora   --lora rank=8,alpha=16,targets=q_proj,k_proj,v_proj,o_proj: the
#          base frozen (one copy, no gradient, no moments), 0.26M adapter
#          parameters trained.
# Each run's peak resident memory (GNU time's %M, the whole process:
# arena, code, OpenBLAS's buffers) and its arena as the memory pass
# planned it (plan.txt); prints what, value, unit, anchor, ratio.  The
# issue's bound: LoRA at most 0.6x full fine-tuning's peak.  Measured
# (2026-11-27, 2 cores, 5 steps): 253 MiB against 492, 0.514x; arenas
# 243.2 and 433.6 MiB (0.561x).  Both carry the logits of 512 tokens over
# 50,257 ids (98 MiB, their gradient written over them) and the stash;
# full fine-tuning adds the gradients and two moments of 18.7M weights.
# usage: bench/bench_lora_memory.sh [BUILD_DIR] [STEPS]
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
steps=${2:-5}
fusionc=$build/fusionc
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
export OMP_WAIT_POLICY=passive
row() { printf '%-52s %10s %-8s %-24s %s\n' "$@"; }
llama=(--set vocab=50257 --set tie=1 --set dim=256 --set layers=8 --set heads=8 --set kv_heads=4 --set ffn=688
       --set ctx=128 --set seq=128 --set batch=4)
cat /usr/share/common-licenses/* >"$work/corpus.txt"
declare -A flags=([full]="" [lora]="--lora rank=8,alpha=16,targets=q_proj,k_proj,v_proj,o_proj")
for mode in full lora; do
  # shellcheck disable=SC2086
  "$fusionc" compile models/llama.xml clusters/local-1.xml -o "$work/$mode" "${llama[@]}" ${flags[$mode]} >/dev/null
  /usr/bin/time -f "%M" -o "$work/$mode.rss" "$work/$mode/cpu0/fusion-cpu0" --data "$work/corpus.txt" \
    --steps "$steps" --seed 1 >"$work/$mode.out"
done
"$fusionc" stats models/llama.xml "${llama[@]}" ${flags[lora]} | sed -n 's/^trained *//p' |
  while read -r t _; do row "trained parameters (lora)" "$t" "" "-" "-"; done
arena() { awk '$1 == "0" && $2 == "cpu0" { print $12 }' "$work/$1/plan.txt"; }
full_rss=$(( $(cat "$work/full.rss") / 1024 )) lora_rss=$(( $(cat "$work/lora.rss") / 1024 ))
row "full fine-tuning: peak resident memory" "$full_rss" "MiB" "-" "-"
row "lora rank 8: peak resident memory" "$lora_rss" "MiB" "full $full_rss MiB" \
  "$(awk -v a="$lora_rss" -v b="$full_rss" 'BEGIN { printf "%.3f", a / b }')"
row "full fine-tuning: arena (plan.txt)" "$(arena full)" "MiB" "-" "-"
row "lora rank 8: arena (plan.txt)" "$(arena lora)" "MiB" "full $(arena full) MiB" \
  "$(awk -v a="$(arena lora)" -v b="$(arena full)" 'BEGIN { printf "%.3f", a / b }')"
for mode in full lora; do
  row "$mode: ms a step (median of $steps)" "$(awk '/^step /{for (i = 2; i <= NF; i++) if ($i == "ms/step") print $(i - 1)}' "$work/$mode.out" | sort -g |
    awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }')" "ms" "-" "-"
done
