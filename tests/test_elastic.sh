# Elastic runs (fusionc broker, broker/broker.h): a small GPT as 2 stages x
# 2 replicas on local-4 with one standby (tests/clusters/local-4-standby.xml),
# 150 steps, a coordinated checkpoint every 20, peer timeout 3 s.
#   replacement  one device SIGKILLed after step 50: the broker puts the
#                standby in its place, every device resumes from the last
#                complete checkpoint; exit 0; steps after it print the losses
#                of a run resumed from that checkpoint without the broker;
#                the recovery's time is printed and under 30 s;
#   re-plan      the same on local-4 without a standby: a new plan on the
#                three survivors (OUT/epoch-2), exit 0, losses within 1e-5
#                of the same resumed run;
#   SIGSTOP      a device stopped past the peer timeout is lost; woken
#                after the new epoch started, the broker refuses it and it
#                exits non-zero saying so, having written nothing into the
#                run's checkpoints; the run finishes;
#   broker       a stranger's unsealed request is dropped and said, not
#                answered; the broker SIGKILLed mid-run and started again on the same
#                OUT: it takes the running devices over from its database,
#                every step is printed once, and the run finishes (exit 0);
#   joining      one device and a standby that registers itself after step
#                20 (fusionc standby, --standby-agents none): at 2 GFLOPS
#                the plan with it is faster by far, so it is taken in at the
#                next complete checkpoint (epoch 2, two devices); at 0.05
#                GFLOPS it is not, and the log says so;
#   mid-save     a device dies half-way through writing its part of step
#                60 (--inject-crash-in-save): step 60 is never whole, the run
#                resumes from step 40's checkpoint and finishes;
#   checkpoints  each part is in its step's folder, its MANIFEST lists it
#                with its size and XXH3; a truncated part, a flipped byte, a
#                part of another step, a part it does not list: refused at
#                load, naming the file.
. "$(dirname "$0")/lib.sh"
no_leak_scan_in_threaded_programs

cat /usr/share/common-licenses/* > "$work/corpus.txt"
model=(--set vocab=256 --set ctx=32 --set layers=2 --set dim=48 --set heads=4 --set batch=8 --set seq=32
       --set lr=3e-3 --set warmup=5)
claim_ports   # tests/lib.sh: this test's own ports
port=$((ports + 9900))
base=$ports
args=(--data "$work/corpus.txt" --steps 150 --seed 7 --emulate-devices)
# Devices declared at 2 GFLOPS and paced to it (--emulate-devices): a step
# takes tens of milliseconds, so that a device can be killed mid-run.
slow() { sed -E 's/(peak-[a-z0-9]+)="[0-9.]+GFLOPS"/\1="2GFLOPS"/g' "$1" >"$work/$2.xml"; }
slow tests/clusters/local-4-standby.xml four-standby
slow clusters/local-4.xml four
losses() { awk '/^step /{split($2, s, "/"); print s[1], $4}' "$1"; }

compile() {   # compile NAME CLUSTER
  "$FUSIONC" compile models/gpt2.xml "$2" -o "$work/$1" "${model[@]}" --compress none --stages 2 --replicas 2 \
    --micro-batches 2 >"$work/$1.compile" 2>&1 && pass || fail "$1 compile: $(cat "$work/$1.compile")"
}

# elastic NAME SIGNAL DEVICE: the broker on NAME's compile, SIGNAL sent to
# DEVICE once step 50 is printed; the broker's output in NAME.out.
elastic() {
  local name=$1 sig=$2 victim=$3 out="$work/$1.out"
  "$FUSIONC" broker "$work/$name" --port $port --port-base $base --save-every 20 --peer-timeout 3 "${args[@]}" \
    >"$out" 2>&1 &
  local broker=$! pid=""
  port=$((port + 1)); base=$((base + 1000))
  for _ in $(seq 1 600); do
    grep -qE '^step +(5[0-9]|[6-9][0-9]|1[0-9][0-9])/' "$out" && break
    sleep 0.05
  done
  pid=$(sed -n "s/.*started $victim (pid \([0-9]*\)).*/\1/p" "$out" | head -1)
  [ -n "$pid" ] && kill -"$sig" "$pid" && pass || fail "$name: no pid for $victim: $(head -5 "$out")"
  echo "$pid" >"$work/$name.victim"
  wait "$broker"
  echo $? >"$work/$name.rc"
}

resumed_reference() {   # resumed_reference NAME DIR: NAME's bundles, launched, from the checkpoint in DIR
  local name=$1 dir=$2
  rm -rf "$work/$name.ref" && cp -r "$dir" "$work/$name.ref"
  "$work/$name/launch-local.sh" "${args[@]}" --resume "$work/$name.ref" --port-base $base >"$work/$name.ref.out" 2>&1 \
    && pass || fail "$name reference run: $(tail -3 "$work/$name.ref.out")"
  base=$((base + 1000))
  sed 's/^\[[^]]*\] //' "$work/$name.ref.out" | losses /dev/stdin >"$work/$name.ref.loss"
}

# after NAME: the steps the broker printed after its last recovery.
after() { awk '/^broker: .*devices? starts? again/{n = NR} {line[NR] = $0} END {for (i = n + 1; i <= NR; i++) print line[i]}' "$work/$1.out" | losses /dev/stdin; }

# ---- replacement by the standby ----
compile standby "$work/four-standby.xml"
elastic standby 9 cpu-a1
expect_eq "replacement: the broker's exit status" 0 "$(cat "$work/standby.rc")"
grep -q "lost cpu-a1: its process was killed (signal 9)" "$work/standby.out" && pass \
  || fail "replacement: no loss reported: $(grep broker: "$work/standby.out")"
grep -q "standby cpu-s0 takes cpu-a1's place" "$work/standby.out" && pass \
  || fail "replacement: the standby did not take the place: $(grep broker: "$work/standby.out")"
grep -q "the run finished: 4 devices, 1 recovery" "$work/standby.out" && pass || fail "replacement: $(tail -3 "$work/standby.out")"
# The broker's step lines are the reporter's own, as a run without a broker prints them.
grep -Eq '^step +[0-9]+/[0-9]+  loss [0-9.]+ +[0-9]+ tok/s +[0-9.]+ ms/step  lr [0-9.e+-]+  gnorm [0-9.e+-]+  eta ' \
  "$work/standby.out" && pass || fail "an elastic step line lacks tok/s, ms, lr, gnorm or eta: $(grep -m1 '^step ' "$work/standby.out")"
secs=$(sed -n 's/.*first step after the recovery: step [0-9]*, \([0-9.]*\) s after.*/\1/p' "$work/standby.out" | head -1)
awk -v s="${secs:-999}" 'BEGIN { exit !(s <= 30) }' && pass || fail "replacement: recovery took ${secs:-?} s (limit 30)"
echo "replacement: the first step after the recovery came ${secs:-?} s after the lost device's last word" >&2
# The checkpoint it resumed from: the survivors' live state of the last
# step they finished (cpu-a1's replica cpu-a0 holds its stage), so no
# finished step is trained again.
from=$(sed -n 's/.*the last complete checkpoint: step [0-9]*, \(.*\)$/\1/p' "$work/standby.out" | tail -1)
[ -n "$from" ] && [ -f "$from/MANIFEST" ] && pass || fail "replacement: no complete checkpoint named"
case "$from" in */live-*) pass ;; *) fail "replacement: resumed from $from, not the survivors' live state" ;; esac
grep -q "covers every stage: a checkpoint with no finished step lost" "$work/standby.out" && pass \
  || fail "replacement: $(grep broker: "$work/standby.out" | tail -6)"
resumed_reference standby "$from"
after standby >"$work/standby.after"
[ "$(wc -l <"$work/standby.after")" -gt 0 ] && pass || fail "replacement: no step printed after the recovery"
join "$work/standby.after" "$work/standby.ref.loss" | awk '$2 != $3 { bad++ } END { exit bad > 0 || NR == 0 }' && pass \
  || fail "replacement: losses after the recovery differ from the resumed run's: $(join "$work/standby.after" "$work/standby.ref.loss" | head -3)"

# ---- a new plan on the survivors ----
compile replan "$work/four.xml"
elastic replan 9 cpu-b1
expect_eq "re-plan: the broker's exit status" 0 "$(cat "$work/replan.rc")"
grep -q "re-planned on 3 devices" "$work/replan.out" && pass || fail "re-plan: $(grep broker: "$work/replan.out")"
grep -q "the run finished: 3 devices, 1 recovery" "$work/replan.out" && pass || fail "re-plan: $(tail -3 "$work/replan.out")"
[ -x "$work/replan/epoch-2/cpu-a0/fusion-cpu-a0" ] && ! [ -d "$work/replan/epoch-2/cpu-b1" ] && pass \
  || fail "re-plan: epoch-2's bundles: $(ls "$work/replan/epoch-2")"
from=$(sed -n 's/.*the last complete checkpoint: step [0-9]*, \(.*\)$/\1/p' "$work/replan.out" | tail -1)
resumed_reference replan "$from"
after replan >"$work/replan.after"
join "$work/replan.after" "$work/replan.ref.loss" | awk '{ d = $2 - $3; if (d < 0) d = -d; if (d / $3 > 1e-5) bad++ }
  END { exit bad > 0 || NR == 0 }' && pass || fail "re-plan: losses after it part from the resumed run's"

# ---- a device stopped past the timeout, then woken ----
compile stopped "$work/four-standby.xml"
elastic stopped STOP cpu-b0 &
waiter=$!
for _ in $(seq 1 400); do grep -Eq "devices? starts? again" "$work/stopped.out" 2>/dev/null && break; sleep 0.05; done
victim=$(cat "$work/stopped.victim" 2>/dev/null)
[ -n "$victim" ] && kill -CONT "$victim"
wait "$waiter"
[ "$(cat "$work/stopped.rc")" = 0 ] && pass \
  || fail "SIGSTOP: the broker's exit status $(cat "$work/stopped.rc"), expected 0: $(tail -8 "$work/stopped.out")"
grep -q "lost cpu-b0" "$work/stopped.out" && pass || fail "SIGSTOP: not lost: $(grep broker: "$work/stopped.out")"
for _ in $(seq 1 100); do kill -0 "$victim" 2>/dev/null || break; sleep 0.1; done
! kill -0 "$victim" 2>/dev/null && pass || { fail "SIGSTOP: the woken device still runs"; kill -9 "$victim"; }
grep -Eq "refused by the broker: .*epoch 1 and the run is at epoch 2|of the run's epoch" "$work/stopped/logs/cpu-b0.log" \
  && pass || fail "SIGSTOP: the woken device does not say it was refused: $(grep -i -m3 'error' "$work/stopped/logs/cpu-b0.log")"
# Woken to lost peers, it must not drop its state into a live-N folder
# the new epoch resumes from (a stray part there fails every later load;
# seen once under a loaded ctest, and in 1 of 13 loaded runs before).
strays=""
for d in "$work"/stopped/checkpoints/live-*/; do
  [ -f "$d/MANIFEST" ] || continue
  for f in "$d"*.safetensors; do grep -q " $(basename "$f") " "$d/MANIFEST" || strays="$strays $f"; done
done
[ -z "$strays" ] && pass || fail "SIGSTOP: parts no MANIFEST lists, written after the run went on without their device:$strays"

# ---- the broker killed and started again ----
compile restart "$work/four-standby.xml"
"$FUSIONC" broker "$work/restart" --port $port --port-base $base --peer-timeout 3 "${args[@]}" >"$work/restart1.out" 2>&1 &
broker=$!
for _ in $(seq 1 600); do grep -qE '^step +(3[0-9]|[4-9][0-9])/' "$work/restart1.out" && break; sleep 0.05; done
# A stranger's request (nanomsg's REQ framing, not sealed): dropped, unanswered, said.
/usr/bin/python3 - "$port" <<'PY'
import socket, struct, sys, time
s = socket.create_connection(("127.0.0.1", int(sys.argv[1])))
s.sendall(b"\x00SP\x00\x00\x30\x00\x00")   # the SP header of a REQ socket (protocol 48)
s.recv(8)
body = struct.pack(">I", 0x80000001) + b"step cpu-a0 1 99 0.5"   # request id, then a plain report
s.sendall(struct.pack(">Q", len(body)) + body)
time.sleep(0.5)
s.close()
PY
for _ in $(seq 1 40); do grep -q "dropped a request that does not open" "$work/restart1.out" && break; sleep 0.05; done
grep -q "dropped a request that does not open" "$work/restart1.out" && pass \
  || fail "the broker did not say it dropped an unsealed request: $(grep broker: "$work/restart1.out" | tail -3)"
! grep -q "^step    99/" "$work/restart1.out" && pass || fail "the broker took the unsealed report of step 99"
kill -9 "$broker"
wait "$broker" 2>/dev/null
sleep 1
"$FUSIONC" broker "$work/restart" --port $port --port-base $base --peer-timeout 3 "${args[@]}" >"$work/restart2.out" 2>&1
expect_eq "a restarted broker: exit status" 0 $?
grep -q "the broker started again: epoch 1" "$work/restart2.out" && pass || fail "restart: $(head -3 "$work/restart2.out")"
grep -q "the run finished: 4 devices, 0 recoveries" "$work/restart2.out" && pass || fail "restart: $(tail -3 "$work/restart2.out")"
cat "$work/restart1.out" "$work/restart2.out" | awk '/^step /{split($2, s, "/"); print s[1]}' | sort -n | uniq >"$work/restart.steps"
expect_eq "steps printed by the two brokers" 150 "$(wc -l <"$work/restart.steps")"
port=$((port + 1)); base=$((base + 1000))

# ---- a device that dies while it saves ----
compile midsave "$work/four-standby.xml"
"$FUSIONC" broker "$work/midsave" --port $port --port-base $base --peer-timeout 3 "${args[@]}" \
  --inject-crash-in-save cpu-a1:60 >"$work/midsave.out" 2>&1
expect_eq "mid-save crash: the broker's exit status" 0 $?
port=$((port + 1)); base=$((base + 1000))
grep -q "cut to half, dying" "$work/midsave/logs/cpu-a1.log" && pass || fail "mid-save: the fault did not fire"
grep -q "lost cpu-a1: its process was killed (signal 9)" "$work/midsave.out" && pass \
  || fail "mid-save: $(grep broker: "$work/midsave.out" | head -12)"
from=$(sed -n 's/.*the last complete checkpoint: step [0-9]*, \(.*\)$/\1/p' "$work/midsave.out" | tail -1)
[ -f "$from/MANIFEST" ] && [ "$from" != "$work/midsave/checkpoints/step-60" ] && pass \
  || fail "mid-save: resumed from '$from' (step 60's checkpoint is not whole)"
expect_eq "mid-save: step 60 called whole before the loss" 0 \
  "$(sed '/lost cpu-a1/q' "$work/midsave.out" | grep -c 'checkpoint of step 60 complete' || true)"
grep -q "the run finished: 4 devices, 1 recovery" "$work/midsave.out" && pass || fail "mid-save: $(tail -2 "$work/midsave.out")"

# ---- a device that joins mid-run ----
joining() {   # joining NAME STANDBY-PEAK
  local name=$1
  cat >"$work/$name.xml" <<EOF
<cluster name="$name">
  <region name="lab" bandwidth="10Gbps" latency="50us">
    <host name="a0" address="127.0.0.1">
      <device name="cpu-a0" kind="cpu" peak-fp32="2GFLOPS" memory="4GiB" memory-bandwidth="10GB/s"/>
    </host>
    <host name="s0" address="127.0.0.1">
      <device name="cpu-s0" kind="cpu" peak-fp32="$2" memory="4GiB" memory-bandwidth="10GB/s" standby="true"/>
    </host>
  </region>
</cluster>
EOF
  "$FUSIONC" compile models/gpt2.xml "$work/$name.xml" -o "$work/$name" "${model[@]}" >/dev/null 2>&1 && pass \
    || fail "$name compile"
  "$FUSIONC" broker "$work/$name" --port $port --port-base $base --peer-timeout 3 --standby-agents none \
    --data "$work/corpus.txt" --steps 100 --seed 7 --emulate-devices >"$work/$name.out" 2>&1 &
  local broker=$!
  for _ in $(seq 1 600); do grep -qE '^step +(2[0-9]|[3-9][0-9])/' "$work/$name.out" && break; sleep 0.05; done
  "$FUSIONC" standby --broker "tcp://127.0.0.1:$port" --device cpu-s0 --key "$work/$name/run.key" \
    >"$work/$name.standby" 2>&1 &
  local agent=$!
  wait "$broker"
  expect_eq "$name: the broker's exit status" 0 $?
  kill "$agent" 2>/dev/null; wait "$agent" 2>/dev/null
  port=$((port + 1)); base=$((base + 1000))
}
joining join 2GFLOPS
grep -q "cpu-s0 registered mid-run" "$work/join.out" && pass || fail "join: $(grep broker: "$work/join.out")"
grep -q "cpu-s0 is taken in: the plan with it estimates" "$work/join.out" && pass || fail "join: $(grep broker: "$work/join.out")"
grep -q "the run finished: 2 devices" "$work/join.out" && pass || fail "join: $(tail -2 "$work/join.out")"
[ -x "$work/join/epoch-2/cpu-s0/fusion-cpu-s0" ] && pass || fail "join: no bundle for cpu-s0 in epoch-2"
joining nojoin 0.05GFLOPS
grep -q "cpu-s0 is not taken in" "$work/nojoin.out" && pass || fail "no join: $(grep broker: "$work/nojoin.out")"
grep -q "the run finished: 1 device," "$work/nojoin.out" && pass || fail "no join: $(tail -2 "$work/nojoin.out")"

# ---- the broker started again on a finished run's OUT ----
# It resumes the run from its newest complete checkpoint up to the new
# --steps; with nothing left to train it refuses; --fresh archives the old
# run first.  Every checkpoint of both runs still verifies afterwards.
again() {   # again NAME OUT-FILE ARGS...: the broker on nojoin's OUT once more
  local out=$2
  shift 2
  "$FUSIONC" broker "$work/nojoin" --port $port --port-base $base --peer-timeout 3 --standby-agents none \
    --data "$work/corpus.txt" --seed 7 "$@" >"$out" 2>&1
  echo $? >"$out.rc"
  port=$((port + 1)); base=$((base + 1000))
}
again nojoin "$work/again.out" --steps 140
expect_eq "broker again: exit status" 0 "$(cat "$work/again.out.rc")"
grep -q "the run in $work/nojoin (finished) goes on: 1 devices from its newest complete checkpoint, step 100" \
  "$work/again.out" && pass || fail "broker again: $(grep broker: "$work/again.out" | head -3)"
expect_eq "broker again: the steps trained" "101 140" "$(losses "$work/again.out" | awk 'NR == 1 {a = $1} END {print a, $1}')"
again nojoin "$work/again2.out" --steps 140
expect_eq "broker again, nothing to train: exit status" 1 "$(cat "$work/again2.out.rc")"
grep -q "newest complete checkpoint is step 140: --steps 140 would train nothing" "$work/again2.out" && pass \
  || fail "broker again, nothing to train: $(grep broker: "$work/again2.out" | head -3)"
again nojoin "$work/fresh.out" --steps 40 --fresh
expect_eq "broker --fresh: exit status" 0 "$(cat "$work/fresh.out.rc")"
grep -q "the earlier run (its broker.db and checkpoints) is archived in $work/nojoin/archive/run-1" "$work/fresh.out" \
  && pass || fail "broker --fresh: $(head -3 "$work/fresh.out")"
verified=0
for step_dir in "$work"/nojoin/archive/run-1/checkpoints/step-* "$work"/nojoin/checkpoints/step-*; do
  s=${step_dir##*-}
  "$work/nojoin/cpu-a0/fusion-cpu-a0" --data "$work/corpus.txt" --steps $((s + 1)) --resume "$step_dir" \
    >"$work/verify.out" 2>&1 && verified=$((verified + 1)) || fail "$step_dir does not verify: $(tail -2 "$work/verify.out")"
done
expect_eq "checkpoints of both runs that verify (--keep 3: 100, 120, 140; 20, 40)" 5 "$verified"

# ---- checkpoint faults (the replacement run's last complete checkpoint) ----
ck="$work/standby/checkpoints/step-140"
grep -q "^part checkpoint-cpu-a0.safetensors [0-9]* [0-9a-f]\{16\}$" "$ck/MANIFEST" && pass || fail "MANIFEST: $(cat "$ck/MANIFEST")"
# Loaded by one device (every part, by name), which needs no peers.
"$FUSIONC" compile models/gpt2.xml clusters/local-1.xml -o "$work/one" "${model[@]}" >/dev/null 2>&1 && pass || fail "one-device compile"
fault() {   # fault WHAT EXPECTED-TEXT: damage a copy's cpu-a0 part with the commands on stdin, resume from it
  local what=$1 text=$2 dir="$work/fault"
  rm -rf "$dir" && cp -r "$ck" "$dir"
  (cd "$dir" && bash)
  "$work/one/cpu0/fusion-cpu0" --data "$work/corpus.txt" --steps 150 --resume "$dir" >"$work/fault.out" 2>&1
  expect_eq "$what: exit status" 1 $?
  grep -q "$text" "$work/fault.out" && pass || fail "$what: expected '$text': $(head -3 "$work/fault.out")"
}
"$work/one/cpu0/fusion-cpu0" --data "$work/corpus.txt" --steps 142 --resume "$ck" >"$work/whole.out" 2>&1 \
  && grep -q "a checkpoint of another compile (4 parts)" "$work/whole.out" && pass \
  || fail "the undamaged checkpoint on one device: $(tail -3 "$work/whole.out")"
fault "a truncated part" "checkpoint-cpu-a0.safetensors: [0-9]* bytes, the manifest says" <<<'truncate -s -100 checkpoint-cpu-a0.safetensors'
fault "a flipped byte" "checkpoint-cpu-a0.safetensors: its XXH3 is" \
  <<<'printf "\x01" | dd of=checkpoint-cpu-a0.safetensors bs=1 seek=2000 conv=notrunc status=none'
fault "another step's part" "checkpoint-cpu-a0.safetensors: its XXH3 is" \
  <<<"cp '$work/standby/checkpoints/step-120/checkpoint-cpu-a0.safetensors' ."
fault "a part the MANIFEST does not list" "not a part of this checkpoint" \
  <<<"cp checkpoint-cpu-a0.safetensors checkpoint-cpu-zz.safetensors"
# ---- bad input: usage errors exit 2, a folder that is no compile exits 1 ----
"$FUSIONC" broker >/dev/null 2>"$work/err"
expect_eq "broker without OUT: exit status" 2 $?
grep -q "expected OUT (a compile's folder) and the devices' --steps N" "$work/err" && pass || fail "$(head -2 "$work/err")"
"$FUSIONC" broker "$work/nothing" --steps 5 --data "$work/corpus.txt" >/dev/null 2>"$work/err"
expect_eq "broker on no compile: exit status" 1 $?
grep -q "nothing/cluster.xml" "$work/err" && pass || fail "$(head -2 "$work/err")"
"$FUSIONC" broker "$work/join" --steps 5 --standby-agents some >/dev/null 2>&1
expect_eq "--standby-agents some: exit status" 2 $?
"$FUSIONC" standby --device cpu-s0 >/dev/null 2>&1
expect_eq "standby without --broker: exit status" 2 $?
"$FUSIONC" launch "$work/join" --elastic --cluster "$work/four.xml" --steps 5 >/dev/null 2>"$work/err"
expect_eq "fusionc launch --elastic --cluster: exit status" 2 $?
grep -q "\-\-cluster is not taken with it" "$work/err" && pass || fail "launch --elastic --cluster: $(cat "$work/err")"
"$FUSIONC" launch "$work/join" --elastic --data "$work/corpus.txt" >/dev/null 2>"$work/err"
expect_eq "fusionc launch --elastic without --steps: exit status" 2 $?
grep -q "expected OUT (a compile's folder) and the devices' --steps N" "$work/err" && pass \
  || fail "launch --elastic without --steps: $(cat "$work/err")"
finish
