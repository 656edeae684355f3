#!/usr/bin/env bash
# The main job, as far as the project goes today: installs what is missing,
# builds fusion, validates the shipped models and clusters, and shows what
# the compiler makes of GPT-2 and ResNet (parameters, FLOPs, the OP-DAG).
# Training arrives with the autodiff/runtime issue; see README.md.
set -euo pipefail
cd "$(dirname "$0")/.."
jobs=$(nproc 2>/dev/null || echo 2)

scripts/install-deps.sh
cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build build -j"$jobs" --target fusionc -- --no-print-directory >/dev/null
fusionc=build/fusionc

echo "== fusionc check: every shipped model and cluster =="
$fusionc check models/*.xml clusters/*.xml

echo
echo "== the local 4-device cluster =="
$fusionc check -v clusters/local-4.xml

for m in "models/gpt2.xml" "models/gpt2.xml --set layers=48 --set dim=1600 --set heads=25" \
         "models/resnet.xml --set depth=101"; do
  echo
  echo "== fusionc stats $m =="
  # shellcheck disable=SC2086
  $fusionc stats $m | grep -v '^  '
done

mkdir -p out
echo
echo "== the OP-DAG of a 2-layer GPT after shape inference (first ops) =="
$fusionc dump models/gpt2.xml --set layers=2 --set seq=64 --after shapes -o out/gpt2-2layer.fir
head -n 24 out/gpt2-2layer.fir
$fusionc dump models/gpt2.xml --set layers=2 --set seq=64 --format dot -o out/gpt2-2layer.dot
if command -v dot >/dev/null; then
  dot -Tsvg out/gpt2-2layer.dot -o out/gpt2-2layer.svg
  echo "... whole graph: out/gpt2-2layer.fir, drawn: out/gpt2-2layer.svg"
fi
