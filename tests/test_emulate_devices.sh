# --emulate-devices: every op of a device program takes at least the
# workload estimator's time for it on the device the cluster file declares
# (local-1: 50 GFLOPS, 10 GB/s), so a step takes at least the simulator's
# one-device step, whose ops run back to back.  On this machine the demo's
# GPT runs faster than that unpaced (28 ms against 34.7 ms: the Xeon beats
# the declared 50 GFLOPS), so the bound fails without the pacing; under the
# sanitizers the ops are slower than declared and it holds trivially.
# The program says how long it waited.
#
# A CUDA device too, on the emulated driver (tests/emu_driver/): each op's
# launches, then a synchronisation, then the wait.  A small GPT on
# tests/clusters/slow-gpu.xml, a CUDA device declared at 20 MFLOPS and
# 40 MB/s so that its estimates exceed what the emulation takes here
# (measured: 340 ms a step unpaced, the simulator's step 750 ms): the paced
# step is at least the simulator's, it says it waited, and every loss is
# the unpaced run's to the last digit (pacing only sleeps).
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
ms=$(awk '/^step +[3-6]\// { for (i = 2; i <= NF; i++) if ($i == "ms/step") print $(i - 1) }' "$work/run" | sort -n | awk '{ a[NR] = $1 } END { print (a[2] + a[3]) / 2 }')
awk -v m="$ms" -v s="$sim_ms" 'BEGIN { exit !(m >= 0.97 * s) }' && pass ||
  fail "paced step $ms ms, below the simulated one-device step $sim_ms ms"
echo "  demo GPT on local-1: paced step $ms ms, simulated $sim_ms ms" >&2
grep -qE "^fusion: --emulate-devices waited [0-9.]+ s of the [0-9.]+ s the steps took \([0-9]+%\)$" "$work/run" && pass ||
  fail "no waiting summary: $(tail -2 "$work/run")"
grep -q "^fusion: emulating the cluster file's device speed" "$work/run" && pass || fail "no start line"

# A CUDA device (the emulated driver).
small=(--set vocab=256 --set ctx=16 --set layers=2 --set dim=32 --set heads=2 --set batch=4 --set seq=16)
"$FUSIONC" compile models/gpt2.xml tests/clusters/slow-gpu.xml -o "$work/gpu" "${small[@]}" --cublas system \
  >"$work/c" 2>&1 && pass || fail "CUDA compile: $(tail -c 1500 "$work/c")"
"$FUSIONC" simulate models/gpt2.xml tests/clusters/slow-gpu.xml "${small[@]}" -o "$work" >"$work/sim" 2>&1 && pass ||
  fail "CUDA simulate: $(cat "$work/sim")"
sim_ms=$(awk '/^simulated step:/ { print $3 }' "$work/sim")
build_emulated_cuda_driver "$work/lib" "$work/gpu/gpu/kernels.cu" && pass || fail "the emulated driver (above)"
export LD_LIBRARY_PATH="$work/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
"$work/gpu/gpu/fusion-gpu" --data "$work/corpus.txt" --steps 5 --seed 5 >"$work/gpu-free" 2>&1 && pass ||
  fail "CUDA run: $(tail -3 "$work/gpu-free")"
"$work/gpu/gpu/fusion-gpu" --data "$work/corpus.txt" --steps 5 --seed 5 --emulate-devices >"$work/gpu-paced" 2>&1 &&
  pass || fail "CUDA run, --emulate-devices: $(tail -3 "$work/gpu-paced")"
# The median of steps 2-5 (the first loads the module and copies the arena).
median() { awk '/^step +[2-5]\// { for (i = 2; i <= NF; i++) if ($i == "ms/step") print $(i - 1) }' "$1" | sort -n | awk '{ a[NR] = $1 } END { print (a[2] + a[3]) / 2 }'; }
ms=$(median "$work/gpu-paced")
free_ms=$(median "$work/gpu-free")
awk -v m="$ms" -v s="$sim_ms" 'BEGIN { exit !(m >= 0.97 * s) }' && pass ||
  fail "CUDA device: paced step $ms ms, below the simulated step $sim_ms ms (unpaced $free_ms ms)"
echo "  small GPT on an emulated CUDA device (slow-gpu): paced step $ms ms, unpaced $free_ms ms, simulated $sim_ms ms" >&2
grep -qE "^fusion: --emulate-devices waited [0-9.]*[1-9][0-9.]* s of the [0-9.]+ s the steps took \([0-9]+%\)$" \
  "$work/gpu-paced" && pass || fail "CUDA device: no waiting summary, or nothing waited: $(tail -2 "$work/gpu-paced")"
grep "^fusion: --emulate-devices waited" "$work/gpu-paced" >&2
expect_eq "CUDA device: losses paced and unpaced" "$(awk '/^step /{print $4}' "$work/gpu-free")" \
  "$(awk '/^step /{print $4}' "$work/gpu-paced")"
finish
