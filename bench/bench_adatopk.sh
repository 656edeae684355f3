#!/usr/bin/env bash
# bench_adatopk: does AdaTopK buy speed on a slow link without costing
# convergence?  (FusionLLM's "Convergence" figure, on this machine.)
#
# A GPT (4 layers, width 128, batch 16 x 64 tokens, 4 micro-batches) on
# clusters/local-4.xml: two sites of two CPU devices on this machine, a
# 20 Mbps / 40 ms link between the sites (the runtime's link shaper,
# --emulate-links).  --scheduler uniform makes every device a stage, so the
# slow link is on the pipeline (an activation and its gradient cross it
# every micro-batch, the tied embedding's partial gradient once a step).
# adatopk sends the first two as rows of 8 or 4 bits and the third as its
# top k with error feedback (passes/compress.c).  Compiled twice,
# with --compress none and --compress adatopk (the latter run with
# --adapt-density: each sender re-measures its links between steps), both
# trained the same steps from the same seed, one after the other.
#
# Prints one line a figure: what, value, unit, anchor, ratio:
#   - final loss (mean of the last 10 steps) of each, and adatopk's over
#     none's (target: within 3%, ratio 0.97..1.03);
#   - tokens/s of each (median step after the first two), and adatopk's
#     over none's (target >= 2);
#   - adatopk's tokens/s with its links sealed (as always) over the same
#     bundles run again with plain links (FUSION_UNSEALED_LINKS=1): what
#     sealing costs on a 20 Mbps link (target 0.97..1.03);
# each sender's densities at the first and last step (its log:
# OUT_DIR/adatopk-logs/), then the path of a PNG with both loss curves (gnuplot; skipped, with a
# line saying so, when gnuplot is not installed: scripts/install-deps.sh).
# usage: bench/bench_adatopk.sh [BUILD_DIR] [STEPS] [OUT_DIR]
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
steps=${2:-150}
out=${3:-$(mktemp -d)}
mkdir -p "$out"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
model=(--set vocab=256 --set ctx=64 --set layers=4 --set dim=128 --set heads=4 --set batch=16 --set seq=64
       --set lr=2e-3 --set warmup=10)
cat /usr/share/common-licenses/* > "$work/corpus.txt"
base=$((40000 + ($$ % 500) * 40))

median() { sort -n | awk '{ a[NR] = $1 } END { print (NR % 2) ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2 }'; }

for c in none adatopk; do
  "$build/fusionc" compile models/gpt2.xml clusters/local-4.xml -o "$work/$c" "${model[@]}" \
    --scheduler uniform --micro-batches 4 --compress "$c" --port-base "$base" --dump-ir=compress \
    >"$work/$c.compile" 2>"$work/$c.ir"
  base=$((base + 20))
  grep '^node .*= send(' "$work/$c.ir" | grep -E 'density=|bits=' \
    | sed -E 's/^node ([^ ]*) = .*((density|bits)=[0-9.e-]*).*/# '"$c"': \1 \2/' || true
  extra=(); [ "$c" = adatopk ] && extra=(--adapt-density)
  "$work/$c/launch-local.sh" --data "$work/corpus.txt" --steps "$steps" --seed 1 --emulate-links "${extra[@]}" \
    >"$work/$c.out" 2>&1 || { tail -5 "$work/$c.out" >&2; exit 1; }
  cp "$work/$c.out" "$out/$c.log"
  mkdir -p "$out/$c-logs" && cp "$work/$c"/logs/*.log "$out/$c-logs/"
  # The loss device's lines: "step N/M  loss L  T tok/s  X ms/step [rho R ...]".
  sed 's/^\[[^]]*\] //' "$work/$c.out" | awk '/^step .* loss / { split($2, s, "/"); print s[1], $4 }' >"$work/$c.loss"
  sed 's/^\[[^]]*\] //' "$work/$c.out" | awk '/^step .* loss / { n++; for (i = 2; i <= NF; i++) if ($i == "ms/step" && n > 2) print $(i - 1) }' \
    | median >"$work/$c.ms"
  [ "$(wc -l <"$work/$c.loss")" -eq "$steps" ] || { echo "bench_adatopk: $c: $(wc -l <"$work/$c.loss") loss lines, expected $steps" >&2; exit 1; }
done
# Each sender's densities (one per compressed send), first and last step.
for f in "$out"/adatopk-logs/*.log; do
  { grep '^step .*rho ' "$f" || true; } | sed -n '1p;$p' | sed "s/^step *\([0-9]*\).*ms\/step */# adatopk $(basename "$f" .log) step \1: /"
done

tokens=$((16 * 64))
final() { tail -10 "$1" | awk '{ s += $2 } END { printf "%.6f", s / NR }'; }
n_loss=$(final "$work/none.loss"); a_loss=$(final "$work/adatopk.loss")
n_ms=$(cat "$work/none.ms"); a_ms=$(cat "$work/adatopk.ms")
awk -v n="$n_loss" -v a="$a_loss" -v s="$steps" 'BEGIN {
  printf "none final loss       %10.4f         anchor -                 ratio -          (mean of steps %d..%d)\n", n, s - 9, s
  printf "adatopk final loss    %10.4f         anchor none %10.4f   ratio %.4f (target 0.97..1.03)\n", a, n, a / n }'
awk -v n="$n_ms" -v a="$a_ms" -v t="$tokens" 'BEGIN {
  printf "none tokens/s         %10.0f tok/s   anchor -                 ratio -\n", t / n * 1000
  printf "adatopk tokens/s      %10.0f tok/s   anchor none %10.0f   ratio %.2f (target >= 2)\n", t / a * 1000, t / n * 1000, n / a }'

# What sealing costs on the slow link: the adatopk bundles again, their
# links plain (FUSION_UNSEALED_LINKS=1, benchmarks only), right after.
base=$((base + 20))
FUSION_UNSEALED_LINKS=1 "$work/adatopk/launch-local.sh" --data "$work/corpus.txt" --steps "$steps" --seed 1 \
  --emulate-links --adapt-density --port-base "$base" >"$work/plain.out" 2>&1 || { tail -5 "$work/plain.out" >&2; exit 1; }
sed 's/^\[[^]]*\] //' "$work/plain.out" | awk '/^step .* loss / { n++; for (i = 2; i <= NF; i++) if ($i == "ms/step" && n > 2) print $(i - 1) }' \
  | median >"$work/plain.ms"
sed 's/^\[[^]]*\] //' "$work/plain.out" | awk '/^step .* loss / { split($2, s, "/"); print s[1], $4 }' >"$work/plain.loss"
p_ms=$(cat "$work/plain.ms"); p_loss=$(final "$work/plain.loss")
awk -v p="$p_ms" -v a="$a_ms" -v t="$tokens" -v pl="$p_loss" -v al="$a_loss" 'BEGIN {
  printf "adatopk unsealed tok/s %9.0f tok/s   anchor -                 ratio -          (final loss %.4f)\n", t / p * 1000, pl
  printf "adatopk sealed tok/s  %10.0f tok/s   anchor unsealed %6.0f   ratio %.3f (target 0.97..1.03; final loss %.4f)\n",
         t / a * 1000, t / p * 1000, p / a, al }'

join "$work/none.loss" "$work/adatopk.loss" >"$out/loss.dat"
if command -v gnuplot >/dev/null; then
  gnuplot <<EOF
set terminal png size 900,560
set output "$out/adatopk_convergence.png"
set title "GPT (4 x 128) on local-4, 20 Mbps link, uniform 4-stage pipeline, 4 micro-batches"
set xlabel "step"
set ylabel "training loss"
set grid
plot "$out/loss.dat" using 1:2 with lines lw 2 title "--compress none", \
     "$out/loss.dat" using 1:3 with lines lw 2 title "--compress adatopk --adapt-density"
EOF
  echo "loss curves: $out/adatopk_convergence.png (data: $out/loss.dat)"
else
  echo "loss curves: not plotted (no gnuplot: scripts/install-deps.sh); data: $out/loss.dat"
fi
