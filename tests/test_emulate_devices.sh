# --emulate-devices: every op of a device program takes at least the
# workload estimator's time for it on the device the cluster file declares
# (local-1: 50 GFLOPS, 10 GB/s), so a step takes at least the simulator's
# one-device step, whose ops run back to back.  On this machine the demo's
# GPT runs faster than that unpaced (28 ms against 34.7 ms: the Xeon beats
# the declared 50 GFLOPS), so the bound fails without the pacing; under the
# sanitizers the ops are slower than declared and it holds trivially.
# The program says how long it waited.
. "$(dirname "$0")/lib.sh"
no_leak_scan_in_threaded_programs
cat /usr/share/common-licenses/* > "$work/corpus.txt"
model=(--set vocab=256 --set ctx=64 --set layers=4 --set dim=128 --set heads=4 --set batch=8 --set seq=64)
"$FUSIONC" compile models/gpt2.xml clusters/local-1.xml -o "$work/out" "${model[@]}" >"$work/c" 2>&1 && pass ||
  fail "compile: $(cat "$work/c")"
"$FUSIONC" simulate models/gpt2.xml clusters/local-1.xml "${model[@]}" -o "$work" >"$work/sim" 2>&1 && pass ||
  fail "simulate: $(cat "$work/sim")"
sim_ms=$(awk '/^simulated step:/ { print $3 }' "$work/sim")
"$work/out/cpu0/fusion-cpu0" --data "$work/corpus.txt" --steps 6 --emulate-devices >"$work/run" 2>&1 && pass ||
  fail "run: $(tail -3 "$work/run")"
# The median of steps 3-6 (the first ones touch fresh memory).
ms=$(awk '/^step +[3-6]\// { print $(NF-1) }' "$work/run" | sort -n | awk '{ a[NR] = $1 } END { print (a[2] + a[3]) / 2 }')
awk -v m="$ms" -v s="$sim_ms" 'BEGIN { exit !(m >= 0.97 * s) }' && pass ||
  fail "paced step $ms ms, below the simulated one-device step $sim_ms ms"
echo "  demo GPT on local-1: paced step $ms ms, simulated $sim_ms ms" >&2
grep -qE "^fusion: --emulate-devices waited [0-9.]+ s of the [0-9.]+ s the steps took \([0-9]+%\)$" "$work/run" && pass ||
  fail "no waiting summary: $(tail -2 "$work/run")"
grep -q "^fusion: emulating the cluster file's device speed" "$work/run" && pass || fail "no start line"
finish
