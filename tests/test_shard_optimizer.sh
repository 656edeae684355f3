# --shard-optimizer (ZeRO-1, runtime/shard.h): a stage's replicas split
# AdamW's moments; the gradients are reduce-scattered, each replica updates
# its piece, the parameters are all-gathered.  Checked:
#   - GPT-2 small (124M) on 4 replicas of clusters/local-4.xml: the planned
#     memory of a device sharded is at most 0.75x unsharded (the plan's
#     memory column), the plan says so, and the simulator's step agrees
#     with the planner's within 5%; the planner takes sharding on its own
#     where its estimated step is shorter (devices with slow memory on fast
#     links), not on local-4;
#   - the same mathematics: on one site (a ring either way) sharded and
#     unsharded runs end 10 steps with every parameter bit-identical
#     without clipping, and losses within 1e-6 with it (the norm's partial
#     sums are added in another order); on clusters/local-4.xml (two
#     regions: unsharded takes the hierarchy) losses within 1e-5, for 1
#     stage x 4 replicas and for 2 stages x 2 replicas (2 micro-batches);
#   - a device's moments are its piece: the manifest's arena is smaller,
#     and a checkpoint part holds 1/R of each moment (fusion.pieces);
#   - checkpoints resume across shardings: a sharded run's step-5 resumed
#     unsharded (bit-identical to the uninterrupted run, no clipping) and
#     as 2 stages x 2 sharded replicas (losses within 1e-5);
#   - a sharded checkpoint with a replica's part gone is refused, naming
#     the moment and the range missing; SGD (no moments) is refused;
#   - on emulated CUDA replicas (tests/emu_driver/) sharded and unsharded
#     parameters are bit-identical after 4 steps.
. "$(dirname "$0")/lib.sh"
no_leak_scan_in_threaded_programs

cat /usr/share/common-licenses/* > "$work/corpus.txt"
model=(--set vocab=256 --set ctx=32 --set layers=2 --set dim=48 --set heads=4 --set batch=8 --set seq=32 --set lr=3e-3)
claim_ports
base=$ports
PY=/usr/bin/python3
losses() { sed 's/^\[[^]]*\] //' "$1" | awk '/^step +[0-9]+\//{print $4}'; }

# params_equal A B: every tensor both safetensors files hold at the same
# size (the parameters; not the moments, whose pieces differ) is
# byte-identical; prints how many were compared.
params_equal() {
  "$PY" - "$1" "$2" <<'EOF'
import json, struct, sys
def load(p):
    b = open(p, 'rb').read(); n = struct.unpack('<Q', b[:8])[0]; h = json.loads(b[8:8 + n]); d = b[8 + n:]
    return {k: d[v['data_offsets'][0]:v['data_offsets'][1]] for k, v in h.items() if k != '__metadata__'}
a, b = load(sys.argv[1]), load(sys.argv[2])
same = [k for k in a if not k.startswith('adamw.') and k in b]
bad = [k for k in same if a[k] != b[k]]
print(len(same), 'parameters compared;', len(bad), 'differ', bad[:3])
sys.exit(1 if bad or not same else 0)
EOF
}

# 1. Planned memory of GPT-2 small, 4 replicas.
# plan_memory NAME OPTIONS...: the plan into NAME.txt; stage 0's planned memory (MiB)
plan_memory() { local name=$1; shift; "$FUSIONC" plan models/gpt2.xml clusters/local-4.xml --stages 1 --replicas 4 \
  --micro-batches 1 --set batch=4 --compress none "$@" 2>&1 | tee "$work/$name.txt" | awk '$1 == "0" && /MiB$/{print $(NF-1)}'; }
whole=$(plan_memory whole --no-shard-optimizer)
sharded=$(plan_memory sharded --shard-optimizer)
echo "GPT-2 small, 4 replicas: planned memory ${whole} MiB unsharded, ${sharded} MiB sharded" >&2
awk -v a="$whole" -v b="$sharded" 'BEGIN { exit !(a > 0 && b > 0 && b <= 0.75 * a) }' && pass \
  || fail "sharded planned memory $sharded MiB is not at most 0.75x of $whole MiB: $(cat "$work"/whole.txt "$work"/sharded.txt)"
grep -q "^sharded optimizer: stage 0's 4 replicas each keep 1/4 of AdamW's moments" "$work/sharded.txt" && pass \
  || fail "the sharded plan does not say so: $(cat "$work/sharded.txt")"
planned=$(sed -n 's/^estimated step: \([0-9.]*\) ms.*/\1/p' "$work/sharded.txt")
simulated=$("$FUSIONC" simulate models/gpt2.xml clusters/local-4.xml --stages 1 --replicas 4 --micro-batches 1 \
  --set batch=4 --compress none --shard-optimizer 2>&1 | sed -n 's/^step 2: \([0-9.]*\) ms.*/\1/p')
awk -v p="$planned" -v s="$simulated" 'BEGIN { d = (s - p) / p; if (d < 0) d = -d; exit !(p > 0 && d <= 0.05) }' \
  && pass || fail "simulated step $simulated ms is not within 5% of the planned $planned ms"

# SGD keeps no moments: refused, saying why.
"$FUSIONC" plan models/gpt2.xml clusters/local-4.xml --set sgd=1 --set batch=8 --shard-optimizer >"$work/sgd" 2>&1 \
  && fail "--shard-optimizer with SGD was planned" || pass
grep -q "error: comm: --shard-optimizer splits AdamW's moments over the replicas; this model trains with plain SGD" \
  "$work/sgd" && pass || fail "SGD: $(cat "$work/sgd")"

# 2. The same mathematics.  A one-site copy of local-4: a ring either way.
sed -e '/<link from="siteA"/d' -e 's/<cluster name="local-4"/<cluster name="one-site"/' clusters/local-4.xml |
  awk '/<\/region>/ && !done { getline nxt; if (nxt ~ /<region name="siteB"/) { done = 1; next } print; print nxt; next } { print }' \
  >"$work/one-site.xml"
[ "$(grep -c '<region' "$work/one-site.xml")" = 1 ] && pass || fail "one-site.xml: $(cat "$work/one-site.xml")"

# The planner takes it on its own when its step is faster: devices with a
# slow memory (the update reads and writes 16 bytes a parameter) on 100 Gbps.
sed -e 's/memory-bandwidth="10GB\/s"/memory-bandwidth="0.5GB\/s"/g' \
  -e 's/bandwidth="10Gbps" latency="50us"/bandwidth="100Gbps" latency="5us"/' "$work/one-site.xml" >"$work/slowmem.xml"
"$FUSIONC" plan models/gpt2.xml "$work/slowmem.xml" --stages 1 --replicas 4 --micro-batches 1 --set batch=4 \
  >"$work/auto.txt" 2>&1 && pass || fail "plan on slow memory: $(cat "$work/auto.txt")"
grep -q "^note: --shard-optimizer taken: .* makes the estimated step [0-9.]* ms, against [0-9.]* ms unsharded" \
  "$work/auto.txt" && grep -q "^sharded optimizer: stage 0" "$work/auto.txt" && pass \
  || fail "the planner did not take --shard-optimizer where it is faster: $(cat "$work/auto.txt")"
# ... and not where it is slower (local-4's unsharded all-reduce is the hierarchy), nor when told not to
"$FUSIONC" plan models/gpt2.xml clusters/local-4.xml --stages 1 --replicas 4 --micro-batches 1 --set batch=4 \
  >"$work/local4.txt" 2>&1 && ! grep -q "shard" "$work/local4.txt" && pass \
  || fail "local-4 took sharding on its own: $(cat "$work/local4.txt")"
"$FUSIONC" plan models/gpt2.xml "$work/slowmem.xml" --stages 1 --replicas 4 --micro-batches 1 --set batch=4 \
  --no-shard-optimizer >"$work/never.txt" 2>&1 && ! grep -q "shard" "$work/never.txt" && pass \
  || fail "--no-shard-optimizer sharded: $(cat "$work/never.txt")"
"$FUSIONC" plan models/gpt2.xml clusters/local-4.xml --shard-optimizer --no-shard-optimizer >"$work/both" 2>&1 \
  && fail "both --shard-optimizer and --no-shard-optimizer were taken" || pass
grep -q "error: --shard-optimizer and --no-shard-optimizer: give one of them" "$work/both" && pass \
  || fail "both: $(cat "$work/both")"

# build NAME CLUSTER OPTIONS...
build() {
  local name=$1 cluster=$2; shift 2
  "$FUSIONC" compile models/gpt2.xml "$cluster" -o "$work/$name" "${model[@]}" --compress none --port-base "$base" \
    "$@" >"$work/$name.compile" 2>&1 && pass || fail "$name compile: $(tail -c 1500 "$work/$name.compile")"
  base=$((base + 20))
}
# train NAME RUN STEPS OPTIONS...: launch-local.sh of build NAME, saved in NAME.RUN.ckpt
train() {
  local name=$1 run=$2 steps=$3; shift 3
  if "$work/$name/launch-local.sh" --data "$work/corpus.txt" --steps "$steps" --seed 5 \
       --save "$work/$name.$run.ckpt" "$@" >"$work/$name.$run.out" 2>&1; then pass
  else fail "$name $run: $(tail -4 "$work/$name.$run.out"; tail -n 3 "$work/$name"/logs/*.log)"; fi
  losses "$work/$name.$run.out" >"$work/$name.$run.loss"
  expect_eq "$name $run steps" "$steps" "$(wc -l <"$work/$name.$run.loss")"
}

build plain1 "$work/one-site.xml" --stages 1 --replicas 4 --micro-batches 2 --no-shard-optimizer
build shard1 "$work/one-site.xml" --stages 1 --replicas 4 --micro-batches 2 --shard-optimizer
for name in plain1 shard1; do
  train $name noclip 10 --grad-clip 0 --save-every 5
  train $name clip 10
done
params_equal "$work/plain1.noclip.ckpt/step-10/checkpoint-cpu-b1.safetensors" \
  "$work/shard1.noclip.ckpt/step-10/checkpoint-cpu-b1.safetensors" >&2 && pass \
  || fail "one site, no clipping: sharded and unsharded parameters differ after 10 steps"
cmp -s "$work/plain1.noclip.loss" "$work/shard1.noclip.loss" && pass \
  || fail "one site, no clipping: losses differ: $(paste "$work/plain1.noclip.loss" "$work/shard1.noclip.loss")"
losses_within "one site, clipping: sharded" "$work/plain1.clip.loss" "$work/shard1.clip.loss" 1e-6

# Each replica's moments are its quarter: the arena shrinks, the part holds pieces.
arena() { sed -n 's/^arena *\([0-9]*\).*/\1/p' "$work/$1/cpu-a0/manifest.txt"; }
[ -n "$(arena shard1)" ] && [ "$(arena shard1)" -lt "$(arena plain1)" ] && pass \
  || fail "the sharded arena ($(arena shard1)) is not smaller than the unsharded ($(arena plain1))"
"$PY" - "$work/shard1.noclip.ckpt/step-10/checkpoint-cpu-a1.safetensors" <<'EOF' >&2 && pass || fail "the sharded part's moments are not quarters"
import json, struct, sys
b = open(sys.argv[1], 'rb').read(); h = json.loads(b[8:8 + struct.unpack('<Q', b[:8])[0]])
pieces = {l.split()[2]: (int(l.split()[0]), int(l.split()[1])) for l in h['__metadata__']['fusion.pieces'].splitlines()}
size = lambda k: eval('*'.join(map(str, h[k]['shape'])) or '1')
m = 'adamw.m.h.0.mlp.c_fc.weight'
print(m, h[m]['shape'], pieces[m], 'of', h['h.0.mlp.c_fc.weight']['shape'])
# replica 1 of 4 owns piece 2: elements [n*2/4, n*3/4)
n = size('h.0.mlp.c_fc.weight')
sys.exit(0 if pieces[m] == (n * 2 // 4, n) and size(m) == n * 3 // 4 - n * 2 // 4 else 1)
EOF

# Two regions (the unsharded all-reduce is the hierarchy there), and a pipeline.
build plain4 clusters/local-4.xml --stages 1 --replicas 4 --micro-batches 2 --no-shard-optimizer
build shard4 clusters/local-4.xml --stages 1 --replicas 4 --micro-batches 2 --shard-optimizer
build grid clusters/local-4.xml --stages 2 --replicas 2 --micro-batches 2 --shard-optimizer
grep -q "2 stages x 2 replicas" "$work/grid.compile" && pass || fail "grid: $(cat "$work/grid.compile")"
for name in plain4 shard4 grid; do train $name clip 10; done
losses_within "local-4, 1 x 4 sharded" "$work/plain4.clip.loss" "$work/shard4.clip.loss"
losses_within "local-4, 2 x 2 sharded" "$work/plain4.clip.loss" "$work/grid.clip.loss"

# 3. Resume across shardings: shard1's step 5, resumed unsharded and as the 2 x 2 grid.
for to in plain1 grid; do
  rm -rf "$work/resume.$to" && mkdir -p "$work/resume.$to" \
    && cp -r "$work/shard1.noclip.ckpt/step-5" "$work/resume.$to/" && pass || fail "copying step-5"
  if "$work/$to/launch-local.sh" --data "$work/corpus.txt" --steps 10 --seed 5 --grad-clip 0 \
       --resume "$work/resume.$to" --save "$work/resume.$to" >"$work/resume.$to.out" 2>&1; then pass
  else fail "resume as $to: $(tail -4 "$work/resume.$to.out"; tail -n 3 "$work/$to"/logs/*.log)"; fi
  grep -q "checkpoint of another compile" "$work/resume.$to.out" && pass \
    || fail "resume as $to: not read by name: $(head -5 "$work/resume.$to.out")"
  losses "$work/resume.$to.out" >"$work/resume.$to.loss"
  tail -n 5 "$work/shard1.noclip.loss" >"$work/rest.loss"
  losses_within "resumed as $to" "$work/rest.loss" "$work/resume.$to.loss"
done
params_equal "$work/shard1.noclip.ckpt/step-10/checkpoint-cpu-a0.safetensors" \
  "$work/resume.plain1/step-10/checkpoint-cpu-a0.safetensors" >&2 && pass \
  || fail "sharded step 5 resumed unsharded: parameters at step 10 differ from the uninterrupted run's"

# A replica's part gone: refused, naming what is missing.
rm -rf "$work/torn" && cp -r "$work/shard1.noclip.ckpt" "$work/torn" && rm -rf "$work/torn/step-10" \
  && rm "$work/torn/step-5/checkpoint-cpu-b0.safetensors" && pass || fail "making the torn checkpoint"
"$work/plain1/launch-local.sh" --data "$work/corpus.txt" --steps 10 --seed 5 --resume "$work/torn" \
  >"$work/torn.out" 2>&1 && fail "a sharded checkpoint missing a part was resumed" || pass
grep -q "the parts here hold [0-9]* of elements \[0, [0-9]*) of 'adamw\.[mv]\..*': a sharded checkpoint needs every replica's part" \
  "$work/torn.out" "$work"/plain1/logs/*.log && pass || fail "torn: no clear message: $(tail -5 "$work/torn.out")"

# 4. Emulated CUDA replicas: the sharded update runs on the device's piece.
cmodel=(--set vocab=256 --set ctx=16 --set layers=2 --set dim=32 --set heads=2 --set batch=4 --set seq=16)
for v in plain shard; do
  extra=(--no-shard-optimizer); [ $v = shard ] && extra=(--shard-optimizer)
  "$FUSIONC" compile models/gpt2.xml tests/clusters/two-gpu.xml -o "$work/cuda.$v" "${cmodel[@]}" --stages 1 \
    --replicas 2 --micro-batches 2 --compress none --cublas system --port-base "$base" "${extra[@]}" \
    >"$work/log" 2>&1 && pass || fail "CUDA $v compile: $(tail -c 1500 "$work/log")"
  base=$((base + 20))
done
build_emulated_cuda_driver "$work/lib" "$work"/cuda.*/gpu-*/kernels.cu && pass || fail "the emulated driver (above)"
for v in plain shard; do
  LD_LIBRARY_PATH="$work/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" "$work/cuda.$v/launch-local.sh" \
    --data "$work/corpus.txt" --steps 4 --seed 3 --grad-clip 0 --save "$work/cuda.$v.ckpt" >"$work/cuda.$v.out" 2>&1 \
    && pass || fail "CUDA $v run: $(tail -5 "$work/cuda.$v.out"; tail -n 3 "$work/cuda.$v"/logs/*.log)"
done
part=$(cd "$work/cuda.plain.ckpt/step-4" && ls checkpoint-*.safetensors | tail -1)
params_equal "$work/cuda.plain.ckpt/step-4/$part" "$work/cuda.shard.ckpt/step-4/$part" >&2 && pass \
  || fail "emulated CUDA: sharded and unsharded parameters differ after 4 steps"
finish
