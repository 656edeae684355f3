# Checkpoints against ordinary accidents (runtime/checkpoint_run.h), on a
# 2 x 2 run (lan-4: local-4's four devices on fast links, so both stages
# hold layers) saving every step:
#   kill      a random device SIGKILLed at a random moment, FUSION_KILL_TRIES
#             times (default 3; bench/bench_kill_during_save.sh runs 50): the
#             run stops within the peer timeout, the folder resumes from its
#             newest complete step (or the one before, said so), and the
#             resumed losses are the uninterrupted run's from that step;
#   disk full the folder on a tmpfs too small for the second save: the run
#             stops naming "No space left on device", the first checkpoint
#             is intact and resumes (its litter removed, said so);
#   no part   one device's part damaged in the only step: it says why, and
#             the other three stop, its peers naming it, within the connect
#             timeout (no hang);
#   signals   SIGTERM to launch-local and SIGINT to every device: every device
#             finishes the same step, saves it and exits 143 / 130; resumed,
#             the losses are the uninterrupted run's.
. "$(dirname "$0")/lib.sh"
no_leak_scan_in_threaded_programs

tries=${FUSION_KILL_TRIES:-3}
cat /usr/share/common-licenses/* > "$work/corpus.txt"
sed 's/bandwidth="20Mbps" latency="40ms"/bandwidth="10Gbps" latency="50us"/; s/name="local-4"/name="lan-4"/' \
  clusters/local-4.xml >"$work/lan-4.xml"
model=(--set vocab=256 --set ctx=32 --set layers=2 --set dim=48 --set heads=4 --set batch=8 --set seq=32
       --set lr=3e-3 --set warmup=5)
claim_ports
"$FUSIONC" compile models/gpt2.xml "$work/lan-4.xml" -o "$work/lan" "${model[@]}" --port-base "$ports" \
  --compress none --stages 2 --replicas 2 --micro-batches 2 >"$work/compile.out" 2>&1 && pass \
  || fail "compile: $(cat "$work/compile.out")"
grep -q "2 stages x 2 replicas" "$work/lan/plan.txt" && pass || fail "the plan is not 2 x 2: $(head -1 "$work/lan/plan.txt")"
launch() { "$work/lan/launch-local.sh" --data "$work/corpus.txt" --seed 7 --peer-timeout 1 "$@"; }
losses() { sed 's/^\[[^]]*\] //' "$1" | awk '/^step /{split($2, s, "/"); print s[1], $4}'; }
resumed_step() { sed -n 's/^fusion: resumed from .*step-\([0-9]*\) (step [0-9]*)$/\1/p' "$work/lan/logs/cpu-a0.log" | head -1; }
newest_complete() { ls "$1" | sed -n 's/^step-\([0-9]*\)$/\1/p' | sort -n | while read -r s; do
  [ -f "$1/step-$s/MANIFEST" ] && echo "$s"; done | tail -1; }

launch --steps 400 >"$work/straight.out" 2>&1 && pass || fail "straight run: $(tail -3 "$work/straight.out")"
losses "$work/straight.out" >"$work/straight.losses"

# check_resume NAME DIR: resume DIR (saving into it) for 3 steps past what it holds; the losses
# must be the straight run's from the step it resumed from.
check_resume() {
  local name=$1 dir=$2 newest last from
  newest=$(newest_complete "$dir")
  last=$(ls "$dir" | sed -n 's/^step-\([0-9]*\)$/\1/p' | sort -n | tail -1)
  if ! timeout 60 "$work/lan/launch-local.sh" --data "$work/corpus.txt" --seed 7 --peer-timeout 1 \
       --steps $((last + 3)) --resume "$dir" --save "$dir" >"$work/$name.resumed" 2>&1; then
    fail "$name: the resume failed: $(tail -3 "$work/$name.resumed"; tail -n 2 "$work/lan"/logs/*.log)"
    return
  fi
  from=$(resumed_step)
  if [ "$from" = "$newest" ]; then pass
  elif [ -n "$from" ] && [ "$from" -lt "${newest:-0}" ] && grep -q "does not verify\|resumes from that" "$work/lan"/logs/*.log; then
    pass; echo "$name: resumed from step $from, the newest ($newest) did not verify (said)" >&2
  else fail "$name: resumed from '$from', the newest complete step is '$newest'"; fi
  losses "$work/$name.resumed" >"$work/$name.losses"
  expect_eq "$name: resumed steps" $((last + 3 - ${from:-0})) "$(wc -l <"$work/$name.losses")"
  expect_eq "$name: losses after the resume" "$(awk -v s="${from:-0}" -v e=$((last + 3)) '$1 > s && $1 <= e' "$work/straight.losses")" \
    "$(cat "$work/$name.losses")"
}

# ---- a device SIGKILLed at a random moment of a run that saves every step ----
devices=(cpu-a0 cpu-a1 cpu-b0 cpu-b1)
for ((t = 1; t <= tries; t++)); do
  dir="$work/kill$t"
  launch --steps 390 --save "$dir" --save-every 1 >"$work/kill$t.out" 2>&1 &
  runner=$!
  for _ in $(seq 1 400); do [ -e "$dir/latest" ] && break; sleep 0.01; done
  sleep "0.$(printf '%03d' $((RANDOM % 600)))"
  victim=${devices[$((RANDOM % 4))]}
  pid=$(pgrep -f "$work/lan/$victim/fusion-$victim" | head -1)
  t0=$(date +%s.%N)
  [ -n "$pid" ] && kill -9 "$pid"
  for _ in $(seq 1 200); do kill -0 "$runner" 2>/dev/null || break; sleep 0.1; done
  if kill -0 "$runner" 2>/dev/null; then
    fail "kill $t: the run still runs 20 s after $victim was killed"
    pkill -9 -f "$work/lan/cpu-" ; wait "$runner" 2>/dev/null
    continue
  fi
  wait "$runner"
  rc=$?
  took=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')
  if [ -z "$pid" ]; then   # the run ended before the kill: nothing to test this try
    echo "kill $t: the run finished before the kill" >&2
    continue
  fi
  expect_eq "kill $t ($victim): the run's exit status" 1 "$rc"
  echo "kill $t: $victim killed at step $(newest_complete "$dir"); the others stopped in $took s" >&2
  check_resume "kill$t" "$dir"
done

# ---- a disk that fills during a save ----
launch --steps 1 --save "$work/measure" >/dev/null 2>&1 || fail "measuring a checkpoint"
step_bytes=$(du -sb "$work/measure/step-1" | cut -f1)
size=$((step_bytes * 3 / 2 / 4096 * 4096 + 4096))
mkdir -p "$work/small"
unshare -m bash -c 'mount -t tmpfs -o size="$1" tmpfs "$2" || exit 9
  "$3/launch-local.sh" --data "$4" --seed 7 --peer-timeout 1 --steps 20 --save "$2/ck" --save-every 1 >"$5" 2>&1
  echo $? >"$5.rc"
  cp -a "$2/ck" "$6"' _ "$size" "$work/small" "$work/lan" "$work/corpus.txt" "$work/full.out" "$work/full"
expect_eq "disk full: the run's exit status" 1 "$(cat "$work/full.out.rc" 2>/dev/null)"
grep -q "No space left on device" "$work/lan"/logs/*.log && pass \
  || fail "disk full: no device named the cause: $(tail -n 2 "$work/lan"/logs/*.log)"
expect_eq "disk full: the complete steps left" "1" "$(newest_complete "$work/full")"
check_resume full "$work/full"
grep -q "removed [0-9]* unfinished save" "$work/lan"/logs/*.log && pass \
  || fail "disk full: the litter of step 2 was not removed: $(grep -h fusion: "$work/lan"/logs/*.log | head -4)"

# ---- a device that cannot load its part: it says why, its peers stop naming it ----
mkdir -p "$work/broken"
cp -r "$work/full/step-1" "$work/broken/"
printf 'X' | dd of="$work/broken/step-1/checkpoint-cpu-b1.safetensors" bs=1 seek=3000 conv=notrunc 2>/dev/null
t0=$(date +%s)
# A peer still connecting when cpu-b1 stops waits out its connect timeout (5 s here).
timeout 60 "$work/lan/launch-local.sh" --data "$work/corpus.txt" --seed 7 --peer-timeout 1 --connect-timeout 5 --steps 5 \
  --resume "$work/broken" >"$work/broken.out" 2>&1
expect_eq "a part that does not verify: launch-local's exit status" 1 $?
expect_eq "a part that does not verify: stopped within 20 s" 1 $(( $(date +%s) - t0 < 20 ))
grep -q "step-1 does not verify: .*checkpoint-cpu-b1.safetensors: its XXH3 is" "$work/lan/logs/cpu-b1.log" && pass \
  || fail "cpu-b1 does not say why: $(tail -n 2 "$work/lan/logs/cpu-b1.log")"
expect_eq "devices that stopped with an error" 4 "$(grep -l '^fusion: error: ' "$work/lan"/logs/cpu-*.log | wc -l)"
[ "$(grep -l 'peer cpu-b1 stopped' "$work/lan"/logs/cpu-a1.log "$work/lan"/logs/cpu-b0.log | wc -l)" -ge 1 ] && pass \
  || fail "no peer names cpu-b1: $(tail -qn 1 "$work/lan"/logs/cpu-*.log)"

# ---- SIGTERM to launch-local, SIGINT to every device ----
for sig in TERM INT; do
  dir="$work/sig$sig"
  "$work/lan/launch-local.sh" --data "$work/corpus.txt" --seed 7 --peer-timeout 1 --steps 390 --save "$dir" \
    >"$work/sig$sig.out" 2>&1 &
  runner=$!   # launch-local itself: a function's subshell would take the signal in its place
  for _ in $(seq 1 400); do grep -q '^\[[^]]*\] step  *20/' "$work/sig$sig.out" && break; sleep 0.01; done
  if [ $sig = TERM ]; then kill -TERM "$runner"
  else for d in "${devices[@]}"; do pkill -INT -f "$work/lan/$d/fusion-$d"; done; fi
  wait "$runner"
  rc=$?
  expect_eq "SIG$sig: launch-local's exit status" "$([ $sig = TERM ] && echo 143 || echo 130)" "$rc"
  expect_eq "SIG$sig: devices that stopped after one same step" 4 \
    "$(grep -h "stopped by SIG$sig after step" "$work/lan"/logs/*.log | sed 's/:.*//' | sort | uniq -c | awk '{print $1}')"
  check_resume "sig$sig" "$dir"
done
finish
