#!/usr/bin/env bash
# real_gpu_check.sh: the CUDA bundles of tests/test_cuda_emulated_training.sh
# on a real NVIDIA GPU, against CPU runs made here, plus GPT-2 small's
# step time against PyTorch on the same GPU.  CI has no GPU: this runs only
# where one is lent (the workplace's device tool), in two halves.
#
#   bench/real_gpu_check.sh prepare BUILD_DIR DIR
#       here, on a machine with the toolkit: compiles every CUDA bundle for
#       sm_90 (H100/H200; ARCH=sm_80 for a dry run on the emulated driver) with --cublas system (the GPU machine has the
#       toolkit; the bundled cuBLAS is 570 MB), one for sm_80 alone (the
#       driver compiles its PTX: the "newer GPU" path), the CPU bundles,
#       and runs the CPU references; one copy of the bundles' lib/ is kept.
#   bench/real_gpu_check.sh run DIR
#       on the GPU machine: runs each CUDA bundle as the emulated test does
#       and holds it to the same bounds against the CPU references; then
#       times GPT-2 small (124M) on the GPU, fusion against PyTorch.
#
# Prints "ok: ..." or "FAIL: ..." a check, one line a timing; exit 1 on any
# failure.  TIMING=0 leaves the timing out.
set -u
verb=${1:?usage: real_gpu_check.sh prepare BUILD_DIR DIR | run DIR}
cd "$(dirname "$0")/.."
steps=6
model=(--set vocab=256 --set ctx=16 --set layers=2 --set dim=32 --set heads=2 --set batch=4 --set seq=16)
llama=(--set vocab=256 --set ctx=16 --set layers=2 --set dim=32 --set heads=4 --set kv_heads=2 --set ffn=48 --set batch=4
       --set seq=16)
# GPT-2 small for the timing: 124M parameters, 8 sequences of 512 tokens.
big=(--set batch=8 --set seq=512)
llama_flags() {
  case $1 in
  lora-bf16) echo --precision bf16 --lora rank=4,alpha=8,targets=q_proj,v_proj,dropout=0.1 --frozen-dtype bf16 ;;
  *) echo --precision "$1" ;;
  esac
}
losses() { sed 's/^\[[^]]*\] //' "$1" | awk '/^step +[0-9]+\//{print $4}'; }

prepare() {
  local build=$1 w=$2 p
  local fusionc=$build/fusionc
  rm -rf "$w" && mkdir -p "$w" || exit 1
  cat /usr/share/common-licenses/* >"$w/corpus.txt"
  tail -c 30000 /usr/share/common-licenses/GPL-3 >"$w/val.txt"
  sed "s/arch=\"sm_80\"/arch=\"${ARCH:-sm_90}\"/" tests/clusters/one-gpu.xml >"$w/one-h100.xml"
  c() { "$fusionc" compile "$@" >"$w/log" 2>&1 || { echo "FAIL: compile $*: $(tail -c 1500 "$w/log")"; exit 1; }; }
  c models/gpt2.xml clusters/local-1.xml -o "$w/cpu" "${model[@]}"
  c models/gpt2.xml "$w/one-h100.xml" -o "$w/gpu" "${model[@]}" --cublas system
  c models/gpt2.xml tests/clusters/one-gpu.xml -o "$w/gpu-sm80" "${model[@]}" --cublas system
  c models/gpt2.xml "$w/one-h100.xml" -o "$w/gpu-tf32" "${model[@]}" --tf32 --cublas system
  for p in bf16 fp16; do
    c models/gpt2.xml clusters/local-1.xml -o "$w/cpu-$p" "${model[@]}" --precision $p
    c models/gpt2.xml "$w/one-h100.xml" -o "$w/gpu-$p" "${model[@]}" --precision $p --cublas system
  done
  for p in fp32 bf16 fp16 lora-bf16; do
    # shellcheck disable=SC2046
    c models/llama.xml clusters/local-1.xml -o "$w/llama-cpu-$p" "${llama[@]}" $(llama_flags $p)
    # shellcheck disable=SC2046
    c models/llama.xml "$w/one-h100.xml" -o "$w/llama-gpu-$p" "${llama[@]}" $(llama_flags $p) --cublas system
  done
  c models/gpt2.xml clusters/local-mixed.xml -o "$w/mixed-off" "${model[@]}" --scheduler uniform --micro-batches 4 \
    --recompute off --port-base 31000 --cublas system
  c models/gpt2.xml clusters/local-mixed.xml -o "$w/mixed-on" "${model[@]}" --scheduler uniform --micro-batches 4 \
    --recompute on --port-base 31040 --cublas system
  c models/gpt2.xml clusters/local-mixed.xml -o "$w/mixed-bf16" "${model[@]}" --scheduler uniform --micro-batches 4 \
    --port-base 31080 --cublas system --precision bf16
  c models/gpt2.xml "$w/one-h100.xml" -o "$w/big-fp32" "${big[@]}" --cublas system
  c models/gpt2.xml "$w/one-h100.xml" -o "$w/big-bf16" "${big[@]}" --precision bf16 --cublas system
  # The CPU references, as the emulated test makes them.
  r() { local out=$1; shift; "$@" >"$w/$out.out" 2>&1 || { echo "FAIL: $*: $(tail -3 "$w/$out.out")"; exit 1; }
        losses "$w/$out.out" >"$w/$out.loss"; }
  local run=(--data "$w/corpus.txt" --steps $steps --seed 5)
  r cpu "$w/cpu/cpu0/fusion-cpu0" "${run[@]}" --dump-grads "$w/cpu.grads" --save "$w/cpu.ckpt"
  r cpu-set "$w/cpu/cpu0/fusion-cpu0" "${run[@]}" --lr 1e-3 --min-lr 1e-4 --warmup 1 --lr-schedule cosine \
    --weight-decay 0.02 --grad-clip 0.3
  r cpu-val "$w/cpu/cpu0/fusion-cpu0" "${run[@]}" --val-data "$w/val.txt" --val-every 3
  for p in bf16 fp16; do r cpu-$p "$w/cpu-$p/cpu0/fusion-cpu0" "${run[@]}" --dump-grads "$w/cpu-$p.grads"; done
  r cpu-ov "$w/cpu-fp16/cpu0/fusion-cpu0" "${run[@]}" --inject-overflow 3
  for p in fp32 bf16 fp16 lora-bf16; do
    r llama-cpu-$p "$w/llama-cpu-$p/cpu0/fusion-cpu0" "${run[@]}" --dump-grads "$w/llama-cpu-$p.grads"
  done
  # A safetensors --inputs with token ids past the vocabulary.
  /usr/bin/python3 tests/emu_driver/bad_token_inputs.py "$w/cpu.grads" "$w/bad.st" || exit 1
  # One lib/ travels: every bundle's is the same files.
  mv "$w/cpu/cpu0/lib" "$w/lib"
  find "$w" -mindepth 3 -maxdepth 3 -type d -name lib -exec rm -rf {} +
  echo "prepared $w: $(du -sh "$w" | cut -f1)"
}

failures=0
ok() { echo "ok: $*"; }
bad() { failures=$((failures + 1)); echo "FAIL: $*"; }
# within NAME BOUND REF FOUND: every loss within BOUND relative, $steps of them.
within() {
  local msg
  msg=$(paste "$3" "$4" | awk -v b="$2" -v steps=$steps '
    { d = $1 - $2; if (d < 0) d = -d; r = d / ($1 < 0 ? -$1 : $1); if (r > worst) worst = r }
    END { printf "%d losses, worst relative difference from the CPU %.2g (bound %g)", NR, worst, b
          exit !(NR == steps && worst <= b) }') && ok "$1: $msg" || bad "$1: $msg; GPU $(paste -sd' ' "$4"), CPU $(paste -sd' ' "$3")"
}
grads() {
  local msg
  local status
  msg=$(python3 tests/emu_driver/compare_grads.py "$3" "$4" "$2" 2>&1)
  status=$?
  msg=$(head -1 <<<"$msg")
  [ $status = 0 ] && ok "$1: $msg (bound $2)" || bad "$1: $msg (bound $2)"
}

run() {
  local w=$1 p d
  nvidia-smi --query-gpu=name,driver_version,compute_cap,memory.total --format=csv,noheader || echo "no nvidia-smi"
  # The driver is on the loader's path; cuBLAS comes with the toolkit or
  # PyTorch's wheels.  CUBLAS=PATH names it (a dry run here: the emulated
  # driver's folder, tests/lib.sh's build_emulated_cuda_driver).
  local cublas=${CUBLAS:-}
  [ -n "$cublas" ] || cublas=$(ls /usr/local/cuda*/lib64/libcublas.so.13 /usr/local/cuda*/targets/x86_64-linux/lib/libcublas.so.13 \
    "$(python3 -c 'import nvidia.cublas, os; print(os.path.dirname(nvidia.cublas.__file__))' 2>/dev/null)"/lib/libcublas.so.13 \
    2>/dev/null | head -1)
  [ -n "$cublas" ] || { bad "no libcublas.so.13 on this machine"; return; }
  echo "cuBLAS: $cublas"
  export LD_LIBRARY_PATH="$(dirname "$cublas")${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  for d in "$w"/*/*/; do [ -x "$d"/fusion-* ] && ln -sfn "$(cd "$w" && pwd)/lib" "$d/lib"; done
  local run=(--data "$w/corpus.txt" --steps $steps --seed 5)
  g() { local out=$1; shift; timeout 45 "$@" >"$w/$out.out" 2>&1 && losses "$w/$out.out" >"$w/$out.loss" ||
        { bad "$out: exit $?: $(tail -5 "$w/$out.out")"; : >"$w/$out.loss"; }; }

  g gpu "$w/gpu/gpu/fusion-gpu" "${run[@]}" --dump-grads "$w/gpu.grads" --save "$w/gpu.ckpt"
  within "GPT, f32" 1e-5 "$w/cpu.loss" "$w/gpu.loss"
  grads "GPT, f32, first step's gradients" 1e-4 "$w/cpu.grads" "$w/gpu.grads"
  grads "GPT, f32, checkpoint after $steps steps" 2e-3 "$w/cpu.ckpt/latest/checkpoint.safetensors" \
    "$w/gpu.ckpt/latest/checkpoint.safetensors"
  g gpu-sm80 "$w/gpu-sm80/gpu/fusion-gpu" "${run[@]}"
  grep -i "ptx\|cubin\|compute capability" "$w/gpu-sm80.out" | head -2
  within "GPT, f32, a bundle for sm_80 alone (the driver compiles its PTX)" 1e-5 "$w/cpu.loss" "$w/gpu-sm80.loss"
  g gpu-set "$w/gpu/gpu/fusion-gpu" "${run[@]}" --lr 1e-3 --min-lr 1e-4 --warmup 1 --lr-schedule cosine \
    --weight-decay 0.02 --grad-clip 0.3
  within "GPT, f32, run-time settings" 1e-5 "$w/cpu-set.loss" "$w/gpu-set.loss"
  for p in bf16 fp16; do
    case $p in bf16) bound=1e-3 gb=1.5625e-2 ;; fp16) bound=2e-4 gb=1.953125e-3 ;; esac
    g gpu-$p "$w/gpu-$p/gpu/fusion-gpu" "${run[@]}" --dump-grads "$w/gpu-$p.grads"
    within "GPT, $p" $bound "$w/cpu-$p.loss" "$w/gpu-$p.loss"
    grads "GPT, $p, first step's gradients" $gb "$w/cpu-$p.grads" "$w/gpu-$p.grads"
  done
  g gpu-tf32 "$w/gpu-tf32/gpu/fusion-gpu" "${run[@]}"
  within "GPT, --tf32 against the CPU's f32" 1e-4 "$w/cpu.loss" "$w/gpu-tf32.loss"
  for p in fp32 bf16 fp16 lora-bf16; do
    case $p in fp32) bound=1e-5 gb=1e-4 ;; *bf16) bound=1e-3 gb=1.5625e-2 ;; fp16) bound=2e-4 gb=1.953125e-3 ;; esac
    g llama-gpu-$p "$w/llama-gpu-$p/gpu/fusion-gpu" "${run[@]}" --dump-grads "$w/llama-gpu-$p.grads"
    within "Llama, $p" $bound "$w/llama-cpu-$p.loss" "$w/llama-gpu-$p.loss"
    grads "Llama, $p, first step's gradients" $gb "$w/llama-cpu-$p.grads" "$w/llama-gpu-$p.grads"
  done
  g gpu-ov "$w/gpu-fp16/gpu/fusion-gpu" "${run[@]}" --inject-overflow 3
  grep -q "step     3: gradients overflowed: step skipped, loss scale 65536 -> 32768" "$w/gpu-ov.out" \
    && ok "fp16, overflow injected at step 3: skipped, scale halved" || bad "fp16 overflow: $(grep -i overflow "$w/gpu-ov.out")"
  within "GPT, fp16, overflow at step 3" 2e-4 "$w/cpu-ov.loss" "$w/gpu-ov.loss"
  g gpu-val "$w/gpu/gpu/fusion-gpu" "${run[@]}" --val-data "$w/val.txt" --val-every 3
  awk '/^step / && /val_loss/ {print $NF}' "$w/cpu-val.out" >"$w/cpu.val"
  awk '/^step / && /val_loss/ {print $NF}' "$w/gpu-val.out" >"$w/gpu.val"
  [ "$(wc -l <"$w/gpu.val")" = 2 ] && paste "$w/cpu.val" "$w/gpu.val" |
    awk '{ d = $1 - $2; if (d < 0) d = -d; if (d > 1e-5 * $1) exit 1 }' \
    && ok "validation losses $(paste -sd' ' "$w/gpu.val"), CPU $(paste -sd' ' "$w/cpu.val")" \
    || bad "validation losses $(paste -sd' ' "$w/gpu.val"), CPU $(paste -sd' ' "$w/cpu.val")"
  timeout 60 "$w/gpu/gpu/fusion-gpu" --inputs "$w/bad.st" --steps 1 --seed 5 >"$w/bad.out" 2>&1
  d=$?
  [ $d = 1 ] && grep -q "token id 300 at position 0 is out of range" "$w/bad.out" \
    && ok "a bad token id: the kernel's status word, exit 1" || bad "bad token id: exit $d: $(tail -3 "$w/bad.out")"
  for p in off on bf16; do
    case $p in bf16) ref=cpu-bf16 bound=1e-3 ;; *) ref=cpu bound=1e-5 ;; esac
    timeout 60 "$w/mixed-$p/launch-local.sh" "${run[@]}" >"$w/mixed-$p.out" 2>&1 || bad "mixed $p: exit $?: $(tail -5 "$w/mixed-$p.out")"
    reporter=$(sed -n 's/^reporter=//p' "$w/mixed-$p/launch-local.sh")
    losses "$w/mixed-$p/logs/$reporter.log" >"$w/mixed-$p.loss"
    within "4-stage pipeline, CPU CPU CUDA CUDA, ${p/o/recompute o}" $bound "$w/$ref.loss" "$w/mixed-$p.loss"
  done

  [ "${TIMING:-1}" = 1 ] || return
  # GPT-2 small, batch 8 x 512, 10 steps, median of the last 8: fusion
  # against PyTorch (the same model and optimizer, bench/torch_gpt2.py) on
  # this GPU, f32 and bf16 (PyTorch: autocast).
  local ms tms
  for p in fp32 bf16; do
    timeout 75 "$w/big-$p/gpu/fusion-gpu" --data "$w/corpus.txt" --steps 10 >"$w/big-$p.out" 2>&1 ||
      bad "GPT-2 small $p: exit $?: $(tail -3 "$w/big-$p.out")"
    ms=$(awk '/^step/ { n++; if (n > 2) for (i = 2; i <= NF; i++) if ($i == "ms/step") print $(i - 1) }' "$w/big-$p.out" |
      sort -n | awk '{ a[NR] = $1 } END { if (NR) print (NR % 2) ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2 }')
    tms=$(cd bench && timeout 75 python3 torch_gpt2.py 12 768 12 50257 1024 8 512 16 10 ${p/fp32/f32} cuda | cut -d' ' -f1)
    echo "timing: GPT-2 small $p, batch 8x512, one GPU: fusion ${ms:-?} ms/step, PyTorch ${tms:-?} ms/step," \
      "ratio $(awk -v a="${ms:-0}" -v b="${tms:-0}" 'BEGIN { if (b > 0) printf "%.2f", a / b; else print "?" }')"
    grep -m3 '^step' "$w/big-$p.out"
  done
  # Where the f32 step goes: its --trace (an op's span is its time on the
  # GPU while tracing), the ops of step 3 summed over the layers.
  timeout 75 "$w/big-fp32/gpu/fusion-gpu" --data "$w/corpus.txt" --steps 3 --trace "$w/big-trace.json" \
    >"$w/big-trace.out" 2>&1 || bad "GPT-2 small --trace: exit $?: $(tail -3 "$w/big-trace.out")"
  python3 - "$w/big-trace.json" <<'PY' || bad "GPT-2 small --trace: no summary"
import collections, json, re, sys
events = [e for e in json.load(open(sys.argv[1])) if e.get("ph") == "X" and e["args"].get("step") == 3]
phases = {e["name"]: e["dur"] / 1e3 for e in events if e["cat"] == "micro-batch"}
ops = collections.Counter()
for e in events:
    if e["cat"] != "micro-batch":
        ops[e["cat"] + " " + re.sub(r"^h\.\d+\.", "h.*.", e["name"])] += e["dur"] / 1e3
print("trace, step 3: " + ", ".join(f"{k} {v:.1f} ms" for k, v in phases.items())
      + f"; the ops' spans {sum(ops.values()):.1f} ms")
for name, ms in ops.most_common(10):
    print(f"trace: {ms:8.2f} ms  {name}")
PY
}

case $verb in
prepare) prepare "${2:?BUILD_DIR}" "${3:?DIR}" ;;
run) run "${2:?DIR}"; echo "$failures failures"; [ $failures = 0 ] ;;
*) echo "usage: real_gpu_check.sh prepare BUILD_DIR DIR | run DIR" >&2; exit 2 ;;
esac
