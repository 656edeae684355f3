# Devices behind NAT (cluster.h: a host inbound="false" takes no
# connection; each of its links is opened from it, and the planner never
# links two such hosts).  Namespace hosts (tests/netns_hosts.sh) with h0
# behind a "NAT": the bridge drops every TCP SYN to it (block_inbound),
# while h0's own connections out work.
#   control   a 2-stage GPT on cpu-n0 (h0) and cpu-a1 (h1) compiled without
#             the attribute: cpu-n0, the lower, listens, cpu-a1 cannot
#             reach it, and the start fails naming the peer;
#   direct    the same with h0 inbound="false": cpu-a1 listens, cpu-n0
#             connects out, and 10 steps give the losses of the same
#             bundles run on one machine (launch-local.sh);
#   provider  a run of one paced device on the controller, under the
#             broker: a provider on h0 offers with only the invite; the
#             broker cannot connect to it, says so, writes its host
#             inbound="false", takes it in, and the run finishes on both;
#   planner   two hosts behind NAT and one not: the plan leaves one of the
#             two idle, saying why; --replicas 3 (a ring through both) is
#             refused, naming the two hosts.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/netns_hosts.sh"
no_leak_scan_in_threaded_programs
trap 'hosts_down; rm -rf "$work"' EXIT

cat /usr/share/common-licenses/* >"$work/corpus.txt"
model=(--set vocab=256 --set ctx=32 --set layers=2 --set dim=48 --set heads=4 --set batch=8 --set seq=32
       --set lr=3e-3 --set warmup=5)
claim_ports
port=$((ports + 9900))
base=$ports
losses() { sed 's/^\[[^]]*\] //' "$1" | awk '/^step /{split($2, s, "/"); print s[1], $4}'; }
device() { echo "<device name=\"$1\" kind=\"cpu\" peak-fp32=\"$2\" memory=\"4GiB\" memory-bandwidth=\"10GB/s\" threads=\"1\"/>"; }

# ---- planner: no hosts needed ----
cat >"$work/nat3.xml" <<EOF
<cluster name="nat3"><region name="lab" bandwidth="1Gbps" latency="1ms">
  <host name="a0" address="127.0.0.1">$(device cpu-a0 1GFLOPS)</host>
  <host name="p1" address="127.0.0.2" inbound="false">$(device cpu-p1 1GFLOPS)</host>
  <host name="p2" address="127.0.0.3" inbound="false">$(device cpu-p2 1GFLOPS)</host>
</region></cluster>
EOF
"$FUSIONC" compile models/gpt2.xml "$work/nat3.xml" -o "$work/nat3" "${model[@]}" --set batch=12 >"$work/nat3.out" 2>&1 \
  && pass || fail "planner: compile: $(cat "$work/nat3.out")"
grep -q "^idle: cpu-p[12]: its host p[12] and cpu-p[12]'s host p[12] both accept no connection" "$work/nat3.out" \
  && pass || fail "planner: no idle device named for the missing path: $(cat "$work/nat3.out")"
"$FUSIONC" compile models/gpt2.xml "$work/nat3.xml" -o "$work/ring" "${model[@]}" --set batch=12 --stages 1 --replicas 3 \
  >"$work/ring.out" 2>&1
expect_eq "planner: a ring through two hosts behind NAT: exit status" 1 $?
grep -q "devices cpu-p1 and cpu-p2 exchange messages in this plan, but neither host accepts a connection (p1 and p2 are inbound=\"false\")" \
  "$work/ring.out" && pass || fail "planner: $(cat "$work/ring.out")"
[ ! -e "$work/ring/cpu-a0" ] && pass || fail "planner: the refused compile left bundles"

hosts_up 2 || { fail "could not make the namespace hosts"; finish; exit 1; }
block_inbound 0 && pass || fail "could not block connections to h0"

# ---- control and direct: two hosts, h0 behind NAT ----
two() {   # two FILE INBOUND0: cpu-n0 on h0, cpu-a1 on h1
  cat >"$1" <<EOF
<cluster name="nat2"><region name="lab" bandwidth="1Gbps" latency="1ms">
  <host name="n0" address="$(host_ip 0)" inbound="$2">$(device cpu-n0 2GFLOPS)</host>
  <host name="a1" address="$(host_ip 1)">$(device cpu-a1 2GFLOPS)</host>
</region></cluster>
EOF
}
run_two() {   # run_two OUT: both programs on their hosts; their outputs OUT/n0.out, a1.out, statuses .rc
  local out=$1 p0 p1
  on_host 0 "$out/cpu-n0/fusion-cpu-n0" --data "$work/corpus.txt" --steps 10 --seed 3 --port-base $base \
    --connect-timeout 4 >"$out/n0.out" 2>&1 &
  p0=$!
  on_host 1 "$out/cpu-a1/fusion-cpu-a1" --data "$work/corpus.txt" --steps 10 --seed 3 --port-base $base \
    --connect-timeout 4 >"$out/a1.out" 2>&1 &
  p1=$!
  wait $p0; echo $? >"$out/n0.rc"
  wait $p1; echo $? >"$out/a1.rc"
  base=$((base + 1000))
}
two "$work/control.xml" true
"$FUSIONC" compile models/gpt2.xml "$work/control.xml" -o "$work/control" "${model[@]}" --stages 2 --replicas 1 \
  >"$work/control.compile" 2>&1 && pass || fail "control: compile: $(cat "$work/control.compile")"
run_two "$work/control"
[ "$(cat "$work/control/a1.rc")" != 0 ] && grep -q "cpu-n0" "$work/control/a1.out" && pass \
  || fail "control: cpu-a1 reached cpu-n0 behind the blocked link (exit $(cat "$work/control/a1.rc")): $(tail -3 "$work/control/a1.out")"

two "$work/direct.xml" false
"$FUSIONC" compile models/gpt2.xml "$work/direct.xml" -o "$work/direct" "${model[@]}" --stages 2 --replicas 1 \
  >"$work/direct.compile" 2>&1 && pass || fail "direct: compile: $(cat "$work/direct.compile")"
run_two "$work/direct"
expect_eq "direct: the exit statuses (cpu-n0 cpu-a1)" "0 0" "$(cat "$work/direct/n0.rc") $(cat "$work/direct/a1.rc")"
"$work/direct/launch-local.sh" --data "$work/corpus.txt" --steps 10 --seed 3 --port-base $base --peer cpu-n0=127.0.0.1 \
  --peer cpu-a1=127.0.0.1 >"$work/direct.ref" 2>&1 && pass || fail "direct: the reference run: $(tail -3 "$work/direct.ref")"
base=$((base + 1000))
losses "$work/direct.ref" >"$work/direct.ref.loss"
reporter=$(grep -l '^step .* loss ' "$work/direct/n0.out" "$work/direct/a1.out" | head -1)
losses "${reporter:-/dev/null}" >"$work/direct.loss"
[ "$(wc -l <"$work/direct.loss")" = 10 ] && cmp -s "$work/direct.loss" "$work/direct.ref.loss" && pass \
  || fail "direct: losses differ from one machine's: $(paste "$work/direct.loss" "$work/direct.ref.loss" | head -3)"

# ---- provider: behind NAT, it joins a run ----
cat >"$work/one.xml" <<EOF
<cluster name="one"><region name="lab" bandwidth="10Gbps" latency="50us">
  <host name="a0" address="198.18.0.100">$(device cpu-a0 1GFLOPS)</host>
</region></cluster>
EOF
"$FUSIONC" compile models/gpt2.xml "$work/one.xml" -o "$work/join" "${model[@]}" >"$work/join.compile" 2>&1 && pass \
  || fail "provider: compile: $(cat "$work/join.compile")"
out="$work/join.out"
on_controller "$FUSIONC" broker "$work/join" --address 198.18.0.100 --port $port --port-base $base --save-every 20 \
  --peer-timeout 3 --data "$work/corpus.txt" --steps 70 --seed 7 --emulate-devices >"$out" 2>&1 &
broker=$!
for _ in $(seq 1 400); do grep -qE '^step +(1[0-9]|[2-7][0-9])/' "$out" && break; sleep 0.05; done
timeout 120 ip netns exec "${ns}h0" "$FUSIONC" provide --invite "$work/join/invite.key" --name prov1 \
  --dir "$work/prov1" --emulate-peak 1GFLOPS --threads 1 --seconds 0.3 >"$work/prov1.out" 2>&1
expect_eq "provider: its exit status" 0 $?
wait $broker
expect_eq "provider: the broker's exit status" 0 $?
for said in "provider prov1 joined with invite 1: a cpu $(uname -m) device at $(host_ip 0)" \
            "it accepts no connection (a connection to it did not open: behind NAT or a firewall)" \
            "prov1 is taken in: the plan with it estimates" \
            "the run finished: 2 devices, 0 recoveries"; do
  grep -qF "$said" "$out" && pass || fail "provider: the broker did not say '$said': $(grep broker: "$out")"
done
grep -q '<host name="prov1" address="'"$(host_ip 0)"'" inbound="false">' "$work/join/providers/cluster.xml" && pass \
  || fail "provider: its host in the run's cluster: $(grep prov1 "$work/join/providers/cluster.xml")"
grep -q "the broker could not connect to it there (behind NAT or a firewall): it opens its links itself" \
  "$work/prov1.out" && pass || fail "provider: its output: $(cat "$work/prov1.out")"
finish
