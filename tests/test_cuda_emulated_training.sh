# A CUDA device's whole program, trained on the CPU through an emulated
# driver (tests/emu_driver/emu_driver.cpp: libcuda.so.1 and libcublas.so
# that run the bundle's own kernels, compiled as C++ against
# tests/unit/cuda_emu.h, and a reference sgemm).  What runs is the bundle as
# built: runtime/cuda/cuda.c loads the fat binary, copies the arena, launches
# every step, calls cuBLAS, reads the status word, and runs send/recv on
# the host.  The emulated streams are lazy queues (emu_driver.cpp), so a
# wait or synchronisation that cuda.c leaves out shows as stale data and a
# loss that differs.  A small GPT, seed 5, 6 steps:
#   - on one CUDA device: the first step's gradients (--dump-grads) within
#     1e-4 of each tensor's largest magnitude, the checkpoint after the
#     last (parameters and AdamW moments, which stay on the device) within
#     2e-3 (AdamW divides by the root of small moments: small differences
#     grow), and every loss within 1e-5 relative, of the same model on one
#     CPU device (the kernels and the reference sgemm sum in another
#     order); and each way, under a third of the bytes that copying the
#     whole arena every phase would move (only what the host touches
#     crosses);
#   - on clusters/local-mixed.xml as a 4-stage pipeline (two CPU devices,
#     then two CUDA devices, 4 micro-batches), with --recompute off (the
#     first CUDA stage keeps a stash), on (it replays its forward) and
#     keep:1 (partial replay: one waiting micro-batch whole, brought down
#     and up whole, the other replayed):
#     every loss within 1e-5 relative of the one CPU device's, and each
#     CUDA stage's recv and send copies ran on the copy stream (the
#     emulator's second stream: FUSION_EMU_COUNTS);
#   - a bad token id in the data stops the CUDA device with the CPU's
#     message ("token id ... out of range"), exit 1;
#   - --precision bf16 and fp16 on one CUDA device against the CPU device
#     in the same precision: every loss within 1e-3 (bf16) and 2e-4 (fp16)
#     relative, the first step's gradients within 4 unit roundoffs (4 x
#     2^-8, 4 x 2^-11) of each tensor's largest magnitude, and the products
#     went to cublasGemmEx (FUSION_EMU_COUNTS).  Why those bounds: the two
#     paths store the same activations in 16 bits, and the emulation harness
#     (test_cuda_emulation) holds each kernel to 2 unit roundoffs of the
#     CPU's (8 for a product whose f32 weight the CUDA path rounds first);
#     such differences, rare and of random sign, average out over a batch's
#     64 tokens and 256 classes, so a step's loss moves by a small fraction
#     of the unit roundoff (measured: 4e-5 bf16, 5e-6 fp16, over 6 steps)
#     and a gradient by a few (measured: 2 and 1.6);
#   - Llama (rmsnorm, rope, grouped-query attention with 4 query heads over
#     2 key/value heads, SwiGLU; 2 layers, seed 5, 6 steps) on one CUDA
#     device against the CPU device, in f32, bf16 and fp16, to the bounds
#     above: losses 1e-5, 1e-3, 2e-4 relative (measured: 0, 7e-5,
#     3.6e-5), the first step's gradients 1e-4 of each tensor's largest
#     magnitude in f32 and 4 unit roundoffs in 16 bits (measured: 4.4e-7,
#     2.4 and 2.5 unit roundoffs, the worst in k_proj, whose gradient sums
#     over the two query heads of each key/value head);
#   - the same Llama fine-tuned with LoRA on q_proj and v_proj (dropout
#     0.1) in bf16, its frozen base stored bf16 (--frozen-dtype): to
#     bf16's bounds;
#   - bf16 on the 4-stage pipeline of two CPU and two CUDA devices (bf16
#     activations and their gradients cross the links, to and from the
#     CUDA devices' host steps, and, with the links declared at 10 Mbps,
#     the tied embedding crosses to the last stage in bf16, as its product
#     rounds it: plan.txt says so): every
#     loss within 1e-3 of the one CPU device's bf16 run (measured 1.1e-5);
#   - fp16 with an overflow injected at step 3: the CUDA device skips the
#     step (its adamw kernels see clip_scale's NaN and say so in the flags
#     word), halves the loss scale as the CPU does, and its losses follow
#     the CPU's within 2e-4;
#   - --tf32 (f32 products on TF32 tensor cores: the emulated sgemm rounds
#     its operands to 10 mantissa bits, sums in f32): every loss within
#     1e-4 relative of the CPU's f32 (TF32's unit roundoff is 2^-11; measured
#     3e-6), and every product ran with TF32 allowed.
# Needs a C++ compiler and python3 (the kernel table); nothing is skipped.
. "$(dirname "$0")/lib.sh"
no_leak_scan_in_threaded_programs

model=(--set vocab=256 --set ctx=16 --set layers=2 --set dim=32 --set heads=2 --set batch=4 --set seq=16)
steps=6
cat /usr/share/common-licenses/* > "$work/corpus.txt"
claim_ports   # tests/lib.sh: this test's own ports
base=$ports

losses() { sed 's/^\[[^]]*\] //' "$1" | awk '/^step +[0-9]+\//{print $4}'; }
# close NAME REF FOUND: every loss within 1e-5 relative.
close() {
  paste "$2" "$3" | awk -v n="$1" -v steps=$steps '
    { d = $1 - $2; if (d < 0) d = -d; r = d / ($1 < 0 ? -$1 : $1); if (r > worst) worst = r }
    END { if (NR != steps) { printf "FAIL: %s: %d losses, expected %d\n", n, NR, steps > "/dev/stderr"; exit 1 }
          if (worst > 1e-5) { printf "FAIL: %s: loss differs from the CPU run by %.2g relative (bound 1e-5)\n", n, worst > "/dev/stderr"; exit 1 }
          printf "%s: worst relative loss difference from the CPU run %.2g over %d steps\n", n, worst, NR > "/dev/stderr" }' \
    && pass || fail "$1: losses $(paste -sd' ' "$3"), CPU $(paste -sd' ' "$2")"
}

"$FUSIONC" compile models/gpt2.xml clusters/local-1.xml -o "$work/cpu" "${model[@]}" >"$work/log" 2>&1 \
  && pass || fail "CPU compile: $(cat "$work/log")"
"$work/cpu/cpu0/fusion-cpu0" --data "$work/corpus.txt" --steps $steps --seed 5 --dump-grads "$work/cpu.grads" \
  --save "$work/cpu.ckpt" \
  >"$work/cpu.out" 2>&1 \
  && pass || fail "CPU run: $(tail -3 "$work/cpu.out")"
losses "$work/cpu.out" >"$work/cpu.loss"

# --cublas system: the emulated driver stands in for cuBLAS too, found on
# LD_LIBRARY_PATH; a bundled libcublas would be opened first.
"$FUSIONC" compile models/gpt2.xml tests/clusters/one-gpu.xml -o "$work/gpu" "${model[@]}" --cublas system >"$work/log" 2>&1 \
  && pass || fail "one-GPU compile: $(tail -c 1500 "$work/log")"
# 16-bit and TF32: a CPU and a CUDA bundle for each precision.
for p in bf16 fp16; do
  "$FUSIONC" compile models/gpt2.xml clusters/local-1.xml -o "$work/cpu-$p" "${model[@]}" --precision $p >"$work/log" 2>&1 \
    && pass || fail "CPU compile --precision $p: $(tail -3 "$work/log")"
  "$FUSIONC" compile models/gpt2.xml tests/clusters/one-gpu.xml -o "$work/gpu-$p" "${model[@]}" --precision $p \
    --cublas system >"$work/log" 2>&1 && pass || fail "one-GPU compile --precision $p: $(tail -c 1500 "$work/log")"
  grep -q "^precision  ${p/fp16/f16} activations" "$work/gpu-$p/gpu/manifest.txt" && pass \
    || fail "--precision $p: the manifest says: $(grep precision "$work/gpu-$p/gpu/manifest.txt")"
done
"$FUSIONC" compile models/gpt2.xml tests/clusters/one-gpu.xml -o "$work/gpu-tf32" "${model[@]}" --tf32 --cublas system \
  >"$work/log" 2>&1 && pass || fail "one-GPU compile --tf32: $(tail -c 1500 "$work/log")"
# Llama (rmsnorm, rope, grouped-query attention on q, k, v apart, SwiGLU):
# a CPU and a CUDA bundle in each precision; heads 4 over kv_heads 2.
llama=(--set vocab=256 --set ctx=16 --set layers=2 --set dim=32 --set heads=4 --set kv_heads=2 --set ffn=48 --set batch=4
       --set seq=16)
# lora-bf16: LoRA on q_proj and v_proj with dropout 0.1, bf16, the frozen
# base stored bf16 (--frozen-dtype): the base's products read it as it is,
# the other ops (embedding, rmsnorm) widen it; the host draws the dropout
# masks (f32 inputs) and the device multiplies its bf16 activations by them.
llama_flags() {
  case $1 in
  lora-bf16) echo --precision bf16 --lora rank=4,alpha=8,targets=q_proj,v_proj,dropout=0.1 --frozen-dtype bf16 ;;
  *) echo --precision "$1" ;;
  esac
}
for p in fp32 bf16 fp16 lora-bf16; do
  # shellcheck disable=SC2046
  "$FUSIONC" compile models/llama.xml clusters/local-1.xml -o "$work/llama-cpu-$p" "${llama[@]}" $(llama_flags $p) \
    >"$work/log" 2>&1 && pass || fail "Llama CPU compile $p: $(tail -3 "$work/log")"
  # shellcheck disable=SC2046
  "$FUSIONC" compile models/llama.xml tests/clusters/one-gpu.xml -o "$work/gpu-llama-$p" "${llama[@]}" \
    $(llama_flags $p) --cublas system >"$work/log" 2>&1 && pass ||
    fail "Llama one-GPU compile $p: $(tail -c 1500 "$work/log")"
done
# The bf16 pipeline on local-mixed with its links declared at 10 Mbps (the
# run does not emulate them): slow enough that the tied embedding pays for
# crossing in bf16 (passes.h: comm_half_pays).
sed 's/bandwidth="10Gbps"/bandwidth="10Mbps"/' clusters/local-mixed.xml >"$work/mixed-slow.xml"
"$FUSIONC" compile models/gpt2.xml "$work/mixed-slow.xml" -o "$work/mixed-bf16" "${model[@]}" --scheduler uniform \
  --micro-batches 4 --port-base "$base" --cublas system --precision bf16 >"$work/log" 2>&1 \
  && pass || fail "mixed compile --precision bf16: $(tail -c 1500 "$work/log")"
base=$((base + 20))
# The tied embedding reaches the last (CUDA) stage in bf16: its product
# rounds the weight so anyway (passes.h: comm_param_may_cross_half); on
# local-mixed's own 10 Gbps the casts cost more than the bytes save.
grep -q "^parameter wte.weight crosses from stage 0 to 3 in bf16" "$work/mixed-bf16/plan.txt" && pass \
  || fail "mixed, bf16: plan.txt does not send wte.weight in bf16: $(grep -i 'wte\|^link' "$work/mixed-bf16/plan.txt")"
"$FUSIONC" plan models/gpt2.xml clusters/local-mixed.xml -o "$work/mixed-fast" "${model[@]}" --scheduler uniform \
  --micro-batches 4 --precision bf16 >"$work/log" 2>&1 && pass || fail "mixed plan --precision bf16: $(tail -3 "$work/log")"
grep -q "crosses from stage" "$work/mixed-fast/plan.txt" \
  && fail "mixed, bf16, 10 Gbps: wte.weight crosses in bf16: $(grep crosses "$work/mixed-fast/plan.txt")" || pass
for r in off on keep:1; do
  "$FUSIONC" compile models/gpt2.xml clusters/local-mixed.xml -o "$work/mixed-$r" "${model[@]}" --scheduler uniform \
    --micro-batches 4 --recompute $r --port-base "$base" --cublas system >"$work/log" 2>&1 \
    && pass || fail "mixed compile: $(tail -c 1500 "$work/log")"
  base=$((base + 20))
  grep -q "4 stages x 1 replica" "$work/log" && pass || fail "mixed: not a 4-stage pipeline: $(cat "$work/log")"
done

# The emulated driver, with the kernels of every CUDA bundle.
build_emulated_cuda_driver "$work/lib" "$work"/gpu*/gpu/kernels.cu "$work"/mixed*/gpu-*/kernels.cu && pass \
  || fail "the emulated driver (above)"
export LD_LIBRARY_PATH="$work/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"

# One CUDA device.
FUSION_EMU_COUNTS="$work/gpu.counts" "$work/gpu/gpu/fusion-gpu" --data "$work/corpus.txt" --steps $steps --seed 5 \
  --dump-grads "$work/gpu.grads" --save "$work/gpu.ckpt" >"$work/gpu.out" 2>&1 && pass || fail "one-GPU run: $(tail -5 "$work/gpu.out")"
losses "$work/gpu.out" >"$work/gpu.loss"
close "one CUDA device" "$work/cpu.loss" "$work/gpu.loss"
if python3 tests/emu_driver/compare_grads.py "$work/cpu.grads" "$work/gpu.grads" 1e-4 >"$work/grads.txt" 2>&1; then pass
else fail "one CUDA device: gradients differ from the CPU's: $(cat "$work/grads.txt")"; fi
echo "one CUDA device, first step's gradients against the CPU's: $(head -1 "$work/grads.txt")" >&2
# The checkpoint: parameters and AdamW's moments after the last step, which
# live on the device and come down for it.
if python3 tests/emu_driver/compare_grads.py "$work/cpu.ckpt/latest/checkpoint.safetensors" \
     "$work/gpu.ckpt/latest/checkpoint.safetensors" 2e-3 >"$work/ckpt.txt" 2>&1; then pass
else fail "one CUDA device: the checkpoint differs from the CPU's: $(cat "$work/ckpt.txt")"; fi
echo "one CUDA device, checkpoint after $steps steps against the CPU's: $(head -1 "$work/ckpt.txt")" >&2
read -r _ launches _ gemms _ _ up _ _ down _ <"$work/gpu.counts" 2>/dev/null || launches=0 gemms=0
[ "${launches:-0}" -gt 0 ] && [ "${gemms:-0}" -gt 0 ] && pass \
  || fail "one-GPU run: the emulated driver saw ${launches:-0} launches and ${gemms:-0} products"
arena=$(awk '/^arena/ { print $2 }' "$work/gpu/gpu/manifest.txt")
whole=$((steps * 3 * arena))   # forward, backward, update: the whole arena each way each phase
[ "${up:-$whole}" -lt $((whole / 3)) ] && [ "${down:-$whole}" -lt $((whole / 3)) ] && pass \
  || fail "one-GPU run: copied ${up:-?} bytes up and ${down:-?} down; the whole arena a phase would be $whole each way"
echo "one CUDA device: ${up:-?} bytes up, ${down:-?} down over $steps steps (the whole arena each phase: $whole each way)" >&2
echo "one CUDA device, $steps steps: $(cat "$work/gpu.counts")" >&2
# The run's training settings (runtime/train_settings.h) reach the kernels
# through the launch's arguments: the same overrides on both devices give
# the same losses, and other losses than the defaults.
settings=(--lr 1e-3 --min-lr 1e-4 --warmup 1 --lr-schedule cosine --weight-decay 0.02 --grad-clip 0.3)
"$work/cpu/cpu0/fusion-cpu0" --data "$work/corpus.txt" --steps $steps --seed 5 "${settings[@]}" >"$work/cpu-set.out" 2>&1 \
  && pass || fail "CPU run with settings: $(tail -3 "$work/cpu-set.out")"
"$work/gpu/gpu/fusion-gpu" --data "$work/corpus.txt" --steps $steps --seed 5 "${settings[@]}" >"$work/gpu-set.out" 2>&1 \
  && pass || fail "one-GPU run with settings: $(tail -5 "$work/gpu-set.out")"
losses "$work/cpu-set.out" >"$work/cpu-set.loss"
losses "$work/gpu-set.out" >"$work/gpu-set.loss"
close "one CUDA device, run-time settings" "$work/cpu-set.loss" "$work/gpu-set.loss"
[ "$(tail -1 "$work/cpu-set.loss")" != "$(tail -1 "$work/cpu.loss")" ] && pass || fail "the settings changed no loss"
paste <(grep -o 'gnorm [0-9.e+-]*' "$work/cpu-set.out" | cut -d' ' -f2) <(grep -o 'gnorm [0-9.e+-]*' "$work/gpu-set.out" | cut -d' ' -f2) |
  awk -v steps=$steps '{ d = $1 - $2; if (d < 0) d = -d; if (!($1 > 0) || d > 0.01 * $1) bad = 1 } END { exit bad || NR != steps }' \
  && pass || fail "one CUDA device: gradient norms $(grep -o 'gnorm [0-9.e+-]*' "$work/gpu-set.out" | xargs), CPU $(grep -o 'gnorm [0-9.e+-]*' "$work/cpu-set.out" | xargs)"
# No communication: nothing crosses on the copy stream.
expect_eq "one CUDA device: copies on the second stream" "second-stream htod 0 dtoh 0" \
  "$(grep -o 'second-stream htod [0-9]* dtoh [0-9]*' "$work/gpu.counts")"

# bf16 and fp16: one CUDA device against the CPU device in the same precision.
# close_within NAME BOUND REF FOUND: every loss within BOUND relative.
close_within() {
  paste "$3" "$4" | awk -v n="$1" -v b="$2" -v steps=$steps '
    { d = $1 - $2; if (d < 0) d = -d; r = d / ($1 < 0 ? -$1 : $1); if (r > worst) worst = r }
    END { if (NR != steps) { printf "FAIL: %s: %d losses, expected %d\n", n, NR, steps > "/dev/stderr"; exit 1 }
          if (worst > b) { printf "FAIL: %s: loss differs from the CPU run by %.2g relative (bound %g)\n", n, worst, b > "/dev/stderr"; exit 1 }
          printf "%s: worst relative loss difference from the CPU run %.2g over %d steps (bound %g)\n", n, worst, NR, b > "/dev/stderr" }' \
    && pass || fail "$1: losses $(paste -sd' ' "$4"), CPU $(paste -sd' ' "$3")"
}
for p in bf16 fp16; do
  case $p in bf16) bound=1e-3 grads=1.5625e-2 ;; fp16) bound=2e-4 grads=1.953125e-3 ;; esac
  "$work/cpu-$p/cpu0/fusion-cpu0" --data "$work/corpus.txt" --steps $steps --seed 5 --dump-grads "$work/cpu-$p.grads" \
    >"$work/cpu-$p.out" 2>&1 && pass || fail "CPU run --precision $p: $(tail -3 "$work/cpu-$p.out")"
  FUSION_EMU_COUNTS="$work/gpu-$p.counts" "$work/gpu-$p/gpu/fusion-gpu" --data "$work/corpus.txt" --steps $steps --seed 5 \
    --dump-grads "$work/gpu-$p.grads" >"$work/gpu-$p.out" 2>&1 && pass || fail "one-GPU run --precision $p: $(tail -5 "$work/gpu-$p.out")"
  losses "$work/cpu-$p.out" >"$work/cpu-$p.loss"
  losses "$work/gpu-$p.out" >"$work/gpu-$p.loss"
  close_within "one CUDA device, $p" $bound "$work/cpu-$p.loss" "$work/gpu-$p.loss"
  if python3 tests/emu_driver/compare_grads.py "$work/cpu-$p.grads" "$work/gpu-$p.grads" $grads >"$work/grads.txt" 2>&1; then pass
  else fail "one CUDA device, $p: gradients differ from the CPU's: $(cat "$work/grads.txt")"; fi
  echo "one CUDA device, $p, first step's gradients against the CPU's (bound $grads): $(head -1 "$work/grads.txt")" >&2
  echo "one CUDA device, $p, $steps steps: $(cat "$work/gpu-$p.counts")" >&2
  set -- $(cat "$work/gpu-$p.counts" 2>/dev/null)
  [ "${4:-0}" -gt 0 ] && [ "${17:-0}" = "${4:-0}" ] && pass \
    || fail "one CUDA device, $p: expected every product on cublasGemmEx (gemms = gemm-ex > 0), found: $*"
done
# Llama on one CUDA device against the CPU device in the same precision,
# to GPT's bounds (the top of the file).
for p in fp32 bf16 fp16 lora-bf16; do
  case $p in fp32) bound=1e-5 grads=1e-4 ;; *bf16) bound=1e-3 grads=1.5625e-2 ;; fp16) bound=2e-4 grads=1.953125e-3 ;; esac
  "$work/llama-cpu-$p/cpu0/fusion-cpu0" --data "$work/corpus.txt" --steps $steps --seed 5 \
    --dump-grads "$work/llama-cpu-$p.grads" >"$work/llama-cpu-$p.out" 2>&1 \
    && pass || fail "Llama CPU run --precision $p: $(tail -3 "$work/llama-cpu-$p.out")"
  FUSION_EMU_COUNTS="$work/llama-gpu-$p.counts" "$work/gpu-llama-$p/gpu/fusion-gpu" --data "$work/corpus.txt" \
    --steps $steps --seed 5 --dump-grads "$work/llama-gpu-$p.grads" >"$work/llama-gpu-$p.out" 2>&1 \
    && pass || fail "Llama one-GPU run --precision $p: $(tail -5 "$work/llama-gpu-$p.out")"
  losses "$work/llama-cpu-$p.out" >"$work/llama-cpu-$p.loss"
  losses "$work/llama-gpu-$p.out" >"$work/llama-gpu-$p.loss"
  close_within "Llama, one CUDA device, $p" $bound "$work/llama-cpu-$p.loss" "$work/llama-gpu-$p.loss"
  if python3 tests/emu_driver/compare_grads.py "$work/llama-cpu-$p.grads" "$work/llama-gpu-$p.grads" $grads \
       >"$work/grads.txt" 2>&1; then pass
  else fail "Llama, one CUDA device, $p: gradients differ from the CPU's: $(cat "$work/grads.txt")"; fi
  echo "Llama, one CUDA device, $p, first step's gradients against the CPU's (bound $grads): $(head -1 "$work/grads.txt")" >&2
  set -- $(cat "$work/llama-gpu-$p.counts" 2>/dev/null)
  [ $p = fp32 ] || { [ "${4:-0}" -gt 0 ] && [ "${17:-0}" = "${4:-0}" ] && pass; } \
    || fail "Llama, one CUDA device, $p: expected every product on cublasGemmEx (gemms = gemm-ex > 0), found: $*"
done
# fp16 with an overflow at step 3: skipped on both, the scale halved, the same losses after.
"$work/cpu-fp16/cpu0/fusion-cpu0" --data "$work/corpus.txt" --steps $steps --seed 5 --inject-overflow 3 \
  >"$work/cpu-ov.out" 2>&1 && pass || fail "CPU run, fp16, overflow at 3: $(tail -3 "$work/cpu-ov.out")"
"$work/gpu-fp16/gpu/fusion-gpu" --data "$work/corpus.txt" --steps $steps --seed 5 --inject-overflow 3 \
  >"$work/gpu-ov.out" 2>&1 && pass || fail "one-GPU run, fp16, overflow at 3: $(tail -5 "$work/gpu-ov.out")"
expect_eq "one CUDA device, fp16, overflow at 3: the scaler's word" \
  "step     3: gradients overflowed: step skipped, loss scale 65536 -> 32768" \
  "$(grep 'gradients overflowed' "$work/gpu-ov.out")"
losses "$work/cpu-ov.out" >"$work/cpu-ov.loss"
losses "$work/gpu-ov.out" >"$work/gpu-ov.loss"
close_within "one CUDA device, fp16, overflow at step 3" 2e-4 "$work/cpu-ov.loss" "$work/gpu-ov.loss"
# bf16 through the mixed pipeline: 16-bit activations on the links to and from the CUDA stages.
if FUSION_EMU_COUNTS="$work/mixed-bf16.counts" "$work/mixed-bf16/launch-local.sh" --data "$work/corpus.txt" \
     --steps $steps --seed 5 >"$work/mixed.out" 2>&1; then pass
else fail "mixed run, bf16: $(tail -5 "$work/mixed.out"; tail -n 3 "$work/mixed-bf16"/logs/*.log)"; fi
reporter=$(sed -n 's/^reporter=//p' "$work/mixed-bf16/launch-local.sh")
losses "$work/mixed-bf16/logs/$reporter.log" >"$work/mixed-bf16.loss"
close_within "mixed pipeline (CPU, CPU, CUDA, CUDA), bf16" 1e-3 "$work/cpu-bf16.loss" "$work/mixed-bf16.loss"
while read -r line; do
  echo "mixed, bf16, a CUDA stage: $line" >&2
  set -- $line
  [ "${4:-0}" -gt 0 ] && [ "${17:-0}" = "${4:-0}" ] && [ "${13:-0}" -gt 0 ] && [ "${15:-0}" -gt 0 ] && pass \
    || fail "mixed, bf16: expected products on GemmEx and recv and send copies on the second stream, found: $line"
done <"$work/mixed-bf16.counts"
# --tf32: against the CPU's f32.
FUSION_EMU_COUNTS="$work/gpu-tf32.counts" "$work/gpu-tf32/gpu/fusion-gpu" --data "$work/corpus.txt" --steps $steps \
  --seed 5 >"$work/gpu-tf32.out" 2>&1 && pass || fail "one-GPU run --tf32: $(tail -5 "$work/gpu-tf32.out")"
losses "$work/gpu-tf32.out" >"$work/gpu-tf32.loss"
close_within "one CUDA device, tf32" 1e-4 "$work/cpu.loss" "$work/gpu-tf32.loss"
set -- $(cat "$work/gpu-tf32.counts" 2>/dev/null)
[ "${4:-0}" -gt 0 ] && [ "${19:-0}" = "${4:-0}" ] && pass \
  || fail "one CUDA device, tf32: expected every product with TF32 allowed (gemms = tf32 > 0), found: $*"

# Two CPU and two CUDA stages: the first CUDA stage keeps a waiting
# micro-batch's activations (off), or its forward's inputs and runs the
# forward again (on), or one of its two waiting micro-batches whole and
# the other's inputs (keep:1).
for r in off on keep:1; do
  if FUSION_EMU_COUNTS="$work/mixed-$r.counts" "$work/mixed-$r/launch-local.sh" --data "$work/corpus.txt" \
       --steps $steps --seed 5 >"$work/mixed.out" 2>&1; then pass
  else fail "mixed run, recompute $r: $(tail -5 "$work/mixed.out"; tail -n 3 "$work/mixed-$r"/logs/*.log)"; fi
  # The reporter's own log: launch-local.sh's echo of it (tail -F) can miss
  # lines on a loaded machine.
  reporter=$(sed -n 's/^reporter=//p' "$work/mixed-$r/launch-local.sh")
  losses "$work/mixed-$r/logs/$reporter.log" >"$work/mixed.loss"
  close "mixed pipeline (CPU, CPU, CUDA, CUDA), recompute $r" "$work/cpu.loss" "$work/mixed.loss"
  # Each CUDA stage receives and sends: its copies to and from the host
  # arena go on cuda.c's copy stream (the emulator's second stream).
  expect_eq "mixed, recompute $r: CUDA devices that wrote counts" 2 "$(wc -l <"$work/mixed-$r.counts" 2>/dev/null)"
  while read -r line; do
    echo "mixed, recompute $r, a CUDA stage: $line" >&2
    set -- $line
    [ "${13:-0}" -gt 0 ] && [ "${15:-0}" -gt 0 ] && pass \
      || fail "mixed, recompute $r: expected recv and send copies on the second stream (htod > 0, dtoh > 0), found: $line"
  done <"$work/mixed-$r.counts"
done

# --trace on a CUDA device: a span for each op run on the GPU, which ends
# when the stream has run it (cuda.c synchronises while tracing): its time
# on the GPU, not its launch's.  The emulated streams run a kernel only when
# something waits for them (a product, the phase's end): spans around the
# launches alone would give the layer norms and attentions, kernels only,
# a few microseconds, and their time to the product after them.
"$work/gpu/gpu/fusion-gpu" --data "$work/corpus.txt" --steps 3 --seed 5 --trace "$work/gpu-trace.json" \
  >"$work/gpu-trace.out" 2>&1 && pass || fail "one-GPU run with --trace: $(tail -3 "$work/gpu-trace.out")"
if python3 - "$work/gpu-trace.json" >"$work/trace.txt" 2>&1 <<'PY'; then pass
import json, sys
events = json.load(open(sys.argv[1]))
ops = [e for e in events if e.get("ph") == "X" and e.get("cat") == "forward" and e["args"]["step"] == 2]
forward = [e for e in events if e.get("cat") == "micro-batch" and e["name"] == "forward 0" and e["args"]["step"] == 2]
kernels = [e for e in ops if e["name"].endswith((".attn", "ln_1", "ln_2", "ln_f"))]
share = sum(e["dur"] for e in kernels) / forward[0]["dur"]
print(f"{len(ops)} forward op spans in step 2; its {len(kernels)} attentions and layer norms take {share:.0%} of it")
sys.exit(0 if len(ops) >= 10 and len(kernels) == 7 and share >= 0.3 else 1)
PY
else fail "--trace on a CUDA device: $(cat "$work/trace.txt")"; fi
echo "one CUDA device, --trace: $(cat "$work/trace.txt")" >&2
expect_eq "one CUDA device: losses with --trace" "$(head -3 "$work/gpu.loss")" "$(losses "$work/gpu-trace.out")"

# Validation on a CUDA device (--val-data): the forward alone, its loss the
# CPU's within 1e-5, the training's losses the same as without it.
tail -c 30000 /usr/share/common-licenses/GPL-3 >"$work/val.txt"
val_losses() { awk '/^step / && /val_loss/ {print $NF}' "$1"; }
"$work/cpu/cpu0/fusion-cpu0" --data "$work/corpus.txt" --steps $steps --seed 5 --val-data "$work/val.txt" \
  --val-every 3 >"$work/cpu-val.out" 2>&1 && pass || fail "CPU run with validation: $(tail -3 "$work/cpu-val.out")"
"$work/gpu/gpu/fusion-gpu" --data "$work/corpus.txt" --steps $steps --seed 5 --val-data "$work/val.txt" \
  --val-every 3 >"$work/gpu-val.out" 2>&1 && pass || fail "one-GPU run with validation: $(tail -3 "$work/gpu-val.out")"
expect_eq "one CUDA device: training losses with validation" "$(cat "$work/gpu.loss")" "$(losses "$work/gpu-val.out")"
val_losses "$work/cpu-val.out" >"$work/cpu.val"
val_losses "$work/gpu-val.out" >"$work/gpu.val"
expect_eq "one CUDA device: validations" 2 "$(wc -l <"$work/gpu.val")"
losses_within "one CUDA device, val_loss" "$work/cpu.val" "$work/gpu.val"

# A bad token id in a shard is refused when the file opens (data.h), naming it.
python3 - "$work/bad.bin" <<'PY'
import struct, sys
# An llm.c token shard (data.h): header of 256 int32 (magic 20240520, version 1, count), then uint16 tokens.
n = 4096
with open(sys.argv[1], "wb") as f:
    f.write(struct.pack("<256i", 20240520, 1, n, *([0] * 253)))
    f.write(struct.pack(f"<{n}H", *([300] * n)))   # 300 >= vocab 256
PY
"$work/gpu/gpu/fusion-gpu" --data "$work/bad.bin" --steps 1 --seed 5 >"$work/bad.out" 2>&1
expect_eq "bad token id in a shard: exit status" 1 "$?"
grep -q "bad.bin: token id 300 at position 0 is outside the model's vocabulary of 256" "$work/bad.out" && pass \
  || fail "bad token id in a shard: found: $(tail -3 "$work/bad.out")"
# One that gets past the loader (--inputs): the CUDA kernel reports it
# through the status word, the runtime names it as the CPU kernels do.
python3 tests/emu_driver/bad_token_inputs.py "$work/cpu.grads" "$work/bad.st"
"$work/gpu/gpu/fusion-gpu" --inputs "$work/bad.st" --steps 1 --seed 5 >"$work/bad.out" 2>&1
expect_eq "bad token id: exit status" 1 "$?"
grep -q "token id 300 at position 0 is out of range" "$work/bad.out" && pass \
  || fail "bad token id: expected 'token id 300 at position 0 is out of range', found: $(tail -3 "$work/bad.out")"
finish
