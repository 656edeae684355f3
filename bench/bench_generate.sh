#!/usr/bin/env bash
# bench_generate: decoding speed of an inference program against PyTorch,
# side by side in one run, one CPU device, THREADS threads.  A Llama of
# 72M parameters (vocab 32,000 untied, dim 576, 10 layers, 9 query heads
# over 3, ffn 1,536; ctx 512) with random weights (the speed does not
# depend on them); a 128-token prompt, N tokens greedy.
#   fusion   fusionc compile --inference --prefill 64 (batch 1, seq 1; the
#            prompt in two steps of 64 tokens, passes/prefill.c), the
#            device program run directly: weights f32,
#            and stored bf16 (--frozen-dtype bf16: an inference program's
#            weights are all frozen; its products read them as they are);
#            with its own thread policy (an inference program's OpenMP
#            threads spin 1,000 turns before they sleep: runtime/main.c);
#   PyTorch  bench/torch_generate.py: a loop with a key/value cache
#            (preallocated, written in place), the prompt in one forward,
#            in f32 and in bf16; each run with OMP_WAIT_POLICY passive and
#            active, the faster kept (this machine's torch 1.13 runs f32 at
#            about a third of its best speed under the default policy, and
#            bf16 fastest spinning: a tuned baseline).
# Decode tokens/s (N-1 steps over their time: the first token comes from
# the prompt's last step on both); prefill tokens/s; and decoding's share
# of the memory-bandwidth limit: a step reads every weight but the
# embedding table (one row of it) once, so the limit is a copy's bandwidth
# (numpy, 256 MiB arrays, reads plus writes) over those bytes.  Prints
# what, value, unit, anchor, ratio.  About a minute.
# usage: bench/bench_generate.sh [BUILD_DIR] [N] [THREADS]
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
N=${2:-64}
threads=${3:-2}
py=/usr/bin/python3
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
row() { printf '%-48s %10s %-8s %-30s %s\n' "$@"; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", a / b }'; }
L=10 D=576 H=9 KV=3 F=1536 V=32000 CTX=512
cfg="vocab=$V,ctx=$CTX,layers=$L,dim=$D,heads=$H,kv_heads=$KV,ffn=$F,batch=1,seq=1"
"$py" tests/parity/torch_parity.py make llama "$cfg" "$work/w.st" "$work/in.st" 7 >/dev/null
sets=()
IFS=, read -ra kv <<<"$cfg"
for s in "${kv[@]}"; do sets+=(--set "$s"); done
prompt=$(seq -s, 100 227)
declare -A f_decode f_prefill t_decode t_prefill
for p in f32 bf16; do
  extra=()
  [ $p = bf16 ] && extra=(--frozen-dtype bf16)
  "$build/fusionc" compile models/llama.xml "${sets[@]}" --inference --prefill 64 "${extra[@]}" clusters/local-1.xml -o "$work/$p" \
    >/dev/null
  env -u OMP_WAIT_POLICY -u GOMP_SPINCOUNT "$work/$p/cpu0/fusion-cpu0" --init "$work/w.st" --prompt-ids "$prompt" --max-tokens "$N" \
    --temperature 0 --threads "$threads" >"$work/$p.ids" 2>"$work/$p.err" || { cat "$work/$p.err" >&2; exit 1; }
  read -r p_tok p_s d_tok d_s < <(sed -n \
    's/^fusion: prompt \([0-9]*\) tokens in \([0-9.]*\) s.*generated \([0-9]*\) tokens in \([0-9.]*\) s.*/\1 \2 \3 \4/p' \
    "$work/$p.err")
  f_decode[$p]=$(awk -v n="$d_tok" -v s="$d_s" 'BEGIN { printf "%.2f", (n - 1) / s }')
  f_prefill[$p]=$(awk -v n="$p_tok" -v s="$p_s" 'BEGIN { printf "%.2f", n / s }')
  best_d=0 best_p=0
  for pol in passive active; do
    read -r tp td _ < <(OMP_WAIT_POLICY=$pol "$py" bench/torch_generate.py "$work/w.st" $L $D $H $KV $CTX "$prompt" \
      "$N" "$threads" $p)
    best_d=$(awk -v a="$td" -v b="$best_d" 'BEGIN { print (a > b ? a : b) }')
    best_p=$(awk -v a="$tp" -v b="$best_p" 'BEGIN { print (a > b ? a : b) }')
  done
  t_decode[$p]=$best_d t_prefill[$p]=$best_p
done
read -r params embed < <("$py" -c "
import sys; sys.path.insert(0, 'tests/parity')
from torch_parity import st_read
w = st_read('$work/w.st'); print(sum(t.numel() for t in w.values()), w['model.embed_tokens.weight'].numel())")
bw=$("$py" -c "
import numpy as np, time
a = np.ones(1 << 26, np.float32); b = np.empty_like(a); best = 1e9
for _ in range(5):
    t = time.perf_counter(); np.copyto(b, a); best = min(best, time.perf_counter() - t)
print(2 * a.nbytes / best)")
read_params=$((params - embed))
echo "  $params parameters; a decoding step reads $read_params of them (all but the embedding table)"
row "decode, fusion f32" "${f_decode[f32]}" "tok/s" "PyTorch f32 ${t_decode[f32]} tok/s" \
  "$(ratio "${f_decode[f32]}" "${t_decode[f32]}")"
row "decode, fusion bf16 weights" "${f_decode[bf16]}" "tok/s" "PyTorch bf16 ${t_decode[bf16]} tok/s" \
  "$(ratio "${f_decode[bf16]}" "${t_decode[bf16]}")"
row "decode, fusion bf16 weights against PyTorch f32" "${f_decode[bf16]}" "tok/s" "PyTorch f32 ${t_decode[f32]} tok/s" \
  "$(ratio "${f_decode[bf16]}" "${t_decode[f32]}")"
row "prefill, fusion f32 (steps of 64 tokens)" "${f_prefill[f32]}" "tok/s" "PyTorch f32 ${t_prefill[f32]} (one pass)" \
  "$(ratio "${f_prefill[f32]}" "${t_prefill[f32]}")"
row "prefill, fusion bf16 (steps of 64 tokens)" "${f_prefill[bf16]}" "tok/s" "PyTorch bf16 ${t_prefill[bf16]} (one pass)" \
  "$(ratio "${f_prefill[bf16]}" "${t_prefill[bf16]}")"
row "copy bandwidth (numpy, reads + writes)" "$(awk -v b="$bw" 'BEGIN { printf "%.2f", b / 1e9 }')" "GB/s" "-" "-"
for p in f32 bf16; do
  bytes=$([ $p = f32 ] && echo 4 || echo 2)
  limit=$(awk -v b="$bw" -v n="$read_params" -v s="$bytes" 'BEGIN { printf "%.1f", b / (n * s) }')
  row "decode $p: fusion's share of the bandwidth limit" "$(ratio "${f_decode[$p]}" "$limit")" "-" \
    "limit $limit tok/s" "PyTorch $(ratio "${t_decode[$p]}" "$limit")"
done
