#!/usr/bin/env bash
# bench_generate: decoding speed of an inference program against PyTorch,
# side by side in one run, one CPU device, THREADS threads.  A Llama of
# about 77M parameters (vocab 32,000 untied, dim 576, 10 layers, 9 query
# heads over 3, ffn 1,536; ctx 512) with random weights (the speed does not
# depend on them), f32; a 16-token prompt, N tokens greedy.
#   fusion   fusionc compile --inference (batch 1, seq 1: the prompt a
#            token a step), the device program run directly;
#   PyTorch  bench/torch_generate.py: a loop with a key/value cache
#            (preallocated, written in place), the prompt in one forward.
# Decode tokens/s (N-1 steps over their time: the first token comes from
# the prompt's last step on both); prefill tokens/s; whether the two chose
# the same tokens; and decoding's fraction of the memory-bandwidth limit:
# a step reads every weight once, so the limit is a copy's bandwidth
# (numpy, 256 MiB arrays, reads plus writes) over the weights' bytes.
# Prints what, value, unit, anchor, ratio.  About a minute.
# usage: bench/bench_generate.sh [BUILD_DIR] [N] [THREADS]
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
N=${2:-64}
threads=${3:-2}
py=/usr/bin/python3
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
export OMP_WAIT_POLICY=passive
row() { printf '%-44s %10s %-8s %-28s %s\n' "$@"; }
L=10 D=576 H=9 KV=3 F=1536 V=32000 CTX=512
cfg="vocab=$V,ctx=$CTX,layers=$L,dim=$D,heads=$H,kv_heads=$KV,ffn=$F,batch=1,seq=1"
"$py" tests/parity/torch_parity.py make llama "$cfg" "$work/w.st" "$work/in.st" 7 >/dev/null
sets=()
IFS=, read -ra kv <<<"$cfg"
for s in "${kv[@]}"; do sets+=(--set "$s"); done
"$build/fusionc" compile models/llama.xml "${sets[@]}" --inference clusters/local-1.xml -o "$work/inf" >/dev/null
prompt=$(seq -s, 100 115)
"$work/inf/cpu0/fusion-cpu0" --init "$work/w.st" --prompt-ids "$prompt" --max-tokens "$N" --temperature 0 \
  --threads "$threads" >"$work/fusion.ids" 2>"$work/fusion.err" || { cat "$work/fusion.err" >&2; exit 1; }
read -r p_tok p_s d_tok d_s < <(sed -n \
  's/^fusion: prompt \([0-9]*\) tokens in \([0-9.]*\) s.*generated \([0-9]*\) tokens in \([0-9.]*\) s.*/\1 \2 \3 \4/p' \
  "$work/fusion.err")
read -r t_prefill t_decode t_ids < <("$py" bench/torch_generate.py "$work/w.st" $L $D $H $KV $CTX "$prompt" "$N" "$threads")
f_decode=$(awk -v n="$d_tok" -v s="$d_s" 'BEGIN { printf "%.2f", (n - 1) / s }')
f_prefill=$(awk -v n="$p_tok" -v s="$p_s" 'BEGIN { printf "%.2f", n / s }')
params=$("$py" -c "
import sys; sys.path.insert(0, 'tests/parity')
from torch_parity import st_read
print(sum(t.numel() for t in st_read('$work/w.st').values()))")
bw=$("$py" -c "
import numpy as np, time
a = np.ones(1 << 26, np.float32); b = np.empty_like(a); best = 1e9
for _ in range(5):
    t = time.perf_counter(); np.copyto(b, a); best = min(best, time.perf_counter() - t)
print(2 * a.nbytes / best)")
same=$([ "$(paste -sd, "$work/fusion.ids")" = "$t_ids" ] && echo yes || echo no)
echo "  $params parameters, $((params * 4 / 1048576)) MiB of f32 weights a token; the same $N tokens as PyTorch: $same"
row "decode, fusion" "$f_decode" "tok/s" "PyTorch $t_decode tok/s" \
  "$(awk -v a="$f_decode" -v b="$t_decode" 'BEGIN { printf "%.2f", a / b }')"
row "prefill, fusion (a token a step)" "$f_prefill" "tok/s" "PyTorch $t_prefill tok/s (one pass)" \
  "$(awk -v a="$f_prefill" -v b="$t_prefill" 'BEGIN { printf "%.2f", a / b }')"
row "copy bandwidth (numpy, reads + writes)" "$(awk -v b="$bw" 'BEGIN { printf "%.2f", b / 1e9 }')" "GB/s" "-" "-"
row "decode, fusion: share of the bandwidth limit" \
  "$(awk -v r="$f_decode" -v p="$params" -v b="$bw" 'BEGIN { printf "%.3f", r * p * 4 / b }')" "-" \
  "limit $(awk -v p="$params" -v b="$bw" 'BEGIN { printf "%.1f", b / (p * 4) }') tok/s" "-"
row "decode, PyTorch: share of the bandwidth limit" \
  "$(awk -v r="$t_decode" -v p="$params" -v b="$bw" 'BEGIN { printf "%.3f", r * p * 4 / b }')" "-" "-" "-"
