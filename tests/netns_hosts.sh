# netns_hosts.sh: several "hosts" on this machine, for the deploy tests
# (sourced after lib.sh, not run).  Each host is a network namespace with
# its own address, running Debian's sshd; a controller namespace runs
# fusionc deploy and launch; a switch namespace joins them with a bridge:
#
#     ${ns}c  198.18.0.100 --veth--+
#     ${ns}h0 198.18.0.1  --veth--+-- bridge in ${ns}sw
#     ${ns}h1 198.18.0.2  --veth--+
#     ...
#
# 198.18.0.0/15 is the range set aside for benchmarking networks (RFC
# 2544); these addresses exist only inside the test's own namespaces, and
# this machine's own network is not touched.  The hosts share this
# machine's files (one mount namespace), so each host's bundle path in the
# cluster file is its own folder under $work/hosts.
#
# Needs root, iproute2 (ip, tc), openssh-server and openssh-client.
#
#   hosts_up N              make N hosts with sshd, and the controller
#   host_ip I               the address of host I
#   on_controller CMD...    run CMD in the controller's namespace
#   on_host I CMD...        run CMD in host I's namespace
#   shape_host I RATE [B]   the kernel's tbf at RATE (e.g. 20mbit) on both
#                           directions of host I's link: a slow site (B: its
#                           bucket, default 32kb; a message that finds it
#                           full passes B bytes at the bridge's speed)
#   block_inbound I         no connection from another host reaches host I
#                           (the bridge drops every TCP SYN to it; its own
#                           connections out work): a host behind NAT
#   host_sshd_stop I        stop host I's sshd (a host that refuses ssh)
#   hosts_down              remove everything (the test's EXIT trap calls it)
#
# ssh options for fusionc: --ssh-config "$ssh_config" (the test's key,
# root, no host key checks: the hosts are made anew each run; the
# sanitizers' options travel to the hosts, as in a sanitizer build's tests).

ns="fz$$"
n_hosts=0
ssh_config="$work/ssh/config"

host_ip() { echo "198.18.0.$(($1 + 1))"; }
on_controller() { ip netns exec "${ns}c" "$@"; }
on_host() { local i=$1; shift; ip netns exec "${ns}h$i" "$@"; }

hosts_down() {
  local i
  for ((i = 0; i < n_hosts; i++)); do
    [ -f "$work/ssh/sshd-$i.pid" ] && kill "$(cat "$work/ssh/sshd-$i.pid")" 2>/dev/null
    ip netns del "${ns}h$i" 2>/dev/null
  done
  ip netns del "${ns}c" 2>/dev/null
  ip netns del "${ns}sw" 2>/dev/null
  n_hosts=0
}

# make_netns_host NAME ADDRESS PORT: a namespace with lo and eth0 joined to the bridge.
make_netns_host() {
  local name=$1 address=$2 port=$3
  ip netns add "$name" || return 1
  ip -n "$name" link set lo up
  ip link add eth0 netns "$name" type veth peer name "$port" netns "${ns}sw" || return 1
  ip -n "${ns}sw" link set "$port" master br0 up
  ip -n "$name" addr add "$address/24" dev eth0
  ip -n "$name" link set eth0 up
}

hosts_up() {
  local count=$1 i
  if [ "$(id -u)" -ne 0 ]; then echo "netns_hosts: needs root (network namespaces, sshd)" >&2; return 1; fi
  for tool in ip tc ssh ssh-keygen /usr/sbin/sshd; do
    command -v "$tool" >/dev/null || { echo "netns_hosts: $tool is missing (scripts/install-deps.sh installs it)" >&2; return 1; }
  done
  mkdir -p "$work/ssh" /run/sshd
  ssh-keygen -q -t ed25519 -N '' -f "$work/ssh/id" || return 1
  ssh-keygen -q -t ed25519 -N '' -f "$work/ssh/host_key" || return 1
  cp "$work/ssh/id.pub" "$work/ssh/authorized_keys"
  cat >"$ssh_config" <<EOF
Host *
  User root
  IdentityFile $work/ssh/id
  IdentitiesOnly yes
  StrictHostKeyChecking no
  UserKnownHostsFile /dev/null
  LogLevel ERROR
  SendEnv ASAN_OPTIONS UBSAN_OPTIONS
EOF
  ip netns add "${ns}sw" || return 1
  ip -n "${ns}sw" link add br0 type bridge
  ip -n "${ns}sw" link set br0 up
  make_netns_host "${ns}c" 198.18.0.100 pc || return 1
  for ((i = 0; i < count; i++)); do
    make_netns_host "${ns}h$i" "$(host_ip "$i")" "p$i" || return 1
    n_hosts=$((i + 1))
    cat >"$work/ssh/sshd-$i.conf" <<EOF
Port 22
ListenAddress $(host_ip "$i")
HostKey $work/ssh/host_key
PidFile $work/ssh/sshd-$i.pid
AuthorizedKeysFile $work/ssh/authorized_keys
PermitRootLogin prohibit-password
PasswordAuthentication no
KbdInteractiveAuthentication no
UsePAM no
StrictModes no
Subsystem sftp internal-sftp
AcceptEnv ASAN_OPTIONS UBSAN_OPTIONS
LogLevel ERROR
EOF
    on_host "$i" /usr/sbin/sshd -f "$work/ssh/sshd-$i.conf" -E "$work/ssh/sshd-$i.log" || return 1
  done
  # sshd is up when it answers.
  for ((i = 0; i < count; i++)); do
    local tries=0
    until on_controller ssh -F "$ssh_config" -o ConnectTimeout=2 "$(host_ip "$i")" true 2>/dev/null; do
      tries=$((tries + 1))
      [ $tries -ge 50 ] && { echo "netns_hosts: sshd on host $i does not answer: $(cat "$work/ssh/sshd-$i.log")" >&2; return 1; }
      sleep 0.1
    done
  done
}

shape_host() {
  local i=$1 rate=$2 burst=${3:-32kb}
  on_host "$i" tc qdisc add dev eth0 root tbf rate "$rate" burst "$burst" latency 400ms &&
    ip netns exec "${ns}sw" tc qdisc add dev "p$i" root tbf rate "$rate" burst "$burst" latency 400ms
}

# (These kernels have no netfilter, so no NAT: tc's u32 classifies a SYN
# alone, TCP flags 0x02 at byte 33 of an IPv4 packet without options, into
# a class whose queue holds nothing.  A SYN-ACK, 0x12, passes.)
block_inbound() {
  local sw="ip netns exec ${ns}sw" dev="p$1"
  $sw tc qdisc add dev "$dev" root handle 1: htb default 10 &&
    $sw tc class add dev "$dev" parent 1: classid 1:10 htb rate 10gbit 2>/dev/null &&
    $sw tc class add dev "$dev" parent 1: classid 1:20 htb rate 8kbit 2>/dev/null &&
    $sw tc qdisc add dev "$dev" parent 1:20 handle 20: pfifo limit 0 &&
    $sw tc filter add dev "$dev" parent 1: protocol ip u32 match ip protocol 6 0xff match u8 0x02 0xff at 33 \
      classid 1:20
}

host_sshd_stop() {
  kill "$(cat "$work/ssh/sshd-$1.pid")" 2>/dev/null
  rm -f "$work/ssh/sshd-$1.pid"
}
