# fusionc profile: its comment and <device> line, pasted into a one-device
# cluster file, pass `fusionc check` (cluster.xsd and the unit checks); the
# line states peak-fp32, peak-bf16 and peak-fp16, positive numbers, and the
# comment says how bf16 was measured; --out writes the same two lines
# atomically; bad arguments get one line and exit 2.
. "$(dirname "$0")/lib.sh"
no_leak_scan_in_threaded_programs   # OpenBLAS and OpenMP threads

if "$FUSIONC" profile --seconds 1 >"$work/out" 2>"$work/err"; then pass; else
  fail "fusionc profile --seconds 1: exit $?: $(cat "$work/err")"; fi
expect_eq "lines printed" 2 "$(wc -l <"$work/out")"
sed -n 1p "$work/out" >"$work/comment"
sed -n 2p "$work/out" >"$work/line"
line=$(cat "$work/line")
flops='="[0-9]+\.[0-9](|K|M|G|T|P)FLOPS"'
grep -Eq '^<device name="cpu0" kind="cpu"( arch="[A-Za-z0-9_.-]+")? peak-fp32'"$flops"' peak-bf16'"$flops"' peak-fp16'"$flops"' memory="[0-9]+\.[0-9](B|KiB|MiB|GiB|TiB)" memory-bandwidth="[0-9]+\.[0-9](B|KB|MB|GB|TB)/s" threads="[0-9]+"/>$' \
  "$work/line" && pass || fail "the line's form: '$line'"

# The comment: one XML comment (no "--" inside, which XML refuses), saying
# how peak-bf16 was had: by widening to fp32, with the reason when
# cblas_sbgemm was not used, or by cblas_sbgemm.
comment=$(cat "$work/comment")
grep -Eq '^<!-- fusionc profile: peak-fp32 is cblas_sgemm; peak-bf16 (widens to fp32, runs cblas_sgemm and rounds \((this OpenBLAS has no cblas_sbgemm|cblas_sbgemm: [0-9.]+[KMGTP]?FLOPS)\)|is cblas_sbgemm, rounded \(widening for cblas_sgemm: [0-9.]+[KMGTP]?FLOPS\)); peak-fp16 .* -->$' \
  "$work/comment" && pass || fail "the comment's form: '$comment'"
inner=${comment#<!--}
inner=${inner%-->}
case "$inner" in *--*) fail "two hyphens inside the comment: '$comment'" ;; *) pass ;; esac
# Whether the OpenBLAS fusionc runs with exports cblas_sbgemm, as the comment must say.
blas=$(ldd "$FUSIONC" | sed -n 's/.*libopenblas[^ ]* => \([^ ]*\).*/\1/p' | head -1)
if [ -n "$blas" ] && command -v nm >/dev/null; then
  if nm -D "$blas" | grep -q ' T cblas_sbgemm$'; then
    grep -q "cblas_sbgemm: \|is cblas_sbgemm" "$work/comment" && pass || fail "$blas has cblas_sbgemm, but: '$comment'"
  else
    grep -q "this OpenBLAS has no cblas_sbgemm" "$work/comment" && pass || fail "$blas has no cblas_sbgemm, but: '$comment'"
  fi
fi

# The FLOP/s figures and the bandwidth are positive numbers.
for kind in fp32 bf16 fp16; do
  peak=$(sed -n 's/.* peak-'"$kind"'="\([0-9.]*\)[A-Z]*FLOPS".*/\1/p' "$work/line")
  awk -v p="$peak" 'BEGIN { exit !(p + 0 > 0) }' && pass || fail "peak-$kind '$peak' is not a positive number: '$line'"
done
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
cluster_with "$comment
      $line" "$work/cluster.xml"
if "$FUSIONC" check models/mlp.xml "$work/cluster.xml" >"$work/check" 2>&1; then pass; else
  fail "fusionc check of the pasted line: $(cat "$work/check")"; fi
grep -q "cluster 'profiled': 1 regions, 1 hosts, 1 devices" "$work/check" && pass ||
  fail "check output: $(cat "$work/check")"
# The cluster holds the three peaks as measured.
"$FUSIONC" check -v "$work/cluster.xml" >"$work/check" 2>&1
want=$(sed -n 's/.* peak-fp32="\([^"]*\)" peak-bf16="\([^"]*\)" peak-fp16="\([^"]*\)".*/peak fp32 \1, bf16 \2, fp16 \3/p' "$work/line" |
       sed 's/\([0-9]\)\([KMGTP]\?FLOPS\)/\1 \2/g' | sed -E 's/(\.[0-9]*[1-9])0+ /\1 /g; s/\.0+ / /g')   # 17.0 -> 17, as check -v prints
grep -qF "$want" "$work/check" && pass || fail "check -v should say '$want': $(cat "$work/check")"

# Started without OMP_WAIT_POLICY, it sets it and starts again (the
# conversions' OpenMP threads must not spin against OpenBLAS): same output.
if env -u OMP_WAIT_POLICY "$FUSIONC" profile --seconds 0.2 --threads 1 >"$work/out2" 2>"$work/err"; then pass; else
  fail "profile without OMP_WAIT_POLICY: $(cat "$work/err")"; fi
expect_eq "lines printed without OMP_WAIT_POLICY" 2 "$(wc -l <"$work/out2")"

# --out FILE, --name, --threads: the file holds the two lines and nothing
# else (no temporary left beside it), and they validate too.
if "$FUSIONC" profile --seconds 0.3 --threads 1 --name gpu-less_host.0 --out "$work/dev.xml" >"$work/stdout" 2>"$work/err"
then pass; else fail "profile --out: $(cat "$work/err")"; fi
expect_eq "stdout with --out" "" "$(cat "$work/stdout")"
expect_eq "lines in the --out file" 2 "$(wc -l <"$work/dev.xml")"
sed -n 1p "$work/dev.xml" | grep -Eq '^<!-- fusionc profile: .* -->$' && sed -n 2p "$work/dev.xml" |
  grep -Eq '^<device name="gpu-less_host.0" kind="cpu".* peak-fp32=.* peak-bf16=.* peak-fp16=.* threads="1"/>$' && pass ||
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
