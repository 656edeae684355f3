#!/usr/bin/env bash
# bench_recovery: how long an elastic run (fusionc broker) takes to recover
# from a lost device, over 5 kills in one run.  clusters/local-4.xml with
# five standbys added to its sites, devices declared at 2 GFLOPS and paced
# to it (--emulate-devices), a small GPT as 2 stages x 2 replicas, a
# checkpoint every 20 steps, peer timeout 3 s: every 60 steps or so, 10
# steps past a checkpoint, one device (in turn cpu-a1, cpu-b0, cpu-a0,
# cpu-b1, cpu-a1) is SIGKILLed; a standby takes its place and every device
# resumes from the survivors' live state of the last step they finished
# (their replicas cover every stage), or else the last complete checkpoint.
# Prints each recovery's time (the lost device's last word to the first
# step after it: the broker's own measure) against the peer timeout (the
# part of it that is waiting to be sure the device is gone), the finished
# steps trained again, and the mean and the worst.  About two minutes on
# two cores.  Not a ctest test.
# usage: bench/bench_recovery.sh [BUILD_DIR]
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
fusionc="$build/fusionc"
work=$(mktemp -d)
trap 'kill %1 2>/dev/null; rm -rf "$work"' EXIT
cat /usr/share/common-licenses/* > "$work/corpus.txt"
timeout=3
/usr/bin/python3 - "$work/cluster.xml" <<'EOF'
import re, sys
s = open('clusters/local-4.xml').read()
s = re.sub(r'(peak-[a-z0-9]+)="[0-9.]+GFLOPS"', r'\1="2GFLOPS"', s)
spare = '''    <host name="s{k}" address="127.0.0.1">
      <device name="cpu-s{k}" kind="cpu" peak-fp32="2GFLOPS" peak-bf16="2GFLOPS" peak-fp16="2GFLOPS" memory="4GiB" memory-bandwidth="10GB/s" threads="1" standby="true"/>
    </host>
'''
for k in range(5):
    at = s.index('  </region>') if k % 2 == 0 else s.rindex('  </region>')
    s = s[:at] + spare.format(k=k) + s[at:]
open(sys.argv[1], 'w').write(s)
EOF
"$fusionc" compile models/gpt2.xml "$work/cluster.xml" -o "$work/out" --set vocab=256 --set ctx=32 --set layers=2 \
  --set dim=48 --set heads=4 --set batch=8 --set seq=32 --compress none --stages 2 --replicas 2 --micro-batches 2 \
  >/dev/null
"$fusionc" broker "$work/out" --port $((29600 + $$ % 300)) --port-base $((50000 + ($$ % 20) * 700)) --save-every 20 \
  --peer-timeout $timeout --data "$work/corpus.txt" --steps 330 --seed 7 --emulate-devices >"$work/broker.out" 2>&1 &
victims=(cpu-a1 cpu-b0 cpu-a0 cpu-b1 cpu-a1)
last_step() { awk '/^step /{split($2, s, "/"); n = s[1]} END {print n + 0}' "$work/broker.out"; }
for k in 0 1 2 3 4; do
  want=$(( (k + 1) * 40 + k * 20 + 10 ))   # mid-way between two checkpoints
  while [ "$(last_step)" -lt "$want" ]; do sleep 0.05; kill -0 %1 2>/dev/null || break; done
  pid=$(sed -n "s/.*started ${victims[$k]} (pid \([0-9]*\)).*/\1/p" "$work/broker.out" | tail -1)
  kill -9 "$pid"
  echo "kill $((k + 1)): ${victims[$k]} (pid $pid) at step $(last_step)"
  while [ "$(grep -c 'first step after the recovery' "$work/broker.out")" -le "$k" ]; do
    sleep 0.1; kill -0 %1 2>/dev/null || break
  done
done
wait %1 || { echo "bench_recovery: the run failed" >&2; tail -5 "$work/broker.out" >&2; exit 1; }
grep "the run finished" "$work/broker.out" | sed 's/^broker: //'
awk -v t=$timeout '
  /lost cpu-/ { lost = 1 }
  /the last complete checkpoint: step/ { match($0, /step [0-9]+/); from = substr($0, RSTART + 5, RLENGTH - 5) }
  /^step / && !lost { split($2, s, "/"); at = s[1] }
  /first step after the recovery/ {
    match($0, /, [0-9.]+ s after/); secs = substr($0, RSTART + 2, RLENGTH - 8) + 0
    n++; sum += secs; if (secs > worst) worst = secs; lost = 0
    again = at - from; if (again < 0) again = 0   # the reporter may have been the one lost, its last step unprinted
    printf "recovery %d: %5.1f s (peer timeout %d s: %.2fx), resumed after step %d, %d finished steps trained again\n",
           n, secs, t, secs / t, from, again }
  END { if (n) printf "recoveries: %d, mean %.1f s, worst %.1f s (limit 30 s)\n", n, sum / n, worst }' "$work/broker.out"
