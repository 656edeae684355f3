# Elastic runs across hosts (fusionc launch --elastic: the broker runs on
# the controller, each device on its host over ssh; broker/broker_remote.c).
# Hosts are network namespaces of this machine with Debian's sshd
# (tests/netns_hosts.sh).  A small GPT as 2 stages: cpu-a0 on h0, cpu-a1
# on h1, and standby cpu-s0 on h2; 60 steps, a checkpoint every 10,
# devices paced to 2 GFLOPS (--emulate-devices), peer timeout 3 s.
#   deploy       the standby's host gets both bundles (it may stand in for
#                either), each checked like a device's;
#   replacement  cpu-a1 SIGKILLed on its host after step 25: the broker
#                collected steps 10 and 20's parts from the hosts (whole:
#                MANIFEST on the controller, each part's XXH3 checked),
#                sees cpu-a1's ssh end, puts the standby in its place on h2,
#                copies the checkpoint to the hosts, and the run finishes
#                (exit 0); the losses after the recovery equal the same
#                bundles' run on this machine resumed from the collected
#                checkpoint (bitwise, as printed);
#   re-plan      the same cluster without the standby: the broker plans
#                again on cpu-a0 alone (OUT/epoch-2), deploys that bundle
#                to h0, and the run finishes on one device.
# Needs root, iproute2, openssh-server and openssh-client (scripts/install-deps.sh).
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/netns_hosts.sh"
no_leak_scan_in_threaded_programs
trap 'hosts_down; rm -rf "$work"' EXIT
hosts_up 3 || { fail "could not make the namespace hosts"; finish; exit 1; }

cluster_file() {   # cluster_file FILE WITH_STANDBY
  local spare=""
  [ "$2" = 1 ] && spare="<host name=\"h2\" address=\"$(host_ip 2)\" path=\"$work/hosts/h2/fusion\">
      <device name=\"cpu-s0\" kind=\"cpu\" peak-fp32=\"2GFLOPS\" memory=\"4GiB\" memory-bandwidth=\"10GB/s\" threads=\"1\" standby=\"true\"/>
    </host>"
  cat >"$1" <<EOF
<?xml version="1.0" encoding="UTF-8"?>
<cluster name="netns-elastic">
  <region name="site" bandwidth="1Gbps" latency="1ms">
    <host name="h0" address="$(host_ip 0)" path="$work/hosts/h0/fusion">
      <device name="cpu-a0" kind="cpu" peak-fp32="2GFLOPS" memory="4GiB" memory-bandwidth="10GB/s" threads="1"/>
    </host>
    <host name="h1" address="$(host_ip 1)" path="$work/hosts/h1/fusion">
      <device name="cpu-a1" kind="cpu" peak-fp32="2GFLOPS" memory="4GiB" memory-bandwidth="10GB/s" threads="1"/>
    </host>
    $spare
  </region>
</cluster>
EOF
}
cat /usr/share/common-licenses/* >"$work/corpus.txt"
model=(--set vocab=256 --set ctx=32 --set layers=2 --set dim=48 --set heads=4 --set batch=8 --set seq=32
       --set lr=3e-3 --set warmup=5)
args=(--data "$work/corpus.txt" --steps 60 --seed 7 --emulate-devices)
claim_ports   # tests/lib.sh: this test's own ports
port=$((ports + 9900))
base=$ports
losses() { awk '/^step /{split($2, s, "/"); print s[1], $4}' "$1"; }

compile() {   # compile NAME WITH_STANDBY
  cluster_file "$work/$1.xml" "$2"
  "$FUSIONC" compile models/gpt2.xml "$work/$1.xml" -o "$work/$1" "${model[@]}" --compress none --stages 2 \
    --replicas 1 >"$work/$1.compile" 2>&1 && pass || fail "$1 compile: $(cat "$work/$1.compile")"
  on_controller "$FUSIONC" deploy "$work/$1" --ssh-config "$ssh_config" >"$work/$1.deploy" 2>&1 && pass \
    || fail "$1 deploy: $(cat "$work/$1.deploy")"
}

# elastic NAME: launch --elastic from the controller; cpu-a1 SIGKILLed on
# its host once step 25 is printed.  The broker's output in NAME.out.
elastic() {
  local name=$1 out="$work/$1.out" pidfile="$work/hosts/h1/fusion/cpu-a1/fusion.pid" victim=""
  on_controller "$FUSIONC" launch "$work/$name" --elastic --ssh-config "$ssh_config" --port $port --port-base $base \
    --save-every 10 --keep 10 --peer-timeout 3 "${args[@]}" >"$out" 2>&1 &
  local launcher=$!
  port=$((port + 1)); base=$((base + 1000))
  for _ in $(seq 1 600); do
    grep -qE '^step +(2[5-9]|[3-6][0-9])/' "$out" && break
    sleep 0.05
  done
  victim=$(cat "$pidfile" 2>/dev/null)
  [ -n "$victim" ] && kill -9 "$victim" && pass || fail "$name: cpu-a1 has no pid on h1: $(tail -5 "$out")"
  for _ in $(seq 1 1200); do kill -0 $launcher 2>/dev/null || break; sleep 0.1; done
  kill -0 $launcher 2>/dev/null && { fail "$name: the broker still runs after 120 s"; kill $launcher; }
  wait $launcher
  echo $? >"$work/$name.rc"
}

# The steps the broker printed after its last recovery.
after() { awk '/^broker: .*devices? starts? again/{n = NR} {line[NR] = $0} END {for (i = n + 1; i <= NR; i++) print line[i]}' "$work/$1.out" | losses /dev/stdin; }

# ---- replacement by the standby ----
compile standby 1
for d in cpu-a0 cpu-a1; do
  grep -q "standby cpu-s0 gets $d's bundle" "$work/standby.deploy" && pass || fail "deploy: no $d bundle for the standby"
  (cd "$work/hosts/h2/fusion/$d" && sha256sum -c --quiet --strict SHA256SUMS) >/dev/null 2>&1 && pass \
    || fail "deploy: $d's bundle on the standby's host does not match its checksums"
done
elastic standby
expect_eq "replacement: the broker's exit status" 0 "$(cat "$work/standby.rc")"
grep -q "lost cpu-a1: its ssh connection ended" "$work/standby.out" && pass \
  || fail "replacement: no loss reported: $(grep broker: "$work/standby.out" | tail -8)"
grep -q "standby cpu-s0 takes cpu-a1's place" "$work/standby.out" && pass \
  || fail "replacement: the standby did not take the place: $(grep broker: "$work/standby.out" | tail -8)"
grep -q "the run finished: 2 devices, 1 recovery" "$work/standby.out" && pass || fail "replacement: $(tail -5 "$work/standby.out")"
for s in 10 20; do
  dir="$work/standby/checkpoints/step-$s"
  [ -f "$dir/MANIFEST" ] && [ "$(grep -c '^part ' "$dir/MANIFEST")" = 2 ] && pass \
    || fail "replacement: step $s's checkpoint was not collected whole on the controller: $(ls "$dir" 2>&1)"
done
from=$(sed -n 's/.*the last complete checkpoint: step [0-9]*, \(.*\)$/\1/p' "$work/standby.out" | tail -1)
case "$from" in "$work/standby/checkpoints/step-"*) pass ;; *) fail "replacement: resumed from '${from}', not a collected checkpoint" ;; esac
step=${from##*step-}
grep -q "checkpoint .*step-$step copied to host h2" "$work/standby.out" && pass \
  || fail "replacement: the checkpoint was not copied to the standby's host: $(grep broker: "$work/standby.out" | tail -6)"
[ -f "$work/hosts/h2/fusion/checkpoints/step-$step/MANIFEST" ] && pass || fail "replacement: no MANIFEST on h2"
grep -q "^== broker: epoch 2, cpu-a1" "$work/standby/logs/cpu-a1.log" && pass || fail "replacement: cpu-a1's log has no epoch 2"
secs=$(sed -n 's/.*first step after the recovery: step [0-9]*, \([0-9.]*\) s after.*/\1/p' "$work/standby.out" | head -1)
awk -v s="${secs:-999}" 'BEGIN { exit !(s <= 30) }' && pass || fail "replacement: recovery took ${secs:-?} s (limit 30)"
echo "replacement across hosts: resumed from step $step; the first step after the recovery came ${secs:-?} s after the lost device's last word" >&2
# The reference: the same bundles on this machine, from the collected checkpoint.
rm -rf "$work/ref" && cp -r "$from" "$work/ref"
"$work/standby/launch-local.sh" "${args[@]}" --resume "$work/ref" --port-base $base --peer cpu-a0=127.0.0.1 \
  --peer cpu-a1=127.0.0.1 >"$work/ref.out" 2>&1 && pass || fail "reference run: $(tail -3 "$work/ref.out")"
sed 's/^\[[^]]*\] //' "$work/ref.out" | losses /dev/stdin >"$work/ref.loss"
after standby >"$work/standby.after"
[ "$(wc -l <"$work/standby.after")" -ge 30 ] && pass || fail "replacement: $(wc -l <"$work/standby.after") steps printed after the recovery"
join "$work/standby.after" "$work/ref.loss" | awk '$2 != $3 { bad++ } END { exit bad > 0 || NR == 0 }' && pass \
  || fail "replacement: losses after the recovery differ from the resumed run's: $(join "$work/standby.after" "$work/ref.loss" | head -3)"
sleep 2   # the standby's agent hears "stop" within a second
pgrep -f "fusion-cpu-a[01] .*(--save-every 10|--standby cpu-s0 --broker tcp://198\.18\.)" >/dev/null \
  && fail "devices or the standby's agent still run after the run: $(pgrep -af 'fusion-cpu')" || pass

# ---- a new plan on the survivor ----
compile replan 0
elastic replan
expect_eq "re-plan: the broker's exit status" 0 "$(cat "$work/replan.rc")"
grep -q "re-planned on 1 device in" "$work/replan.out" && pass || fail "re-plan: $(grep broker: "$work/replan.out" | tail -8)"
grep -q "the run finished: 1 device, 1 recovery" "$work/replan.out" && pass || fail "re-plan: $(tail -5 "$work/replan.out")"
real=$(readlink -f "$work/hosts/h0/fusion/cpu-a0")
cmp -s "$real/fusion-cpu-a0" "$work/replan/epoch-2/cpu-a0/fusion-cpu-a0" && pass \
  || fail "re-plan: h0 does not run epoch 2's bundle of cpu-a0"
[ "$(after replan | wc -l)" -ge 30 ] && pass || fail "re-plan: too few steps after the recovery"

finish
