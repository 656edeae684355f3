# Timelines (issue 20): a 2-device pipeline run with --trace gives, through
# launch-local.sh, one Chrome trace-event file that a JSON parser reads,
# with the events of both devices on one time axis (every message's send
# and receive matched by id, the receive after the send), each device's
# ops, micro-batches and update; `fusionc simulate --trace` writes the same
# format with the same span names; a one-device run writes FILE itself; a
# trace that cannot be written stops the program with the path named.
. "$(dirname "$0")/lib.sh"
no_leak_scan_in_threaded_programs
py=/usr/bin/python3
cat /usr/share/common-licenses/* > "$work/corpus.txt"
model=(--set vocab=256 --set ctx=32 --set layers=2 --set dim=48 --set heads=4 --set batch=8 --set seq=32)
claim_ports   # tests/lib.sh: this test's own ports
base=$ports

"$FUSIONC" compile models/gpt2.xml clusters/local-4.xml -o "$work/two" "${model[@]}" \
  --stages 2 --replicas 1 --micro-batches 4 --compress none --port-base "$base" >"$work/c.out" 2>&1 \
  && pass || fail "compile: $(cat "$work/c.out")"
grep -q "2 stages x 1 replica" "$work/c.out" && pass || fail "expected 2 stages x 1 replica: $(cat "$work/c.out")"
"$work/two/launch-local.sh" --data "$work/corpus.txt" --steps 3 --trace "$work/run.json" >"$work/run.out" 2>&1 \
  && pass || fail "run: $(tail -3 "$work/run.out")"
grep -q "the timeline of 2 devices is in $work/run.json" "$work/run.out" && pass || fail "no merge line: $(tail -3 "$work/run.out")"
# --trace=FILE (every option takes its value either way): merged the same.
"$work/two/launch-local.sh" --data "$work/corpus.txt" --steps 1 --trace="$work/eq.json" >"$work/eq.out" 2>&1 \
  && pass || fail "run with --trace=FILE: $(tail -3 "$work/eq.out")"
grep -q "the timeline of 2 devices is in $work/eq.json" "$work/eq.out" && [ -s "$work/eq.json" ] && pass \
  || fail "--trace=FILE: no merged timeline: $(tail -3 "$work/eq.out")"

# check_trace FILE DEVICES KIND: the file is JSON with events of DEVICES processes;
# every flow begins once and ends once; KIND=run: on one clock, ends after begins.
check_trace() {
  "$py" - "$@" <<'PYEOF'
import json, sys
path, devices, kind = sys.argv[1], int(sys.argv[2]), sys.argv[3]
events = json.load(open(path))
names = {e["pid"]: e["args"]["name"] for e in events if e["ph"] == "M" and e["name"] == "process_name"}
spans = [e for e in events if e["ph"] == "X"]
pids = {e["pid"] for e in spans}
problems = []
if len(names) != devices or len(pids) != devices:
    problems.append(f"{len(names)} named processes and spans on {len(pids)}, expected {devices}")
begins = {}
for e in events:
    if e["ph"] == "s":
        if e["id"] in begins: problems.append(f"message {e['id']} sent twice")
        begins[e["id"]] = e
ends = [e for e in events if e["ph"] == "f"]
unmatched = [e["id"] for e in ends if e["id"] not in begins]
if not begins or unmatched or len(ends) != len(begins):
    problems.append(f"{len(begins)} sends, {len(ends)} receives, unmatched {unmatched[:3]}")
early = [e["id"] for e in ends if e["id"] in begins and e["ts"] < begins[e["id"]]["ts"]]
if early: problems.append(f"received before sent: {early[:3]}")
cross = sum(1 for e in ends if e["id"] in begins and begins[e["id"]]["pid"] != e["pid"])
if cross != len(ends): problems.append(f"{len(ends) - cross} messages to themselves")
for pid in pids:
    mine = {e["name"] for e in spans if e["pid"] == pid and e["cat"] == "micro-batch"}
    for want in ("forward 0", "backward 3", "update"):
        if want not in mine: problems.append(f"{names.get(pid)}: no '{want}' span")
if kind == "run":
    if not any(e["cat"] == "wait" for e in spans): problems.append("no wait spans (a receive that blocked)")
    ops = {e["pid"] for e in spans if e["cat"] in ("forward", "backward")}
    if ops != pids: problems.append("a device without op spans")
    t0 = min(e["ts"] for e in spans); t1 = max(e["ts"] + e["dur"] for e in spans)
    if not (0 < t1 - t0 < 600e6): problems.append(f"the events span {(t1 - t0) / 1e6:.1f} s: not one clock")
print(f"{path}: {len(events)} events, {len(pids)} devices, {len(begins)} messages matched"
      + ("" if not problems else ": FAIL: " + "; ".join(problems)))
sys.exit(1 if problems else 0)
PYEOF
}
check_trace "$work/run.json" 2 run >"$work/check" 2>&1 && pass || fail "$(cat "$work/check")"
cat "$work/check" >&2
for d in cpu-a0 cpu-a1 cpu-b0 cpu-b1; do
  [ -f "$work/run.$d.json" ] || continue
  "$py" -c 'import json, sys; json.load(open(sys.argv[1]))' "$work/run.$d.json" && pass || fail "$d's own trace is not JSON"
done

# The simulator: the same format and span names.
"$FUSIONC" simulate models/gpt2.xml clusters/local-4.xml "${model[@]}" --stages 2 --replicas 1 \
  --micro-batches 4 --compress none -o "$work/sim" --trace "$work/sim/new/trace.json" >"$work/sim.out" 2>&1 \
  && pass || fail "simulate --trace: $(cat "$work/sim.out")"
check_trace "$work/sim/new/trace.json" 2 sim >"$work/check" 2>&1 && pass || fail "$(cat "$work/check")"
cat "$work/check" >&2

# One device: FILE itself.
"$FUSIONC" compile models/gpt2.xml clusters/local-1.xml -o "$work/one" "${model[@]}" >/dev/null 2>&1
"$work/one/cpu0/fusion-cpu0" --data "$work/corpus.txt" --steps 2 --trace "$work/one.json" >/dev/null 2>&1 \
  && "$py" -c 'import json, sys; e = json.load(open(sys.argv[1])); sys.exit(not any(x.get("cat") == "forward" for x in e))' \
       "$work/one.json" && pass || fail "a one-device trace"
# A trace that cannot be written.
"$work/one/cpu0/fusion-cpu0" --data "$work/corpus.txt" --steps 2 --trace "$work/no/such/dir/t.json" >/dev/null 2>"$work/err"
expect_eq "unwritable trace: exit" 1 $?
grep -q "no/such/dir/t.json: cannot write the trace: No such file or directory" "$work/err" && pass || fail "unwritable trace: $(cat "$work/err")"
finish
