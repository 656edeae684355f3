# Deploy, launch and stop over ssh, on hosts that are network namespaces of
# this machine, each with its own address and Debian's sshd
# (tests/netns_hosts.sh); fusionc runs in a controller namespace of its own:
#   - a small GPT compiled for 3 hosts (two sites; site B's link shaped by
#     the kernel's tbf to 20 Mbit/s both ways: a slow site, not emulated)
#     deploys by rsync, each bundle checked on its host (sha256sum -c) and
#     linked into place; the deployed program's ldd lists only the C
#     library's files and the bundle's own lib/;
#   - deploying again copies nothing; after one device's bundle changes,
#     only that one is copied, and rsync sends only the changed file;
#   - launch trains 20 steps across the hosts: every loss equal to the
#     same bundles' run on this machine (launch-local.sh); the shaped
#     link's queue carried the traffic and held it back (tbf overlimits);
#   - scp serves when asked (--copier scp), checked the same way;
#   - a host that refuses ssh, a full disk (a 1 MiB tmpfs), a device killed
#     during training, and `fusionc stop`: each exits non-zero naming the
#     device and host and what failed, and leaves nothing half-copied that
#     passes for a bundle, nor a device running.
# Needs root, iproute2, openssh-server, openssh-client and rsync
# (scripts/install-deps.sh); without them it FAILS, naming what is missing.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/netns_hosts.sh"
no_leak_scan_in_threaded_programs

for tool in rsync scp sha256sum; do
  command -v "$tool" >/dev/null || { fail "$tool is missing (scripts/install-deps.sh installs it)"; finish; exit 1; }
done
# The full disk of the last checks: mounted before the hosts start, since
# `ip netns exec` gives each sshd a copy of the mounts as they are then.
mkdir -p "$work/full"
full_mounted=0
trap '[ $full_mounted = 1 ] && umount "$work/full"; hosts_down; rm -rf "$work"' EXIT
mount -t tmpfs -o size=1m fusion-test-full "$work/full" && full_mounted=1 && pass || fail "cannot mount a small tmpfs"
hosts_up 3 || { fail "could not make the namespace hosts"; finish; exit 1; }

# cluster_file FILE [H1_PATH] [H2_PORT] [H1_ADDRESS]: the three hosts (host 1's path and address, and host
# 2's ssh port, may differ).
cluster_file() {
  cat >"$1" <<EOF
<?xml version="1.0" encoding="UTF-8"?>
<cluster name="netns-3">
  <region name="siteA" bandwidth="1Gbps" latency="1ms">
    <host name="h0" address="$(host_ip 0)" user="root" path="$work/hosts/h0/fusion">
      <device name="cpu-a0" kind="cpu" peak-fp32="50GFLOPS" memory="4GiB" memory-bandwidth="10GB/s" threads="1"/>
    </host>
    <host name="h1" address="${4:-$(host_ip 1)}" path="${2:-$work/hosts/h1/fusion}">
      <device name="cpu-a1" kind="cpu" peak-fp32="50GFLOPS" memory="4GiB" memory-bandwidth="10GB/s" threads="1"/>
    </host>
  </region>
  <region name="siteB" bandwidth="1Gbps" latency="1ms">
    <host name="h2" address="$(host_ip 2)" port="${3:-22}" path="$work/hosts/h2/fusion">
      <device name="cpu-b0" kind="cpu" peak-fp32="50GFLOPS" memory="4GiB" memory-bandwidth="10GB/s" threads="1"/>
    </host>
  </region>
  <link from="siteA" to="siteB" bandwidth="20Mbps" latency="40ms"/>
</cluster>
EOF
}
cluster_file "$work/cluster.xml"
devices=(cpu-a0 cpu-a1 cpu-b0)
out="$work/out"
model=(--set vocab=256 --set ctx=16 --set layers=3 --set dim=32 --set heads=2 --set batch=4 --set seq=16)
"$FUSIONC" compile models/gpt2.xml "$work/cluster.xml" -o "$out" "${model[@]}" --scheduler uniform --compress none \
  >"$work/log" 2>&1 && pass || fail "compile for the namespace hosts: $(tail -c 800 "$work/log")"
cat /usr/share/common-licenses/* >"$work/corpus.txt"
deploy() { on_controller "$FUSIONC" deploy "$out" --ssh-config "$ssh_config" "$@"; }

# --- deploy, twice, then after one bundle changed ---------------------------------
deploy >"$work/deploy1.out" 2>"$work/deploy1.err" && pass || fail "first deploy: $(cat "$work/deploy1.err")"
expect_eq "first deploy: devices copied by rsync" 3 "$(grep -c 'copied by rsync.*checksums verified' "$work/deploy1.out")"
for i in 0 1 2; do
  d=${devices[$i]} dir="$work/hosts/h$i/fusion/${devices[$i]}"
  [ -L "$dir" ] && pass || fail "$d: $dir is not the link to its version"
  (cd "$dir" && sha256sum -c --quiet --strict SHA256SUMS) >"$work/sum.err" 2>&1 && pass \
    || fail "$d: the deployed bundle does not match its checksums: $(head -3 "$work/sum.err")"
  cmp -s "$out/$d/fusion-$d" "$dir/fusion-$d" && pass || fail "$d: the deployed program differs from OUT's"
  expect_eq "$d: the deployed run secret's mode" 600 "$(stat -L -c %a "$dir/run.key")"
done
libc_own='^(libc\.so|libm\.so|libpthread\.so|libdl\.so|librt\.so|libanl\.so|libresolv\.so|libutil\.so|libmvec\.so|ld-linux|linux-vdso)'
real=$(readlink -f "$work/hosts/h0/fusion/cpu-a0")
outside=$(ldd "$real/fusion-cpu-a0" | awk -v lib="$real/lib/" -v own="$libc_own" '
  $2 == "=>" && $1 !~ own && index($3, lib) != 1 { print $1 " => " $3 }')
expect_eq "deployed cpu-a0: libraries from outside the C library and its own lib/" "" "$outside"

deploy >"$work/deploy2.out" 2>"$work/deploy2.err" && pass || fail "second deploy: $(cat "$work/deploy2.err")"
expect_eq "second deploy: devices unchanged, not copied" 3 "$(grep -c 'unchanged.*not copied' "$work/deploy2.out")"
expect_eq "second deploy: devices copied" 0 "$(grep -c 'copied by' "$work/deploy2.out")"

printf 'a data shard that only cpu-a1 reads\n' >"$out/cpu-a1/shard.txt"
deploy >"$work/deploy3.out" 2>"$work/deploy3.err" && pass || fail "third deploy: $(cat "$work/deploy3.err")"
expect_eq "after cpu-a1 changed: the devices copied" "cpu-a1" \
  "$(grep 'copied by' "$work/deploy3.out" | sed 's/^deploy: device \([^ ]*\) .*/\1/' | paste -sd' ')"
expect_eq "after cpu-a1 changed: the devices unchanged" 2 "$(grep -c 'unchanged.*not copied' "$work/deploy3.out")"
sent=$(sed -n 's/.*device cpu-a1 .* \([0-9.]*\) MB sent.*/\1/p' "$work/deploy3.out")
awk -v s="${sent:-99}" 'BEGIN { exit !(s < 0.01) }' && pass \
  || fail "after cpu-a1 changed: rsync sent ${sent:-?} MB (expected only the new file: the rest hard-linked from the version before)"
expect_eq "cpu-a1's versions kept on its host (the new one and the one before)" 2 \
  "$(ls -d "$work"/hosts/h1/fusion/.fusion-bundles/cpu-a1-* | wc -l)"
echo "deploy: $(grep -c . "$work/deploy1.out") lines first, then: $(tail -1 "$work/deploy2.out"); then: $(tail -1 "$work/deploy3.out") (cpu-a1 sent ${sent} MB)" >&2

# --- train across the hosts, site B behind a 20 Mbit/s tbf --------------------------
shape_host 2 20mbit && pass || fail "tc tbf on host 2's link"
on_controller "$FUSIONC" launch "$out" --ssh-config "$ssh_config" --data "$work/corpus.txt" --steps 20 --seed 3 \
  --trace "$work/hosts-trace.json" --log "$work/back/train.jsonl" --save "$work/back/ck" --save-every 10 \
  >"$work/launch.out" 2>"$work/launch.err" && pass || fail "launch: $(cat "$work/launch.err")"
# --log and --save name this machine's files: each host's log and its part of every checkpoint come back.
for d in "${devices[@]}"; do
  expect_eq "$d's log brought back: its steps" 20 "$(grep -c '"step"' "$work/back/train.$d.jsonl" 2>/dev/null)"
  grep -q "^launch: $d's log is in $work/back/train.$d.jsonl$" "$work/launch.out" && pass || fail "$d's log not named"
done
for k in 10 20; do
  [ -s "$work/back/ck/step-$k/MANIFEST" ] && pass || fail "no step-$k/MANIFEST brought back: $(ls -R "$work/back/ck" | head)"
  expect_eq "step $k's parts brought back" 3 "$(ls "$work/back/ck/step-$k/" | grep -c '\.safetensors$')"
done
grep -q "^launch: the checkpoints of 3 devices are in $work/back/ck" "$work/launch.out" && pass \
  || fail "the checkpoints' place not named: $(tail -5 "$work/launch.out")"
[ -s "$work/hosts/h2/fusion/checkpoints/ck/step-20/MANIFEST" ] && pass \
  || fail "host h2 does not keep its own checkpoints in PATH/checkpoints/ck"
# --trace: each host's timeline comes back, merged: one JSON file with all three devices, messages matched.
grep -q "the timeline of 3 devices is in $work/hosts-trace.json" "$work/launch.out" && pass || fail "no trace line: $(tail -3 "$work/launch.out")"
/usr/bin/python3 - "$work/hosts-trace.json" <<'PYEOF' && pass || fail "the gathered trace"
import json, sys
events = json.load(open(sys.argv[1]))
pids = {e["pid"] for e in events if e["ph"] == "X"}
sends = {e["id"] for e in events if e["ph"] == "s"}
recvs = {e["id"] for e in events if e["ph"] == "f"}
print(f"  trace over ssh: {len(events)} events from {len(pids)} devices, {len(sends)} messages", file=sys.stderr)
sys.exit(not (len(pids) == 3 and sends and sends == recvs))
PYEOF
grep -q "training completed on 3 devices" "$work/launch.out" && pass || fail "launch did not say it completed: $(tail -3 "$work/launch.out")"
losses() { sed 's/^\[[^]]*\] //' "$1" | awk '/^step /{print $4}'; }
losses "$work/launch.out" >"$work/losses.hosts"
expect_eq "losses printed by launch" 20 "$(wc -l <"$work/losses.hosts")"
for d in "${devices[@]}"; do
  [ -s "$out/logs/$d.log" ] && pass || fail "no log gathered for $d"
done
overlimits=$(ip netns exec "${ns}sw" tc -s qdisc show dev p2 | sed -n 's/.*overlimits \([0-9]*\).*/\1/p')
[ "${overlimits:-0}" -gt 0 ] && pass || fail "the tbf on site B's link never held a packet back (overlimits ${overlimits:-?})"
echo "tbf on site B (20 Mbit/s): $(ip netns exec "${ns}sw" tc -s qdisc show dev p2 | sed -n 's/^ *\(Sent.*\)/\1/p')" >&2
claim_ports   # tests/lib.sh: this test's own ports
base=$ports
"$out/launch-local.sh" --data "$work/corpus.txt" --steps 20 --seed 3 --port-base "$base" \
  --peer cpu-a0=127.0.0.1 --peer cpu-a1=127.0.0.1 --peer cpu-b0=127.0.0.1 >"$work/local.out" 2>"$work/local.err" \
  && pass || fail "the same bundles on this machine: $(cat "$work/local.err")"
losses "$work/local.out" >"$work/losses.local"
expect_eq "losses across the namespace hosts against this machine's run" "$(paste -sd' ' "$work/losses.local")" \
  "$(paste -sd' ' "$work/losses.hosts")"
echo "losses, step 1 and 20: $(sed -n '1p;20p' "$work/losses.hosts" | paste -sd' ') (hosts) and $(sed -n '1p;20p' "$work/losses.local" | paste -sd' ') (local)" >&2

# --- a device moved: cpu-a1 now on host 0's address; its peers are told (--peer) -----------
cluster_file "$work/cluster-moved.xml" "$work/hosts/h1/fusion" 22 "$(host_ip 0)"
on_controller "$FUSIONC" launch "$out" --cluster "$work/cluster-moved.xml" --ssh-config "$ssh_config" \
  --data "$work/corpus.txt" --steps 3 --seed 3 >"$work/moved.out" 2>"$work/moved.err" && pass \
  || fail "launch with cpu-a1 moved to host 0: $(cat "$work/moved.err")"
expect_eq "losses with cpu-a1 moved" "$(head -3 "$work/losses.hosts" | paste -sd' ')" \
  "$(losses "$work/moved.out" | paste -sd' ')"

# --- scp, when asked ---------------------------------------------------------------
cluster_file "$work/cluster-scp.xml" "$work/hosts/h1/by-scp"
deploy --cluster "$work/cluster-scp.xml" >"$work/scp.out" 2>"$work/scp.err" && pass || fail "deploy by scp: $(cat "$work/scp.err")"
grep -q "device cpu-a1 .*copied by rsync" "$work/scp.out" && pass || fail "a new path for cpu-a1 should be copied: $(cat "$work/scp.out")"
deploy --cluster "$work/cluster-scp.xml" --copier scp >/dev/null 2>&1   # unchanged everywhere: nothing to copy
rm -rf "$work/hosts/h1/by-scp"
deploy --cluster "$work/cluster-scp.xml" --copier scp >"$work/scp.out" 2>"$work/scp.err" && pass || fail "deploy by scp: $(cat "$work/scp.err")"
grep -q "device cpu-a1 .*copied by scp.*checksums verified" "$work/scp.out" && pass || fail "cpu-a1 not copied by scp: $(cat "$work/scp.out")"
(cd "$work/hosts/h1/by-scp/cpu-a1" && sha256sum -c --quiet --strict SHA256SUMS) >/dev/null 2>&1 && pass \
  || fail "the bundle copied by scp does not match its checksums"

# --- a host that refuses ssh ---------------------------------------------------------
cluster_file "$work/cluster-refuse.xml" "" 2222   # nothing listens on host 2's port 2222
deploy --cluster "$work/cluster-refuse.xml" >"$work/refuse.out" 2>"$work/refuse.err"
expect_eq "deploy to a host that refuses ssh: exit status" 1 "$?"
grep -q "device cpu-b0 on host h2 ($(host_ip 2):2222).*ssh failed.*Connection refused" "$work/refuse.err" && pass \
  || fail "the refusal should name cpu-b0, host h2 and the refused connection: $(cat "$work/refuse.err")"
expect_eq "the other devices still deployed" 2 "$(grep -c 'unchanged' "$work/refuse.out")"
grep -q "fusionc deploy: 1 of 3 devices failed (cpu-b0); deployed: cpu-a0, cpu-a1" "$work/refuse.err" && pass \
  || fail "the summary should name the failed and the deployed devices: $(cat "$work/refuse.err")"
on_controller "$FUSIONC" launch "$out" --cluster "$work/cluster-refuse.xml" --ssh-config "$ssh_config" --grace 5 \
  --data "$work/corpus.txt" --steps 2 --peer-timeout 3 --connect-timeout 5 >"$work/refuse-launch.out" 2>"$work/refuse-launch.err"
expect_eq "launch on a host that refuses ssh: exit status" 1 "$?"
grep -q "device cpu-b0 on host h2 .*Connection refused" "$work/refuse-launch.err" && pass \
  || fail "launch should name cpu-b0 on h2 and the refused connection: $(cat "$work/refuse-launch.err")"

# --- a full disk -----------------------------------------------------------------------
cluster_file "$work/cluster-full.xml" "$work/full/fusion"
deploy --cluster "$work/cluster-full.xml" >"$work/full.out" 2>"$work/full.err"
expect_eq "deploy to a full disk: exit status" 1 "$?"
grep -q "device cpu-a1 on host h1 .*copying the bundle with rsync failed.*No space left on device" "$work/full.err" && pass \
  || fail "the full disk should be named with cpu-a1 and h1: $(cat "$work/full.err")"
left=$(find "$work/full/fusion" -mindepth 1 ! -name .fusion-bundles 2>&1)
expect_eq "what the full disk holds after the failed copy" "" "$left"
echo "messages: $(cat "$work/refuse.err" "$work/full.err" | grep -v 'of 3 devices')" >&2
# Every host refuses: the summary says nothing is deployed, not "the others are".
sed -e 's/<host name="h\([01]\)"/<host name="h\1" port="2222"/' "$work/cluster-refuse.xml" >"$work/cluster-all-refuse.xml"
deploy --cluster "$work/cluster-all-refuse.xml" >/dev/null 2>"$work/all-refuse.err"
expect_eq "deploy where every host refuses: exit status" 1 "$?"
grep -q "fusionc deploy: every device failed (cpu-a0, cpu-a1, cpu-b0): nothing is deployed" "$work/all-refuse.err" && pass \
  || fail "every host refusing: $(cat "$work/all-refuse.err")"

# --- a device killed during training, and stop -------------------------------------------
# Whether a device of this test's still runs (its --data or its folder
# is under $work: other tests' devices, under ctest -j, run --steps 100000 too).
own_devices_run() { pgrep -af "fusion-cpu-(a0|a1|b0) .*--steps 100000" | grep -qF "$work/"; }
on_controller "$FUSIONC" launch "$out" --ssh-config "$ssh_config" --grace 20 --data "$work/corpus.txt" --steps 100000 \
  --peer-timeout 3 >"$work/kill.out" 2>"$work/kill.err" &
launcher=$!
pidfile="$work/hosts/h1/fusion/cpu-a1/fusion.pid"
for _ in $(seq 1 100); do grep -q '^\[cpu-b0\] step ' "$work/kill.out" 2>/dev/null && break; sleep 0.2; done
grep -q '^\[cpu-b0\] step ' "$work/kill.out" && pass || fail "the long run printed no step: $(cat "$work/kill.err")"
kill -9 "$(cat "$pidfile")" 2>/dev/null && pass || fail "no cpu-a1 process to kill (pid file $pidfile)"
for _ in $(seq 1 300); do kill -0 $launcher 2>/dev/null || break; sleep 0.1; done
if kill -0 $launcher 2>/dev/null; then fail "launch still runs 30 s after cpu-a1 was killed"; kill $launcher; fi
wait $launcher
expect_eq "launch after a device was killed: exit status" 1 "$?"
grep -q "device cpu-a1 on host h1 .*(exit 255)" "$work/kill.err" && pass \
  || fail "launch should name the killed cpu-a1 on h1: $(cat "$work/kill.err")"
echo "killed: $(cat "$work/kill.err")" >&2
grep -q "training did not complete" "$work/kill.err" && pass || fail "launch should say training did not complete"
own_devices_run && fail "devices still run after the failed launch: $(pgrep -af 'fusion-cpu')" || pass

on_controller "$FUSIONC" launch "$out" --ssh-config "$ssh_config" --data "$work/corpus.txt" --steps 100000 \
  >"$work/stop-launch.out" 2>"$work/stop-launch.err" &
launcher=$!
for _ in $(seq 1 100); do grep -q '^\[cpu-b0\] step ' "$work/stop-launch.out" 2>/dev/null && break; sleep 0.2; done
on_controller "$FUSIONC" stop "$out" --ssh-config "$ssh_config" >"$work/stop.out" 2>"$work/stop.err" && pass \
  || fail "stop: $(cat "$work/stop.err")"
# The first SIGTERM stops the whole run after one step that every device
# finishes (runtime/main.c), so the devices stop asks later may be gone
# already: one stopped, and all three either stopped or not running.
[ "$(grep -c 'stopped (pid' "$work/stop.out")" -ge 1 ] && pass || fail "stop stopped no device: $(cat "$work/stop.out")"
expect_eq "devices stopped or already gone" 3 "$(grep -c 'stopped (pid\|not running' "$work/stop.out")"
for _ in $(seq 1 300); do kill -0 $launcher 2>/dev/null || break; sleep 0.1; done
if kill -0 $launcher 2>/dev/null; then fail "launch still runs 30 s after stop"; kill $launcher; fi
wait $launcher
expect_eq "launch of stopped devices: exit status" 1 "$?"
own_devices_run && fail "devices still run after stop: $(pgrep -af 'fusion-cpu')" || pass
on_controller "$FUSIONC" stop "$out" --ssh-config "$ssh_config" >"$work/stop2.out" 2>&1
expect_eq "stop again: devices not running" 3 "$(grep -c 'not running' "$work/stop2.out")"

finish
