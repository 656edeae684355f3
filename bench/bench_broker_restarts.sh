#!/usr/bin/env bash
# bench_broker_restarts: issue 28's "the broker SIGKILLed at random
# moments" figure.  A small GPT as 2 stages x 2 replicas on
# tests/clusters/local-4-standby.xml (one standby), devices declared at
# 2 GFLOPS and paced to it, a checkpoint every 10 steps, peer timeout
# 3 s, 1,000 steps.  The broker is SIGKILLed KILLS times (default 10) at
# random moments, and started again each time on the same OUT; kills 4 and
# 7 first SIGKILL a device (cpu-a1, then cpu-b0) and then the broker
# during the recovery that follows (as the loss is declared; 1 s later, as
# the devices start again).  At the end
# the run must have finished (exit 0, "the run finished"), no broker may
# have hung (the last has 120 s after the last kill), and every complete checkpoint must verify
# (resumed by a one-device program of the same model).  Prints each kill
# and the counts.  Not a ctest test.
# usage: bench/bench_broker_restarts.sh [BUILD_DIR] [KILLS]
set -uo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
kills=${2:-10}
fusionc="$build/fusionc"
work=$(mktemp -d)
trap 'pkill -9 -f "$work/out/" 2>/dev/null; [ -n "${KEEP:-}" ] || rm -rf "$work"' EXIT
[ -n "${KEEP:-}" ] && echo "work: $work"
cat /usr/share/common-licenses/* > "$work/corpus.txt"
sed -E 's/(peak-[a-z0-9]+)="[0-9.]+GFLOPS"/\1="2GFLOPS"/g' tests/clusters/local-4-standby.xml >"$work/cluster.xml"
model=(--set vocab=256 --set ctx=32 --set layers=2 --set dim=48 --set heads=4 --set batch=8 --set seq=32)
"$fusionc" compile models/gpt2.xml "$work/cluster.xml" -o "$work/out" "${model[@]}" --compress none --stages 2 \
  --replicas 2 --micro-batches 2 >/dev/null || { echo "compile failed" >&2; exit 1; }
"$fusionc" compile models/gpt2.xml clusters/local-1.xml -o "$work/one" "${model[@]}" >/dev/null || exit 1
port=$((29600 + $$ % 300))
broker() {   # one broker on OUT, its output appended to broker.out
  "$fusionc" broker "$work/out" --port $port --port-base $((50000 + ($$ % 20) * 700)) --save-every 10 \
    --keep 1000 --peer-timeout 3 --data "$work/corpus.txt" --steps 1000 --seed 7 --emulate-devices >>"$work/broker.out" 2>&1 &
  pid=$!
}
last_step() { awk '/^step /{split($2, s, "/"); n = s[1]} END {print n + 0}' "$work/broker.out"; }
broker
for ((k = 1; k <= kills; k++)); do
  sleep "$((RANDOM % 3 + 1)).$((RANDOM % 10))"
  kill -0 "$pid" 2>/dev/null || break
  if [ "$k" = 4 ] || [ "$k" = 7 ]; then   # a device lost, and the broker killed while it recovers
    d=$([ "$k" = 4 ] && echo cpu-a1 || echo cpu-b0)
    lost_before=$(grep -c "lost $d" "$work/broker.out")
    victim=$(sed -n "s/.*started \($d\) (pid \([0-9]*\)).*/\2/p" "$work/broker.out" | tail -1)
    kill -9 "$victim" 2>/dev/null
    for _ in $(seq 1 400); do [ "$(grep -c "lost $d" "$work/broker.out")" -gt "$lost_before" ] && break; sleep 0.02; done
    [ "$k" = 7 ] && sleep 1   # kill 4: as the loss is declared; kill 7: as the devices start again
    echo "kill $k: $d (pid $victim) at step $(last_step), then the broker during the recovery" \
      "($(grep -c 'first step after the recovery' "$work/broker.out") recoveries finished so far)"
  else
    echo "kill $k: the broker at step $(last_step)"
  fi
  kill -9 "$pid"
  wait "$pid" 2>/dev/null
  sleep 0.2
  broker
done
for _ in $(seq 1 1200); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
if kill -0 "$pid" 2>/dev/null; then echo "the last broker hung: still running 120 s after the last kill"; kill -9 "$pid"; fi
wait "$pid"
status=$?
echo "the last broker's exit status: $status"
grep -h 'the run finished\|started again\|had not started\|written while no broker\|failed' "$work/broker.out" | sed 's/^/  /' | tail -30
verified=0 refused=0
for dir in "$work"/out/checkpoints/step-*; do
  [ -f "$dir/MANIFEST" ] || continue
  s=${dir##*-}
  if "$work/one/cpu0/fusion-cpu0" --data "$work/corpus.txt" --steps $((s + 1)) --resume "$dir" >"$work/v.out" 2>&1; then
    verified=$((verified + 1))
  else refused=$((refused + 1)); echo "  $dir does not verify: $(tail -1 "$work/v.out")"; fi
done
echo "complete checkpoints that verify: $verified of $((verified + refused))"
echo "steps printed: $(awk '/^step /{split($2, s, "/"); print s[1]}' "$work/broker.out" | sort -n | uniq | wc -l) distinct of 1000" \
  "($(grep -c '^step ' "$work/broker.out") lines: more when a step was trained again and heard twice), the last $(last_step)"
grep -h 'devices start again\|started now, from\|last complete checkpoint: step' "$work/broker.out" | sed 's/^/  /'
grep -h 'resumed from' "$work"/out/logs/*.log | sort | uniq -c | sed 's/^/  /'
twice=0   # each device's log, over every epoch: a step trained twice shows twice
for log in "$work"/out/logs/cpu-*.log; do
  n=$(awk '/^step /{split($2, s, "/"); print s[1]}' "$log" | sort -n | uniq -d | wc -l)
  echo "  $(basename "$log" .log): $(grep -c '^step ' "$log") steps trained, $n of them twice"
  twice=$((twice + n))
done
[ "$status" = 0 ] && grep -q 'the run finished' "$work/broker.out" && [ "$refused" = 0 ] && [ "$twice" = 0 ]
