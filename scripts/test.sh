#!/usr/bin/env bash
# The test command: installs what is missing, then builds and runs every
# test twice: once under AddressSanitizer + UndefinedBehaviorSanitizer with
# clang (which also builds and runs the frontend fuzz target for a bounded
# time), once as the release build users get (gcc).  Exits non-zero if
# anything fails.
set -euo pipefail
cd "$(dirname "$0")/.."
jobs=$(nproc 2>/dev/null || echo 2)

scripts/install-deps.sh

echo "== sanitizer build (clang, ASan + UBSan, fuzz target) =="
CC=clang CXX=clang++ cmake -S . -B build-asan -DCMAKE_BUILD_TYPE=Debug \
  -DFUSION_SANITIZE=ON -DFUSION_FUZZ=ON >/dev/null
cmake --build build-asan -j"$jobs" -- --no-print-directory >/dev/null
ASAN_OPTIONS=detect_leaks=1:abort_on_error=0 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
  ctest --test-dir build-asan --output-on-failure -j"$jobs"

echo "== release build (gcc) =="
cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build build -j"$jobs" -- --no-print-directory >/dev/null
ctest --test-dir build --output-on-failure -j"$jobs"
