# fusionc probe over ssh, on hosts that are network namespaces of this
# machine with Debian's sshd (tests/netns_hosts.sh); fusionc runs in a
# controller namespace of its own.  Three hosts in two sites: h0 and h1 in
# siteA (the bridge, not shaped), h2 in siteB behind the kernel's tbf at
# 20 Mbit/s on both directions of its link (and netem's 20 ms each way
# where the kernel has netem):
#   - probe copies fusion-probe and its libraries to each host, measures
#     each CPU device there (as fusionc profile does) and each path;
#   - siteA <-> siteB's bandwidth is within 20% of the shaping's 20 Mbit/s;
#     its latency within 20% of netem's 20 ms (half the round trip) where
#     the kernel has netem, else under a millisecond, as the bridge's is
#     (this project's machines' kernels have tbf, htb and fifo only);
#   - siteA's own path measures far faster than the shaped one;
#   - MEASURED.xml is the cluster file with those figures (it loads, the
#     compile takes it), its comments kept and a note of what was measured;
#   - a host that refuses ssh: exit 1 naming it, no MEASURED.xml.
# Needs root, iproute2, openssh-server and openssh-client
# (scripts/install-deps.sh); without them it FAILS, naming what is missing.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/netns_hosts.sh"
trap 'hosts_down; rm -rf "$work"; release_ports' EXIT
claim_ports
hosts_up 3 || { fail "could not make the namespace hosts"; finish; exit 1; }
delay=0
if on_host 2 tc qdisc add dev eth0 root handle 1: netem delay 20ms 2>/dev/null; then
  delay=0.020
  on_host 2 tc qdisc add dev eth0 parent 1: handle 2: tbf rate 20mbit burst 32kb latency 400ms &&
    ip netns exec "${ns}sw" tc qdisc add dev p2 root handle 1: netem delay 20ms &&
    ip netns exec "${ns}sw" tc qdisc add dev p2 parent 1: handle 2: tbf rate 20mbit burst 32kb latency 400ms &&
    pass || fail "could not shape host 2's link with netem and tbf"
else
  echo "this kernel has no netem: the link is shaped in bandwidth only (tbf)" >&2
  shape_host 2 20mbit && pass || fail "could not shape host 2's link"
fi
mkdir -p "$work/hosts"/h{0,1,2}
cat >"$work/cluster.xml" <<EOF
<?xml version="1.0" encoding="UTF-8"?>
<!-- three hosts: the figures below are guesses, for probe to replace -->
<cluster name="netns-3">
  <region name="siteA" bandwidth="1Gbps" latency="1ms">
    <host name="h0" address="$(host_ip 0)" path="$work/hosts/h0">
      <device name="cpu-a0" kind="cpu" peak-fp32="50GFLOPS" memory="4GiB" memory-bandwidth="10GB/s" threads="1"/>
    </host>
    <host name="h1" address="$(host_ip 1)" path="$work/hosts/h1">
      <device name="cpu-a1" kind="cpu" peak-fp32="50GFLOPS" memory="4GiB" memory-bandwidth="10GB/s" threads="1"/>
    </host>
  </region>
  <region name="siteB" bandwidth="1Gbps" latency="1ms">
    <host name="h2" address="$(host_ip 2)" path="$work/hosts/h2">
      <device name="cpu-b0" kind="cpu" peak-fp32="50GFLOPS" memory="4GiB" memory-bandwidth="10GB/s" threads="1"/>
    </host>
  </region>
  <link from="siteA" to="siteB" bandwidth="100Mbps" latency="5ms"/>
</cluster>
EOF
on_controller "$FUSIONC" probe "$work/cluster.xml" -o "$work/measured.xml" --ssh-config "$ssh_config" --seconds 1 \
  --port "$((ports + 9900))" >"$work/probe.out" 2>&1 && pass || fail "probe: $(cat "$work/probe.out")"
cat "$work/probe.out" >&2
for h in h0 h1 h2; do
  [ -x "$work/hosts/$h/.fusion-probe/fusion-probe" ] && [ -d "$work/hosts/$h/.fusion-probe/lib" ] && pass ||
    fail "$h has no fusion-probe bundle"
done
"$FUSIONC" check "$work/measured.xml" >"$work/check.out" 2>&1 && pass || fail "measured.xml: $(cat "$work/check.out")"
# figure TAG NAME ATTR: attribute ATTR of the TAG element named NAME (a link: from NAME), in bytes/s or seconds
figure() {
  /usr/bin/python3 -c '
import re, sys, xml.etree.ElementTree as ET
units = {"bps": 1/8, "Kbps": 1e3/8, "Mbps": 1e6/8, "Gbps": 1e9/8, "Tbps": 1e12/8,
         "ns": 1e-9, "us": 1e-6, "ms": 1e-3, "s": 1}
file, tag, name, attr = sys.argv[1:]
for e in ET.parse(file).getroot().iter(tag):
    if name in (e.get("name"), e.get("from")):
        m = re.fullmatch(r"([0-9.e+-]+)([A-Za-z]+)", e.get(attr))
        print(float(m.group(1)) * units[m.group(2)])
        break' "$work/measured.xml" "$@"
}
# within WHAT FOUND LO HI: LO <= FOUND <= HI
within() {
  awk -v f="$2" -v lo="$3" -v hi="$4" 'BEGIN { exit !(f != "" && f >= lo && f <= hi) }' && pass ||
    fail "$1: found '$2', expected within [$3, $4]"
}
within "siteA <-> siteB bandwidth (bytes/s; shaped to 2.5e6)" "$(figure link siteA bandwidth)" 2000000 3000000
if [ "$delay" != 0 ]; then
  within "siteA <-> siteB latency (s; shaped to 0.020)" "$(figure link siteA latency)" 0.016 0.024
else
  within "siteA <-> siteB latency (s; not shaped)" "$(figure link siteA latency)" 0.000001 0.001
fi
within "siteA's own path (bytes/s): far faster than the shaped one" "$(figure region siteA bandwidth)" 25000000 1e12
within "siteA's own latency (s)" "$(figure region siteA latency)" 0.000001 0.001
grep -q '<!-- three hosts: the figures below are guesses' "$work/measured.xml" && pass || fail "the file's comment was lost"
grep -q 'measured by fusionc probe from .*3 CPU devices (0 kept as declared), 2 paths, 1 s each' "$work/measured.xml" && pass ||
  fail "no note of what was measured: $(head -3 "$work/measured.xml")"
grep -q 'peak-fp32="50GFLOPS"' "$work/measured.xml" && fail "a declared peak was left: $(grep device "$work/measured.xml")" ||
  pass
"$FUSIONC" compile models/mlp.xml "$work/measured.xml" -o "$work/out" >"$work/compile.out" 2>&1 && pass ||
  fail "the measured cluster does not compile: $(tail -3 "$work/compile.out")"

# A host that refuses ssh: named, nothing written.
host_sshd_stop 1
rc=0
on_controller "$FUSIONC" probe "$work/cluster.xml" -o "$work/again.xml" --ssh-config "$ssh_config" --seconds 0.5 \
  --connect-timeout 3 >"$work/refused.out" 2>&1 || rc=$?
expect_eq "probe with a host down: exit" 1 "$rc"
grep -q "host h1 ($(host_ip 1):22): cannot copy fusion-probe there" "$work/refused.out" && pass ||
  fail "the refusing host is not named: $(cat "$work/refused.out")"
[ ! -e "$work/again.xml" ] && pass || fail "a MEASURED.xml was written after a failure"
rc=0
"$FUSIONC" probe "$work/cluster.xml" >"$work/usage.out" 2>&1 || rc=$?
expect_eq "probe without -o: exit" 2 "$rc"
finish
