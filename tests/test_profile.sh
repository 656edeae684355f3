# fusionc profile: its <device> line, pasted into a one-device cluster file,
# passes `fusionc check` (cluster.xsd and the unit checks); the figures are
# positive numbers; --out writes the same kind of line atomically; bad
# arguments get one line and exit 2.
. "$(dirname "$0")/lib.sh"
no_leak_scan_in_threaded_programs   # OpenBLAS and OpenMP threads

if "$FUSIONC" profile --seconds 1 >"$work/line" 2>"$work/err"; then pass; else
  fail "fusionc profile --seconds 1: exit $?: $(cat "$work/err")"; fi
expect_eq "lines printed" 1 "$(wc -l <"$work/line")"
line=$(cat "$work/line")
grep -Eq '^<device name="cpu0" kind="cpu"( arch="[A-Za-z0-9_.-]+")? peak="[0-9]+\.[0-9](|K|M|G|T|P)FLOPS" memory="[0-9]+\.[0-9](B|KiB|MiB|GiB|TiB)" memory-bandwidth="[0-9]+\.[0-9](B|KB|MB|GB|TB)/s" threads="[0-9]+"/>$' \
  "$work/line" && pass || fail "the line's form: '$line'"

# The FLOP/s figure and the bandwidth are positive numbers.
peak=$(sed -n 's/.* peak="\([0-9.]*\)[A-Z]*FLOPS".*/\1/p' "$work/line")
awk -v p="$peak" 'BEGIN { exit !(p + 0 > 0) }' && pass || fail "peak '$peak' is not a positive number: '$line'"
bw=$(sed -n 's/.* memory-bandwidth="\([0-9.]*\)[A-Z]*B\/s".*/\1/p' "$work/line")
awk -v b="$bw" 'BEGIN { exit !(b + 0 > 0) }' && pass || fail "bandwidth '$bw' is not a positive number: '$line'"
# By default it measures with every core it may use.
expect_eq "default threads" "threads=\"$(env -u OMP_NUM_THREADS -u OMP_THREAD_LIMIT nproc)\"" "$(grep -o 'threads="[0-9]*"' "$work/line")"

# Pasted into a cluster file, it validates, and a model checks beside it.
cluster_with() {   # cluster_with LINE FILE
  cat >"$2" <<EOF
<?xml version="1.0" encoding="UTF-8"?>
<cluster name="profiled">
  <region name="here" bandwidth="10Gbps" latency="50us">
    <host name="h0" address="127.0.0.1">
      $1
    </host>
  </region>
</cluster>
EOF
}
cluster_with "$line" "$work/cluster.xml"
if "$FUSIONC" check models/mlp.xml "$work/cluster.xml" >"$work/check" 2>&1; then pass; else
  fail "fusionc check of the pasted line: $(cat "$work/check")"; fi
grep -q "cluster 'profiled': 1 regions, 1 hosts, 1 devices" "$work/check" && pass ||
  fail "check output: $(cat "$work/check")"

# --out FILE, --name, --threads: the file holds the line and nothing else
# (no temporary left beside it), and it validates too.
if "$FUSIONC" profile --seconds 0.3 --threads 1 --name gpu-less_host.0 --out "$work/dev.xml" >"$work/stdout" 2>"$work/err"
then pass; else fail "profile --out: $(cat "$work/err")"; fi
expect_eq "stdout with --out" "" "$(cat "$work/stdout")"
grep -Eq '^<device name="gpu-less_host.0" kind="cpu".* threads="1"/>$' "$work/dev.xml" && pass ||
  fail "--out file: '$(cat "$work/dev.xml" 2>/dev/null)'"
expect_eq "files beside --out" "dev.xml" "$(cd "$work" && ls | grep -e '^dev\.xml' | tr '\n' ' ' | sed 's/ $//')"
cluster_with "$(cat "$work/dev.xml")" "$work/cluster2.xml"
"$FUSIONC" check "$work/cluster2.xml" >"$work/check" 2>&1 && pass || fail "check of the --out line: $(cat "$work/check")"

# An unwritable --out fails at once (before measuring): exit 1, one line
# naming the file, nothing left behind.
start=$(date +%s%N)
"$FUSIONC" profile --seconds 30 --out "$work/no/such/dir/dev.xml" >/dev/null 2>"$work/err"
expect_eq "unwritable --out exit" 1 $?
took=$((($(date +%s%N) - start) / 1000000))
[ "$took" -lt 10000 ] && pass || fail "unwritable --out took $took ms: it measured first"
expect_eq "stderr lines for an unwritable --out" 1 "$(wc -l <"$work/err")"
grep -q "^$work/no/such/dir/dev.xml:0: error: cannot write: No such file or directory" "$work/err" && pass ||
  fail "unwritable --out: $(cat "$work/err")"

# Bad arguments: one line on stderr, exit 2, nothing on stdout.
bad_args=(
  "--threads 0" "--threads 1025" "--threads two" "--threads=" "--threads"
  "--seconds 0" "--seconds -1" "--seconds nan" "--seconds 1e9" "--seconds"
  "--name 0cpu" "--name a/b" "--name"
  "--out" "--frobnicate" "extra"
)
for args in "${bad_args[@]}"; do
  # shellcheck disable=SC2086
  "$FUSIONC" profile $args >"$work/stdout" 2>"$work/err"
  rc=$?
  expect_eq "exit of 'profile $args'" 2 "$rc"
  expect_eq "stderr lines of 'profile $args'" 1 "$(wc -l <"$work/err")"
  grep -q "^fusionc profile: " "$work/err" && pass || fail "message of 'profile $args': $(cat "$work/err")"
  expect_eq "stdout of 'profile $args'" "" "$(cat "$work/stdout")"
done
"$FUSIONC" profile --name 0cpu 2>&1 | grep -q "expects a cluster device name" && pass || fail "--name 0cpu message"
"$FUSIONC" profile --help | grep -q "usage: fusionc profile" && pass || fail "profile --help"
"$FUSIONC" --help | grep -q "^  profile " && pass || fail "fusionc --help does not list profile"
finish
