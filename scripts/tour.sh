#!/usr/bin/env bash
# tour.sh: the README's five-minute tour, run as written, its transcript in
# Markdown on standard output (docs/tour.md is one).  Every command takes
# the same model settings, so compile, plan and simulate place the same
# model; the training follows a cosine learning rate over its --steps 20;
# a mistyped option shows what a typo gets.
#
#   scripts/tour.sh > docs/tour.md          (after scripts/demo.sh built build/fusionc)
#
# FUSIONC (default build/fusionc) and TOUR_OUT (default out) let a test run
# it elsewhere.  Exits non-zero if a command that should work does not.
set -uo pipefail
cd "$(dirname "$0")/.."
fusionc=${FUSIONC:-build/fusionc}
out=${TOUR_OUT:-out}
mkdir -p "$out/data"
[ -s "$out/data/corpus.txt" ] || cat /usr/share/common-licenses/* >"$out/data/corpus.txt"
gpt=(--set vocab=256 --set ctx=64 --set layers=4 --set dim=128 --set heads=4 --set batch=8 --set seq=64)
status=0

# show WHY COMMAND...: the command as typed (fusionc for its path), its output, and its exit status if not 0.
show() {
  local why=$1
  shift
  echo "$why"
  echo
  echo '```text'
  echo "\$ $*" | sed "s|$fusionc|fusionc|g; s|$out/|out/|g"
  "$@" 2>&1 | sed "s|$fusionc|fusionc|g; s|$out/|out/|g"
  local rc=${PIPESTATUS[0]}
  [ "$rc" -eq 0 ] || echo "(exit status $rc)"
  echo '```'
  echo
  return "$rc"
}

echo "# The tour, as it ran"
echo
echo "\`scripts/tour.sh\` ran the README's tour and wrote this on $(date -u +%Y-%m-%d)"
echo "($(nproc) CPU cores, $(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -1))."
echo "Every command takes the same model settings: ${gpt[*]}."
echo
show "Compile: one standalone program per device, and why the other devices are left out." \
  "$fusionc" compile models/gpt2.xml clusters/local-4.xml -o "$out/tour" "${gpt[@]}" --force || status=1
show "Plan: the same placement, with each stage's estimated compute and transfer." \
  "$fusionc" plan models/gpt2.xml clusters/local-4.xml "${gpt[@]}" || status=1
show "Train 20 steps, links shaped as the cluster file says, the learning rate on a cosine over the run's --steps:" \
  "$out/tour/launch-local.sh" --data "$out/data/corpus.txt" --steps 20 --lr-schedule cosine --emulate-links \
  --log "$out/tour/train.jsonl" || status=1
show "A typo gets the nearest option (each device says it once, and launch-local names the devices that stopped):" \
  "$out/tour/launch-local.sh" --data "$out/data/corpus.txt" --stpes 20 && status=1
show "Report: loss.png, throughput.png and links.png from the logs, and a summary." \
  "$fusionc" report "$out"/tour/train.*.jsonl -o "$out/tour/report" || status=1
show "Simulate: the placed steps event by event, against the plan's estimate." \
  "$fusionc" simulate models/gpt2.xml clusters/local-4.xml "${gpt[@]}" || status=1
exit $status
