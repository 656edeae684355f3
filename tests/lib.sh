# lib.sh: shared helpers for the command-line tests (sourced, not run).
# Every failure prints what was expected, what was found, and where, and the
# test exits non-zero at the end if anything failed.
set -u
: "${FUSIONC:?set FUSIONC to the fusionc binary (ctest does)}"
: "${FUSION_SOURCE_DIR:?set FUSION_SOURCE_DIR to the source tree (ctest does)}"
cd "$FUSION_SOURCE_DIR"
failures=0
checks=0
work=$(mktemp -d)
trap 'rm -rf "$work"; release_ports' EXIT

# claim_ports: sets `ports`, the first of 10,000 ports (20000-59999 in four
# ranges) that no other test holds while this one runs.  ctest -j runs tests
# side by side, and two that picked overlapping ports from their PIDs had a
# device accept the other test's peer (its sealed frames refused, the
# handshake timed out).  A range is held by a folder naming the holder's
# PID (mkdir is atomic); one whose holder has died is taken over.  Waits
# up to ten minutes for a free range.
claim_ports() {
  local i k dir pid
  mkdir -p /tmp/fusion-test-ports
  for ((k = 0; k < 1200; k++)); do
    for i in 0 1 2 3; do
      dir=/tmp/fusion-test-ports/$i
      if mkdir "$dir" 2>/dev/null; then
        echo $$ >"$dir/pid"
        ports_dir=$dir
        ports=$((20000 + i * 10000))
        return 0
      fi
      pid=$(cat "$dir/pid" 2>/dev/null || true)
      if [ -n "$pid" ] && ! kill -0 "$pid" 2>/dev/null; then
        rm -rf "$dir"   # its holder died; the next pass takes it
      fi
    done
    sleep 0.5
  done
  echo "FAIL: no free port range in /tmp/fusion-test-ports after ten minutes" >&2
  exit 1
}
ports_dir=
release_ports() { if [ -n "$ports_dir" ]; then rm -rf "$ports_dir"; fi; }

fail() { failures=$((failures + 1)); echo "FAIL: $*" >&2; }

# Device programs run OpenMP and OpenBLAS threads.  In the sanitizer build,
# LeakSanitizer's exit-time scan stops them with ptrace, which under a loaded
# parallel ctest sometimes fails ("LeakSanitizer does not work under
# ptrace") and fails the run; tests that run device programs call this.
# AddressSanitizer and UBSan stay on.
no_leak_scan_in_threaded_programs() { export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0"; }   # the last setting wins
pass() { checks=$((checks + 1)); }

# expect_eq WHAT EXPECTED FOUND
expect_eq() {
  if [ "$2" == "$3" ]; then pass; else checks=$((checks + 1)); fail "$1: expected '$2', found '$3'"; fi
}

# losses_within NAME REFERENCE FOUND [TOL]: the losses in FOUND (one a line)
# equal REFERENCE's step for step within TOL relative (default 1e-5); the
# worst difference is printed either way.  Counts a check.
losses_within() {
  paste "$2" "$3" | awk -v n="$1" -v tol="${4:-1e-5}" '
    { d = $1 - $2; if (d < 0) d = -d; r = d / ($1 < 0 ? -$1 : $1);
      if (r > worst) { worst = r; at = NR; a = $1; b = $2 } }
    END { if (worst > tol) { printf "FAIL: %s: step %d loss %s, one device %s (relative %.2g > %g)\n", n, at, b, a, worst, tol > "/dev/stderr"; exit 1 }
          printf "%s: worst relative loss difference %.2g over %d steps\n", n, worst, NR > "/dev/stderr" }' \
    && pass || fail "$1 losses differ from the one-device run"
}

finish() {
  if [ "$checks" -eq 0 ] && [ "$failures" -eq 0 ]; then echo "FAIL: no checks ran" >&2; exit 1; fi
  echo "$checks checks, $failures failed" >&2
  [ "$failures" -eq 0 ]
}

# build_emulated_cuda_driver LIBDIR KERNELS.cu...: the emulated CUDA driver
# and cuBLAS (tests/emu_driver/emu_driver.cpp) with the kernels of those
# bundles, as LIBDIR/libcuda.so.1 and LIBDIR/libcublas.so (put LIBDIR on
# LD_LIBRARY_PATH; compile the bundles with --cublas system, or their own
# lib/libcublas would be opened first).  0, or 1 with the reason on stderr.
build_emulated_cuda_driver() {
  local lib=$1
  shift
  mkdir -p "$lib"
  python3 tests/emu_driver/gen_kernels.py "$lib/kernels_emu.cpp" "$@" || return 1
  if ! ${CXX:-g++} -std=c++20 -O1 -shared -fPIC -w -I tests/unit -o "$lib/libcuda.so.1" \
       tests/emu_driver/emu_driver.cpp tests/unit/cuda_emu.cpp "$lib/kernels_emu.cpp" 2>"$lib/cxx.err"; then
    echo "building the emulated driver: $(head -c 1500 "$lib/cxx.err")" >&2
    return 1
  fi
  ln -sf libcuda.so.1 "$lib/libcublas.so"
}
