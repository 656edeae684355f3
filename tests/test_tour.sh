# The README's tour, run by scripts/tour.sh as a new user would (issue 33):
# its commands give one plan (compile, plan and simulate place the same
# model the same way), the learning rate falls along a cosine over
# --steps 20, a typo gets a suggestion in at most four lines, and the
# idle devices are named with the reason.  docs/tour.md is that script's
# transcript; its sections are the ones the script writes.
. "$(dirname "$0")/lib.sh"
no_leak_scan_in_threaded_programs
mkdir -p "$work/out/data"
head -c 300000 /usr/share/common-licenses/GPL-3 >"$work/out/data/corpus.txt"
FUSIONC="$FUSIONC" TOUR_OUT="$work/out" scripts/tour.sh >"$work/tour.md" 2>&1 && pass \
  || fail "scripts/tour.sh: $(tail -20 "$work/tour.md")"

# One plan: the compile's plan.txt, fusionc plan and fusionc simulate agree on the shape.
shape() { grep -m1 -o "[0-9]* stages\? x [0-9]* replicas\?, [0-9]* micro-batch\(es\)\?" "$1"; }
compiled=$(shape "$work/out/tour/plan.txt")
[ -n "$compiled" ] && pass || fail "no shape in plan.txt: $(head -3 "$work/out/tour/plan.txt")"
sed -n '/^\$ fusionc plan/,/^```$/p' "$work/tour.md" >"$work/plan.txt"
expect_eq "fusionc plan's shape against the compile's" "$compiled" "$(shape "$work/plan.txt")"
grep -q "^estimated step: $(sed -n 's/^estimated step: \([0-9.]*\) ms.*/\1/p' "$work/out/tour/plan.txt") ms" "$work/plan.txt" \
  && pass || fail "the estimated steps differ: $(grep 'estimated step' "$work/out/tour/plan.txt" "$work/plan.txt")"
sed -n '/^\$ fusionc simulate/,/^```$/p' "$work/tour.md" >"$work/sim.txt"
expect_eq "fusionc simulate's shape against the compile's" "$compiled" "$(shape "$work/sim.txt")"

# The rate along a cosine over the run's 20 steps (the model's lr 6e-4, min_lr 0, no warm-up).
reporter=$(sed -n 's/^reporter=//p' "$work/out/tour/launch-local.sh")
grep -o '"lr": [^,]*' "$work/out/tour/train.$reporter.jsonl" | awk '{ print $2 }' >"$work/lr"
awk '{ w = 0.5 * (1 + cos(3.141592653589793 * NR / 20)) * 6e-4; d = $1 - w; if (d < 0) d = -d
       if (d > 1e-6 * 6e-4) { printf "step %d: lr %s, the cosine %.9g\n", NR, $1, w; bad = 1 } }
     END { if (NR != 20) { print NR " rates, not 20"; bad = 1 } exit bad }' "$work/lr" >"$work/lr.bad" && pass \
  || fail "the learning rate: $(cat "$work/lr.bad")"
grep -q "fusion: learning rate 0.0006, cosine to 0 by step 20 (the run's --steps)" "$work/tour.md" && pass \
  || fail "the schedule is not said: $(grep 'learning rate' "$work/tour.md" | head -2)"

# A typo: the suggestion, in at most four lines.
sed -n '/--stpes 20$/,/^```$/p' "$work/tour.md" | sed '1d;$d' | grep -v '^(exit status' >"$work/typo.txt"
grep -q "unknown option '--stpes'; did you mean '--steps'?" "$work/typo.txt" && pass || fail "no suggestion: $(cat "$work/typo.txt")"
lines=$(wc -l <"$work/typo.txt")
[ "$lines" -ge 1 ] && [ "$lines" -le 4 ] && pass || fail "the typo took $lines lines: $(cat "$work/typo.txt")"

# The idle devices, with the reason.
grep -q "^idle: cpu-b0, cpu-b1: their 20 Mbps, 40 ms link to cpu-a[01] costs more than they would add.$" "$work/tour.md" \
  && pass || fail "no idle devices named: $(grep -A2 '^compiled' "$work/tour.md")"

# docs/tour.md is this script's transcript: the same commands, in the same order.
expect_eq "docs/tour.md's commands" "$(grep '^\$ ' "$work/tour.md")" "$(grep '^\$ ' docs/tour.md)"
finish
