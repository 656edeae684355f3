# Gradient buckets reduced while the backward runs (runtime/comm/overlap.h).
# On CPU replicas the comm pass numbers each all-reduce's bucket and the
# device programs reduce each bucket on a thread of their own as soon as its
# gradients are final in the step's last backward.  Checked:
#   - the programs say how many buckets they have, and that buckets started
#     while a backward ran (none with --no-overlap);
#   - the overlap changes no bit: the same buckets, messages and sums as
#     --no-overlap (which reduces them after the backward), so per-step
#     losses and every device's checkpoint (parameters, AdamW's moments)
#     are identical, for 1 stage x 4 replicas (the hierarchy over local-4's
#     two sites, 2 micro-batches) and 2 stages x 2 replicas (4 micro-batches);
#   - the simulator prices it: on a ring that takes longer than the
#     backward, the step with the overlap is shorter than with --no-overlap,
#     and never longer on the cases above;
#   - --no-overlap and a typo are handled (usage errors exit 2).
. "$(dirname "$0")/lib.sh"
no_leak_scan_in_threaded_programs

cat /usr/share/common-licenses/* > "$work/corpus.txt"
model=(--set vocab=256 --set ctx=32 --set layers=2 --set dim=48 --set heads=4 --set batch=8 --set seq=32
       --set lr=3e-3 --set warmup=5)
steps=8
claim_ports   # tests/lib.sh: this test's own ports
base=$ports
# local-4 with its devices declared at 50 MFLOPS: this tiny model's backward
# then outlasts the latencies each bucket adds (the 40 ms link's, in the
# hierarchy), so the comm pass gives the stages several buckets
# (allreduce_bucket_count).  At local-4's own 50 GFLOPS one bucket is
# cheaper (checked below).  The programs do not pace without
# --emulate-devices, so they run as fast either way.
sed -E 's/(peak-[a-z0-9]+)="[0-9.]+GFLOPS"/\1="0.05GFLOPS"/g' clusters/local-4.xml >"$work/slow.xml"

# run NAME OUT [ARGS...]: train the compiled OUT with launch-local.sh, save
# into OUT/NAME.ckpt; the reporter's lines in OUT/NAME.out.
run() {
  local name=$1 out=$2
  shift 2
  "$out/launch-local.sh" --data "$work/corpus.txt" --steps $steps --seed 3 --save "$out/$name.ckpt" "$@" \
    >"$out/$name.out" 2>&1 && pass || fail "$out $name run: $(tail -5 "$out/$name.out"; tail -n 3 "$out"/logs/*.log)"
}

# same NAME STAGES REPLICAS MICRO-BATCHES
same() {
  local name=$1 out="$work/$1"
  if "$FUSIONC" compile models/gpt2.xml "$work/slow.xml" -o "$out" "${model[@]}" --port-base "$base" \
       --compress none --stages "$2" --replicas "$3" --micro-batches "$4" >"$work/$name.compile" 2>&1; then pass
  else fail "$name compile: $(cat "$work/$name.compile")"; return; fi
  base=$((base + 20))
  run overlap "$out"
  run serial "$out" --no-overlap
  grep -q "gradient buckets averaged over the replicas while the step's last backward runs" "$out/overlap.out" \
    && pass || fail "$name: the programs do not say they overlap: $(head -5 "$out/overlap.out")"
  local early handed
  read -r early handed < <(sed -n 's/.*gradient buckets: \([0-9]*\) of \([0-9]*\) started.*/\1 \2/p' "$out/overlap.out" | head -1)
  [ -n "${early:-}" ] && [ "$early" -gt 0 ] && [ "$early" -le "$handed" ] && pass \
    || fail "$name: no bucket started while a backward ran: $(grep 'gradient buckets' "$out/overlap.out")"
  grep -q "gradient buckets: 0 of [1-9][0-9]* started while a backward ran" "$out/serial.out" && pass \
    || fail "$name --no-overlap: $(grep 'gradient buckets' "$out/serial.out")"
  local a b
  a=$(sed 's/^\[[^]]*\] //' "$out/overlap.out" | awk '/^step /{print $4}')
  b=$(sed 's/^\[[^]]*\] //' "$out/serial.out" | awk '/^step /{print $4}')
  expect_eq "$name steps" $steps "$(echo "$a" | grep -c .)"
  expect_eq "$name losses, overlap against --no-overlap" "$b" "$a"
  local files=0 f
  for f in "$out/overlap.ckpt"/latest/*; do
    files=$((files + 1))
    cmp -s "$f" "$out/serial.ckpt/latest/$(basename "$f")" && pass \
      || fail "$name: $(basename "$f") differs between the overlap and --no-overlap"
  done
  [ "$files" -ge $(($2 * $3)) ] && pass || fail "$name: $files checkpoint files for $(($2 * $3)) devices"
  # The simulator: never slower with the overlap.
  local with without
  with=$("$FUSIONC" simulate models/gpt2.xml "$work/slow.xml" "${model[@]}" --compress none --stages "$2" \
           --replicas "$3" --micro-batches "$4" -o "$work" | awk '/^simulated step:/{print $3}')
  without=$("$FUSIONC" simulate models/gpt2.xml "$work/slow.xml" "${model[@]}" --compress none --stages "$2" \
           --replicas "$3" --micro-batches "$4" --no-overlap -o "$work" | awk '/^simulated step:/{print $3}')
  awk -v a="$with" -v b="$without" 'BEGIN { exit !(a > 0 && a <= b) }' && pass \
    || fail "$name: simulated step $with ms with the overlap, $without without"
}

same hier 1 4 2
same pipe 2 2 4

# At local-4's own peaks the same hierarchy gets one bucket: a bucket more
# would add the 40 ms link's latencies for a backward of well under 1 ms.
"$FUSIONC" dump models/gpt2.xml clusters/local-4.xml "${model[@]}" --compress none --stages 1 --replicas 4 \
  --micro-batches 2 --format text >"$work/fast.ir" 2>&1 || fail "dump at local-4's peaks: $(tail -3 "$work/fast.ir")"
expect_eq "buckets at local-4's peaks" "bucket=0" "$(grep -o 'bucket=[0-9]*' "$work/fast.ir" | sort -u | xargs)"
expect_eq "buckets at 50 MFLOPS" "bucket=0 bucket=1" \
  "$("$FUSIONC" dump models/gpt2.xml "$work/slow.xml" "${model[@]}" --compress none --stages 1 --replicas 4 \
      --micro-batches 2 --format text 2>&1 | grep -o 'bucket=[0-9]*' | sort -u | xargs)"

# A ring slower than the backward: 1 x 4 across local-4's 20 Mbps link at
# GPT-2 small's width, one micro-batch, the devices at 50 MFLOPS.  The buckets after the first start
# under the backward, so the overlap must save time in the simulation.
wide=(--set layers=2 --set dim=256 --set heads=4 --set batch=8 --set seq=64 --set ctx=64 --set vocab=256)
with=$("$FUSIONC" simulate models/gpt2.xml "$work/slow.xml" "${wide[@]}" --compress none --stages 1 --replicas 4 \
         --micro-batches 1 -o "$work" | awk '/^simulated step:/{print $3}')
without=$("$FUSIONC" simulate models/gpt2.xml "$work/slow.xml" "${wide[@]}" --compress none --stages 1 --replicas 4 \
         --micro-batches 1 --no-overlap -o "$work" | awk '/^simulated step:/{print $3}')
awk -v a="$with" -v b="$without" 'BEGIN { exit !(a > 0 && a < b) }' && pass \
  || fail "a slow ring: simulated step $with ms with the overlap, not below $without without"
echo "simulated 1 x 4 over 20 Mbps at 50 MFLOPS: $with ms with the overlap, $without ms without" >&2

"$work/hier/cpu-a0/fusion-cpu-a0" --no-overlapp >"$work/typo" 2>&1
expect_eq "a misspelt --no-overlap: exit status" 2 $?
finish
