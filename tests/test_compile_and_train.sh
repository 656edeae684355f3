# fusionc compile builds a one-device program that trains: a small GPT on
# text, its loss falling; the program refuses bad arguments and bad data
# with one clear line; a failed compile leaves no executable behind.
. "$(dirname "$0")/lib.sh"
no_leak_scan_in_threaded_programs

# Training text from base-files (on every Debian): the licence texts.
cat /usr/share/common-licenses/* > "$work/corpus.txt"
small=(--set vocab=256 --set ctx=32 --set layers=2 --set dim=48 --set heads=4 --set batch=4 --set seq=32
       --set lr=3e-3 --set warmup=5)
if "$FUSIONC" compile models/gpt2.xml clusters/local-1.xml -o "$work/out" "${small[@]}" >"$work/compile.out" 2>&1; then
  pass; else fail "compile: $(cat "$work/compile.out")"; fi
exe="$work/out/cpu0/fusion-cpu0"
[ -x "$exe" ] && pass || fail "no executable at $exe"
[ -s "$work/out/cpu0/manifest.txt" ] && pass || fail "no manifest.txt"
expect_eq "temporary files left" "" "$(ls -A "$work/out/cpu0" | grep -v -e '^fusion-cpu0$' -e '^manifest.txt$' -e '^lib$' -e '^run.key$' || true)"
expect_eq "the run secret's mode" 600 "$(stat -c %a "$work/out/cpu0/run.key")"
expect_eq "temporary files left in lib/" "" "$(ls -A "$work/out/cpu0/lib" | grep -v '\.so\.[0-9]*$' || true)"

if "$exe" --data "$work/corpus.txt" --steps 60 --seed 3 --log "$work/log.jsonl" >"$work/train.out" 2>&1; then
  pass; else fail "training: $(tail -3 "$work/train.out")"; fi
expect_eq "progress lines" 60 "$(grep -c '^step ' "$work/train.out")"
expect_eq "log lines" 60 "$(grep -c '"loss"' "$work/log.jsonl")"
first=$(awk '/^step /{print $4; exit}' "$work/train.out")
last=$(awk '/^step /{l=$4} END{print l}' "$work/train.out")
# From ln 256 = 5.55 (uniform bytes) to well under it: the model learns.
awk -v f="$first" 'BEGIN { exit !(f > 5.2 && f < 5.8) }' && pass || fail "first loss $first, expected about ln 256 = 5.55"
awk -v f="$first" -v l="$last" 'BEGIN { exit !(l < f - 1.5) }' && pass || fail "loss went from $first to $last in 60 steps"

# The same seed gives the same run, step for step.
"$exe" --data "$work/corpus.txt" --steps 5 --seed 3 | awk '/^step /{print $4}' >"$work/a"
awk '/^step /{print $4}' "$work/train.out" | head -5 >"$work/b"
expect_eq "a rerun's losses" "$(cat "$work/b")" "$(cat "$work/a")"

# The same tokens as an llm.c shard (256-int32 header, uint16 tokens) train
# identically to the text they came from.
perl -e 'local $/; my @t = unpack("C*", <STDIN>);
         print pack("l<256", 20240520, 1, scalar(@t), (0) x 253), pack("S<*", @t)' \
  <"$work/corpus.txt" >"$work/corpus.bin"
"$exe" --data "$work/corpus.bin" --steps 5 --seed 3 | awk '/^step /{print $4}' >"$work/c"
expect_eq "losses from the shard" "$(cat "$work/b")" "$(cat "$work/c")"
perl -e 'print pack("l<256", 20240520, 7, 10, (0) x 253)' >"$work/badversion.bin"
"$exe" --data "$work/badversion.bin" --steps 1 >/dev/null 2>"$work/err"; expect_eq "bad shard exit" 1 $?
grep -q "token shard version 7, expected 1" "$work/err" && pass || fail "bad shard message: $(cat "$work/err")"

# Bad arguments and data: one line, non-zero exit.
"$exe" --steps 3 >/dev/null 2>"$work/err"; expect_eq "no --data exit" 2 $?
grep -q -- "--data FILE (or --inputs FILE) is required" "$work/err" && pass || fail "no --data message: $(cat "$work/err")"
"$exe" --data "$work/missing.txt" --steps 3 >/dev/null 2>"$work/err"; expect_eq "missing data exit" 1 $?
grep -q "missing.txt: cannot open the data" "$work/err" && pass || fail "missing data message: $(cat "$work/err")"
printf 'short' >"$work/short.txt"
"$exe" --data "$work/short.txt" --steps 3 >/dev/null 2>"$work/err"; expect_eq "short data exit" 1 $?
grep -q "5 tokens is too few for sequences of 32" "$work/err" && pass || fail "short data message: $(cat "$work/err")"
"$exe" --data "$work/corpus.txt" --steps x >/dev/null 2>"$work/err"; expect_eq "bad --steps exit" 2 $?

# Compile errors: a bad model: no executable.
"$FUSIONC" compile models/gpt2.xml clusters/local-1.xml -o "$work/out5" --set heads=7 2>/dev/null
expect_eq "bad model compile exit" 1 $?
[ ! -e "$work/out5/cpu0/fusion-cpu0" ] && pass || fail "a failed compile left an executable"
finish
