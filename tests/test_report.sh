# fusionc report (issue 20): the step logs of a 2-stage run on local-4
# (links emulated) become loss, throughput and links PNGs with gnuplot and
# a summary naming each link's MiB a step; a log line that is not a step is
# refused with its file and line; a missing log is named.
. "$(dirname "$0")/lib.sh"
no_leak_scan_in_threaded_programs
command -v gnuplot >/dev/null || { echo "FAIL: gnuplot is not installed (scripts/install-deps.sh)" >&2; exit 1; }
cat /usr/share/common-licenses/* > "$work/corpus.txt"
claim_ports   # tests/lib.sh: this test's own ports
base=$ports
"$FUSIONC" compile models/gpt2.xml clusters/local-4.xml -o "$work/out" --set vocab=256 --set ctx=32 --set layers=2 \
  --set dim=48 --set heads=4 --set batch=8 --set seq=32 --stages 2 --replicas 1 --micro-batches 4 --compress none \
  --port-base "$base" >"$work/c.out" 2>&1 && pass || fail "compile: $(cat "$work/c.out")"
"$work/out/launch-local.sh" --data "$work/corpus.txt" --steps 12 --log "$work/log.jsonl" --emulate-links \
  >"$work/run.out" 2>&1 && pass || fail "run: $(tail -3 "$work/run.out")"
logs=("$work"/log.cpu-*.jsonl)
expect_eq "logs" 2 "${#logs[@]}"
"$FUSIONC" report "${logs[@]}" -o "$work/report/new" >"$work/report.out" 2>&1 && pass || fail "report: $(cat "$work/report.out")"
for png in loss throughput links; do
  head -c 8 "$work/report/new/$png.png" 2>/dev/null | od -An -tx1 | grep -q "89 50 4e 47 0d 0a 1a 0a" && pass \
    || fail "$png.png is not a PNG"
  [ "$(stat -c %s "$work/report/new/$png.png" 2>/dev/null || echo 0)" -gt 5000 ] && pass || fail "$png.png is nearly empty"
done
grep -Eq "^log.cpu-a1.jsonl: 12 steps \(1 to 12\); loss [0-9.]+ first, [0-9.]+ last" "$work/report.out" && pass \
  || fail "summary of the reporter: $(cat "$work/report.out")"
# the activations cross cpu-a0 -> cpu-a1 each micro-batch: a link with bytes
awk '/link to cpu-a1:/ { if ($4 + 0 > 0.01) found = 1 } END { exit !found }' "$work/report.out" && pass \
  || fail "no traffic on the link to cpu-a1: $(cat "$work/report.out")"
cat "$work/report.out" >&2
# Bad input.
printf '{"step": 1, "loss": 2.0}\nnot json\n' >"$work/bad.jsonl"
"$FUSIONC" report "$work/bad.jsonl" -o "$work/bad" >/dev/null 2>"$work/err"; expect_eq "bad line: exit" 1 $?
grep -q "bad.jsonl:2: error: expected a step object" "$work/err" && pass || fail "bad line: $(cat "$work/err")"
"$FUSIONC" report "$work/none.jsonl" >/dev/null 2>"$work/err"; expect_eq "missing log: exit" 1 $?
grep -q "none.jsonl:0: error: cannot open the log" "$work/err" && pass || fail "missing log: $(cat "$work/err")"
"$FUSIONC" report >/dev/null 2>&1; expect_eq "no log: exit" 2 $?
finish
