#!/usr/bin/env bash
# The main job: installs what is missing, builds fusion, validates the
# shipped models and clusters, then compiles a small GPT for the 4-device
# cluster clusters/local-4.xml (two sites joined by a 20 Mbps, 40 ms link,
# emulated on this machine), shows the plan OP-Fence chose beside the
# bandwidth-blind one, and trains it on English text (the licence texts
# that Debian's base-files package ships) with every device a process of
# its own, printing progress; at the end it compares the loss with the
# text's byte unigram entropy.
set -euo pipefail
cd "$(dirname "$0")/.."
jobs=$(nproc 2>/dev/null || echo 2)

scripts/install-deps.sh
echo "== building fusion in build/ (the first build takes about a minute on 2 cores) =="
cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
# cmake's "[ 45%] Building ..." lines, shown every 10% (and any error in full)
cmake --build build -j"$jobs" --target fusionc -- --no-print-directory 2>&1 |
  awk '/[Ee]rror/ { print; next }
       /^\[ *[0-9]+%\]/ { s = $0; sub(/^\[ */, "", s); p = s + 0
                          if (p >= next_shown) { printf "  %d%%\n", p; fflush(); next_shown = p - p % 10 + 10 } }'
echo "  built build/fusionc"
fusionc=build/fusionc

echo "== fusionc check: every shipped model and cluster =="
$fusionc check models/*.xml clusters/*.xml

echo
echo "== the local 4-device cluster =="
$fusionc check -v clusters/local-4.xml

echo
echo "== fusionc stats: GPT-2 small and XL =="
$fusionc stats models/gpt2.xml | grep -E '^(parameters|forward|backward|arena)'
$fusionc stats models/gpt2.xml --set layers=48 --set dim=1600 --set heads=25 | grep -E '^(parameters|forward|backward)'

mkdir -p out/data
cat /usr/share/common-licenses/* > out/data/corpus.txt
gpt=(--set vocab=256 --set ctx=64 --set layers=4 --set dim=128 --set heads=4 --set batch=8 --set seq=64
     --set lr=2e-3 --set warmup=20 --set steps=600 --set min_lr=2e-4)
echo
echo "== fusionc plan: the bandwidth-blind placement (uniform), for comparison =="
$fusionc plan models/gpt2.xml clusters/local-4.xml "${gpt[@]}" --scheduler uniform -o out
echo
echo "== fusionc compile: a 4-layer byte-level GPT for clusters/local-4.xml (OP-Fence) =="
rm -rf out/demo
$fusionc compile models/gpt2.xml clusters/local-4.xml -o out/demo "${gpt[@]}"
cat out/demo/plan.txt
$fusionc stats models/gpt2.xml "${gpt[@]}" | grep -E '^(parameters|arena)'

echo
echo "== training on out/data/corpus.txt ($(wc -c < out/data/corpus.txt) bytes of English), links emulated =="
out/demo/launch-local.sh --data out/data/corpus.txt --steps 600 --log out/demo/train.jsonl --emulate-links |
  awk '/ step +[0-9]+\// { n++; if (n <= 5 || n % 50 == 0) print; next } { print }'

entropy=$(od -An -v -tu1 out/data/corpus.txt | tr -s ' ' '\n' |
  awk 'NF { c[$1]++; n++ } END { for (k in c) { p = c[k] / n; h -= p * log(p) }; printf "%.3f", h }')
reporter=$(sed -n 's/^reporter=//p' out/demo/launch-local.sh)
last=$(tail -n 1 "out/demo/train.$reporter.jsonl" | sed 's/.*"loss": \([0-9.]*\).*/\1/')
echo
echo "final loss ${last} nats/byte; the text's byte unigram entropy is ${entropy} nats/byte"
echo "(a model that only knew byte frequencies could not go below ${entropy})"

echo
echo "== fusionc report: the step logs as plots (loss, tokens/s, the links' bytes and busy time) =="
$fusionc report out/demo/train.*.jsonl -o out/demo/report
