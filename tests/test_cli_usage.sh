# The command line: help, version, usage errors (exit 2), --set checking,
# and output files that are never left half-written.
. "$(dirname "$0")/lib.sh"

"$FUSIONC" --version | head -1 | grep -Eq '^fusionc [0-9]+\.[0-9]+\.[0-9]+ \(commit ' && pass || fail "--version: $("$FUSIONC" --version)"
for c in "" check dump stats; do
  # shellcheck disable=SC2086
  "$FUSIONC" $c --help >"$work/out" 2>&1 && grep -q "usage: fusionc" "$work/out" && pass || fail "fusionc $c --help"
done
for c in deploy launch stop; do
  "$FUSIONC" $c --help >"$work/out" 2>&1 && grep -q "usage: fusionc $c OUT" "$work/out" && pass || fail "fusionc $c --help"
  "$FUSIONC" $c >/dev/null 2>&1; expect_eq "$c without OUT: exit" 2 $?
  "$FUSIONC" $c "$work/nothing-here" 2>"$work/err" >/dev/null; expect_eq "$c of a folder that is no compile's: exit" 1 $?
  grep -q "nothing-here/deploy.txt:0: error: cannot read the deploy list" "$work/err" && pass || fail "$c: $(cat "$work/err")"
done
"$FUSIONC" deploy "$work" --copier ftp >/dev/null 2>&1; expect_eq "deploy --copier ftp: exit" 2 $?
"$FUSIONC" frobnicate >/dev/null 2>&1; expect_eq "unknown command exit" 2 $?
# A usage error is one line and where the help is, with the nearest name for a typo.
"$FUSIONC" compiel >/dev/null 2>"$work/err"; expect_eq "a mistyped command: exit" 2 $?
expect_eq "a mistyped command: the two lines" "fusionc: unknown command 'compiel'; did you mean 'compile'?
see 'fusionc --help'" "$(cat "$work/err")"
"$FUSIONC" plan models/mlp.xml clusters/local-4.xml --micro-bathces 2 >/dev/null 2>"$work/err"
expect_eq "a mistyped option: exit" 2 $?
expect_eq "a mistyped option: the two lines" "fusionc plan: unknown option '--micro-bathces'; did you mean '--micro-batches'?
see 'fusionc plan --help'" "$(cat "$work/err")"
"$FUSIONC" dump models/mlp.xml --zzzzzzzz >/dev/null 2>"$work/err"
expect_eq "an option near none: no suggestion" "fusionc dump: unknown option '--zzzzzzzz'
see 'fusionc dump --help'" "$(cat "$work/err")"
"$FUSIONC" compile models/mlp.xml clusters/local-1.xml -o "$work/typo" >/dev/null 2>&1 || fail "compile for the typo"
"$work/typo/cpu0/fusion-cpu0" --stpes 3 >/dev/null 2>"$work/err"; expect_eq "a device program's typo: exit" 2 $?
expect_eq "a device program's typo: the two lines" "$work/typo/cpu0/fusion-cpu0: unknown option '--stpes'; did you mean '--steps'?
see '$work/typo/cpu0/fusion-cpu0 --help'" "$(cat "$work/err")"
"$FUSIONC" dump >/dev/null 2>&1; expect_eq "dump without a model exit" 2 $?
"$FUSIONC" dump models/mlp.xml --bogus >/dev/null 2>&1; expect_eq "unknown option exit" 2 $?
"$FUSIONC" dump models/mlp.xml --after nopass >/dev/null 2>"$work/err"; expect_eq "unknown pass exit" 2 $?
grep -q "unknown pass" "$work/err" && pass || fail "unknown pass message: $(cat "$work/err")"
"$FUSIONC" dump models/mlp.xml --set nosuch=3 >/dev/null 2>"$work/err"; expect_eq "unknown hyper exit" 1 $?
grep -q "has no hyper-parameter 'nosuch'" "$work/err" && pass || fail "unknown hyper message: $(cat "$work/err")"
"$FUSIONC" dump models/mlp.xml --set hidden >/dev/null 2>&1; expect_eq "--set without = exit" 2 $?

# --set takes expressions and the last one wins; --after=PASS also works.
"$FUSIONC" dump models/mlp.xml --set hidden=2*64 --set hidden=100 --after=shapes | grep -q 'fc.0.w : f32\[100,784\]' &&
  pass || fail "--set hidden=100 did not give fc.0.w f32[100,784]"

# A failed dump leaves no output file behind, not even a temporary one.
"$FUSIONC" dump models/gpt2.xml --set heads=7 -o "$work/out.fir" 2>"$work/err"; expect_eq "bad model exit" 1 $?
[ ! -e "$work/out.fir" ] && pass || fail "a failed dump left $work/out.fir"
expect_eq "files left in the output folder" "" "$(ls "$work" | grep '\.tmp\.' || true)"
grep -Eq '^models/gpt2.xml:[0-9]+: error: dim must be divisible by heads' "$work/err" && pass ||
  fail "assert message: $(cat "$work/err")"
# Every -o makes the folders it needs; one that cannot be made is named.
"$FUSIONC" compile models/mlp.xml clusters/local-1.xml -o "$work/new/a/b" >/dev/null 2>"$work/err" && \
  [ -x "$work/new/a/b/cpu0/fusion-cpu0" ] && pass || fail "compile -o into missing folders: $(cat "$work/err")"
"$FUSIONC" plan models/mlp.xml clusters/local-4.xml -o "$work/new/p/q" >/dev/null 2>"$work/err" && \
  [ -s "$work/new/p/q/plan.txt" ] && pass || fail "plan -o into missing folders: $(cat "$work/err")"
"$FUSIONC" simulate models/mlp.xml clusters/local-4.xml -o "$work/new/s/t" >"$work/sim.txt" 2>"$work/err" && \
  [ -s "$work/new/s/t/gantt.svg" ] && pass || fail "simulate -o into missing folders: $(cat "$work/err")"
"$FUSIONC" dump models/mlp.xml -o "$work/new/d/e/g.fir" 2>"$work/err" && [ -s "$work/new/d/e/g.fir" ] && pass ||
  fail "dump -o into missing folders: $(cat "$work/err")"
touch "$work/new/file"
"$FUSIONC" plan models/mlp.xml clusters/local-4.xml -o "$work/new/file/x" >/dev/null 2>"$work/err"
expect_eq "plan -o under a file: exit" 1 $?
grep -q "new/file:0: error: cannot create the folder: a file of that name is in the way" "$work/err" && pass ||
  fail "plan -o under a file: $(cat "$work/err")"
# simulate: a summary of the links; every link's row with -v.
grep -q "^links: [0-9]* carry traffic, .*(-v: every link)" "$work/sim.txt" && pass || fail "simulate summary: $(cat "$work/sim.txt")"
grep -q "^link (bytes per step)" "$work/sim.txt" && fail "simulate printed the link table without -v" || pass
"$FUSIONC" simulate models/mlp.xml clusters/local-4.xml -o "$work/new/s/t" --verbose >"$work/sim.txt" 2>&1
grep -q "^link (bytes per step)" "$work/sim.txt" && pass || fail "simulate --verbose: $(cat "$work/sim.txt")"
finish
