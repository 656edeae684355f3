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
trap 'rm -rf "$work"' EXIT

fail() { failures=$((failures + 1)); echo "FAIL: $*" >&2; }
pass() { checks=$((checks + 1)); }

# expect_eq WHAT EXPECTED FOUND
expect_eq() {
  if [ "$2" == "$3" ]; then pass; else checks=$((checks + 1)); fail "$1: expected '$2', found '$3'"; fi
}

finish() {
  if [ "$checks" -eq 0 ] && [ "$failures" -eq 0 ]; then echo "FAIL: no checks ran" >&2; exit 1; fi
  echo "$checks checks, $failures failed" >&2
  [ "$failures" -eq 0 ]
}
