#!/usr/bin/env bash
# bench_kill_during_save: issue 28's "kill during save" figure.  A small GPT
# as 2 x 2 on lan-4 (local-4's four devices on fast links) saves a
# checkpoint every step; a random device is SIGKILLed at a random moment
# (0 to 0.6 s after the first checkpoint), TRIES times (default 50).  Each
# time the run must stop within the peer timeout (1 s), the folder must
# resume from its newest complete step (or the one before, said so), and
# the resumed losses must equal an uninterrupted run's from that step: it
# is tests/test_checkpoint_faults.sh with FUSION_KILL_TRIES=TRIES (that
# test runs 3), whose checks this prints, with each try's line and the
# time the survivors took to stop against the 1 s peer timeout.  About
# 3.5 s a try on two cores.  Not a ctest test.
# usage: bench/bench_kill_during_save.sh [BUILD_DIR] [TRIES]
set -uo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
tries=${2:-50}
out=$(mktemp)
trap 'rm -f "$out"' EXIT
FUSIONC="$build/fusionc" FUSION_SOURCE_DIR="$PWD" FUSION_KILL_TRIES=$tries bash tests/test_checkpoint_faults.sh \
  >"$out" 2>&1
status=$?
grep -E '^(kill [0-9]+:|FAIL)' "$out"
grep -E '^kill [0-9]+: .* killed' "$out" | sed 's/.*stopped in \([0-9.]*\) s/\1/' |
  awk -v n="$tries" '{ s += $1; if ($1 > w) w = $1; k++ }
    END { printf "kills: %d of %d tries (the rest finished first)\n", k, n
          printf "survivors stopped after the kill: mean %.2f s, worst %.2f s (anchor: the 1 s peer timeout; ratio %.2f)\n", s / k, w, s / k }'
echo "resumed from the newest complete step: $(( $(grep -cE '^kill [0-9]+: .* killed' "$out") - $(grep -c 'did not verify (said)' "$out") ))," \
  "from the one before (said): $(grep -c 'did not verify (said)' "$out")"
tail -1 "$out"
exit $status
