# Validation (--val-data FILE --val-every N [--val-batches K]): a small GPT
# trained on one text and validated on another prints val_loss after every
# N steps and after the last, in its step line and its JSONL log; the
# training's losses are exactly those of the run without validation; the
# windows are fixed (the loss at step 4 is the same whether the run
# validated at steps 1-3 too or not); as a 4-stage pipeline and as 2
# stages x 2 replicas the val_loss is the one-device run's (within 1e-5)
# and the training again untouched; fusionc report prints it and plots it;
# bad combinations are refused with one line.
. "$(dirname "$0")/lib.sh"
no_leak_scan_in_threaded_programs
command -v gnuplot >/dev/null || { echo "FAIL: gnuplot is not installed (scripts/install-deps.sh)" >&2; exit 1; }

head -c 40000 /usr/share/common-licenses/GPL-3 >"$work/train.txt"
tail -c 20000 /usr/share/common-licenses/Apache-2.0 >"$work/val.txt"
model=(--set vocab=256 --set ctx=16 --set layers=4 --set dim=16 --set heads=2 --set batch=8 --set seq=16 --set lr=3e-3)
"$FUSIONC" compile models/gpt2.xml clusters/local-1.xml -o "$work/one" "${model[@]}" >"$work/c.out" 2>&1 \
  && pass || fail "compile: $(cat "$work/c.out")"
exe="$work/one/cpu0/fusion-cpu0"
losses() { sed 's/^\[[^]]*\] //' "$1" | awk '/^step /{print $4}'; }
val_losses() { sed 's/^\[[^]]*\] //' "$1" | awk '/^step / && /val_loss/ {print $2, $NF}'; }

"$exe" --data "$work/train.txt" --steps 10 --seed 5 >"$work/plain.out" 2>&1 && pass || fail "plain run: $(tail -2 "$work/plain.out")"
"$exe" --data "$work/train.txt" --steps 10 --seed 5 --val-data "$work/val.txt" --val-every 4 --log "$work/v.jsonl" \
  >"$work/val.out" 2>&1 && pass || fail "validated run: $(tail -2 "$work/val.out")"
expect_eq "training losses with validation" "$(losses "$work/plain.out")" "$(losses "$work/val.out")"
expect_eq "steps that validated" "4/10 8/10 10/10" "$(val_losses "$work/val.out" | awk '{print $1}' | xargs)"
expect_eq "val_loss in the log" "$(val_losses "$work/val.out" | awk '{print $2}' | xargs)" \
  "$(grep -o '"val_loss": [0-9.]*' "$work/v.jsonl" | awk '{print $2}' | xargs)"
expect_eq "log lines with val_loss" 3 "$(grep -c '"val_loss"' "$work/v.jsonl")"
# The held-out text is not the training text: its loss is not the step's.
first_val=$(val_losses "$work/val.out" | awk 'NR == 1 {print $2}')
awk -v v="$first_val" 'BEGIN { exit !(v > 3 && v < 6) }' && pass || fail "val_loss at step 4: $first_val"
# Fixed windows: validating every step gives the same loss at step 4 and 8, and the same training.
"$exe" --data "$work/train.txt" --steps 8 --seed 5 --val-data "$work/val.txt" --val-every 1 >"$work/every.out" 2>&1
expect_eq "val_loss at steps 4 and 8, validating every step" \
  "$(val_losses "$work/val.out" | awk '$1 == "4/10" || $1 == "8/10" {print $2}' | xargs)" \
  "$(val_losses "$work/every.out" | awk '$1 == "4/8" || $1 == "8/8" {print $2}' | xargs)"
expect_eq "training losses, validating every step" "$(losses "$work/plain.out" | head -8)" "$(losses "$work/every.out")"
# --val-batches: fewer windows, another mean.
"$exe" --data "$work/train.txt" --steps 4 --seed 5 --val-data "$work/val.txt" --val-every 4 --val-batches 1 \
  >"$work/k1.out" 2>&1 && pass || fail "--val-batches 1: $(tail -2 "$work/k1.out")"
[ "$(val_losses "$work/k1.out" | awk '{print $2}')" != "$first_val" ] && pass || fail "--val-batches 1 gave the loss of 8"

# fusionc report: the summary names the validations, the plot has them.
"$FUSIONC" report "$work/v.jsonl" -o "$work/report" >"$work/report.out" 2>&1 && pass || fail "report: $(cat "$work/report.out")"
grep -q "val_loss [0-9.]* first, [0-9.]* last, [0-9.]* lowest (step [0-9]*), 3 validations" "$work/report.out" && pass \
  || fail "report summary: $(cat "$work/report.out")"
grep -q "using 1:5 with linespoints title 'v.jsonl, validation'" "$work/report/plots.gnuplot" && pass \
  || fail "the loss plot does not draw the validation: $(cat "$work/report/plots.gnuplot")"
[ -s "$work/report/loss.png" ] && pass || fail "no loss.png"
awk 'NR > 1 && $5 != "nan" { n++ } END { exit n != 3 }' "$work/report/0.dat" && pass || fail "0.dat: $(head -3 "$work/report/0.dat")"

# Refused: one line, exit 2 (usage) or 1 (data).
"$exe" --data "$work/train.txt" --val-data "$work/val.txt" >/dev/null 2>"$work/err"; expect_eq "no --val-every: exit" 2 $?
grep -q -- "--val-data FILE needs --val-every N" "$work/err" && pass || fail "no --val-every: $(head -1 "$work/err")"
"$exe" --data "$work/train.txt" --val-every 3 >/dev/null 2>"$work/err"; expect_eq "no --val-data: exit" 2 $?
grep -q -- "--val-every N needs --val-data FILE" "$work/err" && pass || fail "no --val-data: $(head -1 "$work/err")"
printf 'short' >"$work/short.txt"
"$exe" --data "$work/train.txt" --val-data "$work/short.txt" --val-every 2 >"$work/out" 2>"$work/err"
expect_eq "short --val-data: exit" 1 $?
grep -q "short.txt: 5 tokens is too few for sequences of 16 (--val-data)" "$work/err" && pass || fail "short: $(cat "$work/err")"
expect_eq "short --val-data: steps run" 0 "$(grep -c '^step ' "$work/out")"

# Pipelines: every stage runs the validation's forward in step; the last reports.
claim_ports   # tests/lib.sh: this test's own ports
base=$ports
for plan in "pipeline4 --scheduler uniform --micro-batches 4" "grid2x2 --stages 2 --replicas 2 --micro-batches 2"; do
  set -- $plan; name=$1; shift
  "$FUSIONC" compile models/gpt2.xml clusters/local-4.xml -o "$work/$name" "${model[@]}" --port-base "$base" \
    --compress none "$@" >"$work/$name.c" 2>&1 && pass || fail "$name compile: $(cat "$work/$name.c")"
  base=$((base + 20))
  "$work/$name/launch-local.sh" --data "$work/train.txt" --steps 10 --seed 5 --val-data "$work/val.txt" --val-every 4 \
    >"$work/$name.out" 2>&1 && pass || fail "$name run: $(tail -5 "$work/$name.out")"
  "$work/$name/launch-local.sh" --data "$work/train.txt" --steps 10 --seed 5 >"$work/$name.plain" 2>&1 \
    && pass || fail "$name run without validation: $(tail -5 "$work/$name.plain")"
  expect_eq "$name: training losses with validation" "$(losses "$work/$name.plain")" "$(losses "$work/$name.out")"
  expect_eq "$name: steps that validated" "4/10 8/10 10/10" "$(val_losses "$work/$name.out" | awk '{print $1}' | xargs)"
  val_losses "$work/val.out" | awk '{print $2}' >"$work/one.val"
  val_losses "$work/$name.out" | awk '{print $2}' >"$work/$name.val"
  losses_within "$name val_loss" "$work/one.val" "$work/$name.val"
done
finish
