# Gradient buckets reduced while the backward runs, on CUDA replicas
# (runtime/comm/overlap.h, runtime/cuda/cuda.h), on the emulated driver
# (tests/emu_driver/: streams are lazy queues, so a copy that does not wait
# for the kernels that made a gradient reads stale bytes).  In the step's
# last backward each bucket's gradients come down on the copy stream once
# the kernels that made them have run, the all-reduce thread averages them
# while the backward goes on, and the update phase takes the averages back
# up.  Checked, for 1 stage x 2 CUDA replicas (tests/clusters/two-gpu.xml)
# with 1 and 2 micro-batches, and 2 stages x 2 replicas on
# clusters/local-mixed.xml (a CPU stage, then a CUDA stage):
#   - the programs say how many buckets they have, every CUDA device
#     started buckets while a backward ran (none with --no-overlap);
#   - the overlap changes no bit: per-step losses and every device's
#     checkpoint identical to --no-overlap's (which reduces the same
#     buckets after the backward);
#   - the buckets' copies down ran on the copy stream (FUSION_EMU_COUNTS:
#     with one stage nothing else uses it, so none with --no-overlap);
#   - one stage: every loss within 1e-5 relative of one CPU device's;
#   - the simulator prices the overlap on the CUDA stage: never slower.
# (Leaving out rt_cuda_fetch's copies, or the copy stream's wait for the
# kernels queued before them, makes the losses differ from the second step
# on and fails every case: tried.)
. "$(dirname "$0")/lib.sh"
no_leak_scan_in_threaded_programs

model=(--set vocab=256 --set ctx=16 --set layers=2 --set dim=32 --set heads=2 --set batch=4 --set seq=16)
steps=4
cat /usr/share/common-licenses/* > "$work/corpus.txt"
claim_ports   # tests/lib.sh: this test's own ports
base=$ports
losses() { sed 's/^\[[^]]*\] //' "$1" | awk '/^step +[0-9]+\//{print $4}'; }

"$FUSIONC" compile models/gpt2.xml clusters/local-1.xml -o "$work/cpu" "${model[@]}" >"$work/log" 2>&1 \
  && pass || fail "CPU compile: $(cat "$work/log")"
"$work/cpu/cpu0/fusion-cpu0" --data "$work/corpus.txt" --steps $steps --seed 3 >"$work/cpu.out" 2>&1 \
  && pass || fail "CPU run: $(tail -3 "$work/cpu.out")"
losses "$work/cpu.out" >"$work/cpu.loss"

# NAME CLUSTER STAGES REPLICAS MICRO-BATCHES
cases=("dp2 tests/clusters/two-gpu.xml 1 2 2" "dp1 tests/clusters/two-gpu.xml 1 2 1"
       "mixed clusters/local-mixed.xml 2 2 2")
for c in "${cases[@]}"; do
  set -- $c
  "$FUSIONC" compile models/gpt2.xml "$2" -o "$work/$1" "${model[@]}" --stages "$3" --replicas "$4" \
    --micro-batches "$5" --compress none --cublas system --port-base "$base" --no-shard-optimizer >"$work/log" 2>&1 \
    && pass || fail "$1 compile: $(tail -c 1500 "$work/log")"
  base=$((base + 20))
done
build_emulated_cuda_driver "$work/lib" "$work"/*/gpu-*/kernels.cu && pass || fail "the emulated driver (above)"
export LD_LIBRARY_PATH="$work/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"

# run NAME OUT [ARGS...]: train OUT into OUT/NAME.ckpt; the reporter's lines
# in OUT/NAME.out, each device's in OUT/NAME.logs/, the emulator's counts in
# OUT/NAME.counts (a line a CUDA device).
run() {
  local name=$1 out=$2
  shift 2
  if FUSION_EMU_COUNTS="$out/$name.counts" "$out/launch-local.sh" --data "$work/corpus.txt" --steps $steps --seed 3 \
       --save "$out/$name.ckpt" "$@" >"$out/$name.out" 2>&1; then pass
  else fail "$out $name run: $(tail -5 "$out/$name.out"; tail -n 3 "$out"/logs/*.log)"; fi
  cp -r "$out/logs" "$out/$name.logs"
}

for c in "${cases[@]}"; do
  set -- $c
  name=$1 out="$work/$1" stages=$3
  run overlap "$out"
  run serial "$out" --no-overlap
  for log in "$out"/overlap.logs/gpu-*.log; do
    dev=$(basename "$log" .log)
    grep -q "gradient buckets averaged over the replicas while the step's last backward runs" "$log" && pass \
      || fail "$name $dev: does not say it overlaps: $(head -3 "$log")"
    read -r early handed < <(sed -n 's/.*gradient buckets: \([0-9]*\) of \([0-9]*\) started.*/\1 \2/p' "$log")
    [ -n "${early:-}" ] && [ "$early" -gt 0 ] && [ "$early" -le "$handed" ] && pass \
      || fail "$name $dev: no bucket started while a backward ran: $(grep 'gradient buckets' "$log")"
    echo "$name $dev: $(grep 'gradient buckets:' "$log")" >&2
    grep -q "gradient buckets: 0 of [1-9][0-9]* started while a backward ran" "$out/serial.logs/$dev.log" && pass \
      || fail "$name $dev --no-overlap: $(grep 'gradient buckets' "$out/serial.logs/$dev.log")"
  done
  a=$(losses "$out/overlap.out")
  b=$(losses "$out/serial.out")
  expect_eq "$name steps" $steps "$(echo "$a" | grep -c .)"
  expect_eq "$name losses, overlap against --no-overlap" "$b" "$a"
  files=0
  for f in "$out/overlap.ckpt"/latest/*; do
    files=$((files + 1))
    cmp -s "$f" "$out/serial.ckpt/latest/$(basename "$f")" && pass \
      || fail "$name: $(basename "$f") differs between the overlap and --no-overlap"
  done
  [ "$files" -ge $((stages * 2)) ] && pass || fail "$name: $files checkpoint files for $((stages * 2)) devices"
  # The buckets' copies down on the copy stream (the fields: ... second-stream htod N dtoh N ...).
  while read -r line; do
    set -- $line
    [ "${15:-0}" -gt 0 ] && pass || fail "$name: no copy down on the copy stream with the overlap: $line"
  done <"$out/overlap.counts"
  expect_eq "$name: CUDA devices that wrote counts" 2 "$(wc -l <"$out/overlap.counts")"
  if [ "$stages" -eq 1 ]; then
    while read -r line; do
      set -- $line
      expect_eq "$name --no-overlap: copies down on the copy stream" 0 "${15:-x}"
    done <"$out/serial.counts"
    echo "$a" >"$work/$name.loss"
    paste "$work/cpu.loss" "$work/$name.loss" | awk -v n="$name" -v steps=$steps '
      { d = $1 - $2; if (d < 0) d = -d; r = d / ($1 < 0 ? -$1 : $1); if (r > worst) worst = r }
      END { if (NR != steps || worst > 1e-5) { printf "FAIL: %s: %d losses, worst %.2g from the CPU run\n", n, NR, worst > "/dev/stderr"; exit 1 }
            printf "%s: worst relative loss difference from one CPU device %.2g\n", n, worst > "/dev/stderr" }' \
      && pass || fail "$name: losses $(paste -sd' ' "$work/$name.loss"), CPU $(paste -sd' ' "$work/cpu.loss")"
  fi
done

# The simulator: the CUDA stage's buckets go during the backward, so the
# step is never slower with the overlap than with --no-overlap.
sim() {
  "$FUSIONC" simulate models/gpt2.xml tests/clusters/two-gpu.xml "${model[@]}" --compress none --stages 1 \
    --replicas 2 --micro-batches 1 -o "$work" "$@" | awk '/^simulated step:/{print $3}'
}
with=$(sim)
without=$(sim --no-overlap)
awk -v a="$with" -v b="$without" 'BEGIN { exit !(a > 0 && a <= b) }' && pass \
  || fail "two CUDA replicas: simulated step $with ms with the overlap, $without without"
echo "two CUDA replicas, simulated: $with ms with the overlap, $without ms without" >&2
finish
