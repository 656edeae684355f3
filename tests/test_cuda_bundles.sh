#!/usr/bin/env bash
# CUDA devices, on a machine without a GPU:
#   - every kernel of GPT-2 small (fused attention, and attention from its
#     parts; in f32, bf16 and fp16), of ResNet-50 (f32 and bf16) and of
#     Llama (the four stages of clusters/local-gpu-4.xml, f32 and bf16)
#     compiles with NVRTC into a CUBIN for each arch of the cluster (sm_80;
#     sm_80 and sm_90 for local-gpu-4), and its PTX (the newest arch's)
#     assembles with ptxas;
#   - the bundle's .nv_fatbin section holds a fat binary with those CUBINs,
#     every kernel in each, and the PTX (tests/cuda_cubins.py, standing in
#     for cuobjdump, which this machine lacks);
#   - a Turing GPU (sm_75) gets sm_75 code; a consumer mix (sm_75, sm_86,
#     sm_89) a CUBIN each; bf16 on Turing and a V100 (sm_70, which CUDA 13
#     cannot target) are refused, naming the device;
#   - the bundle started here exits 1 with one line: no CUDA driver found;
#   - a cluster mixing CPU and CUDA devices compiles, each bundle with its
#     backend, and the kernel cache makes the recompile a cache hit;
#   - a CUDA bundle carries cuBLAS (libcublas, libcublasLt) in lib/ as hard
#     links, one file across devices; --cublas system leaves it out; a
#     toolkit without cuBLAS fails the compile, naming it.
# Needs the CUDA toolkit (NVRTC, ptxas); without it the test FAILS, naming
# what is missing: nothing is skipped.
source "$(dirname "$0")/lib.sh"
no_leak_scan_in_threaded_programs

cuda_home=${CUDA_HOME:-/usr/local/cuda}
ptxas=$(command -v ptxas || echo "$cuda_home/bin/ptxas")
if [ ! -x "$ptxas" ] || [ ! -e "$cuda_home/lib64/libnvrtc.so" ] && [ -z "${FUSION_NVRTC:-}" ]; then
  fail "the CUDA toolkit is missing: need ptxas ($ptxas) and libnvrtc.so ($cuda_home/lib64); set CUDA_HOME"
  finish
  exit 1
fi
export FUSION_CACHE_DIR="$work/cache"
printf 'the quick brown fox jumps over the lazy dog. %.0s' $(seq 1 400) >"$work/data.txt"


# check_cuda_bundle LABEL DIR [SMS]: ptxas, the CUBINs in the executable (one for each of SMS, default
# "80": the cluster's archs, and PTX for the newest), the start without a driver.
check_cuda_bundle() {
  local label=$1 dir=$2 sms=${3:-80} exe
  exe=$(ls "$dir"/fusion-*)
  local kernels entries newest want=""
  kernels=$(grep -c '^extern "C" __global__' "$dir/kernels.cu")
  entries=$(grep -c '^\.visible \.entry' "$dir/kernels.ptx")
  expect_eq "$label: kernels in the PTX" "$kernels" "$entries"
  for sm in $sms; do newest=$sm; want="${want}cubin sm_$sm $kernels kernels|"; done
  if "$ptxas" -arch=sm_$newest "$dir/kernels.ptx" -o "$work/ptxas.cubin" 2>"$work/ptxas.err"; then pass
  else fail "$label: ptxas -arch=sm_$newest: $(head -c 600 "$work/ptxas.err")"; fi
  if python3 tests/cuda_cubins.py "$exe" >"$work/cubins.txt" 2>&1; then pass
  else fail "$label: no CUBIN inside $exe"; fi
  expect_eq "$label: images in the bundle's fat binary" "${want}ptx sm_$newest" \
    "$(grep -E '^(cubin|ptx)' "$work/cubins.txt" | sed 's/ [0-9]* bytes//' | paste -sd'|')"
  # Started here: no driver, one line, exit 1, no crash.
  "$exe" --data "$work/data.txt" --steps 1 >"$work/run.out" 2>"$work/run.err"
  expect_eq "$label: exit status without a driver" "1" "$?"
  expect_eq "$label: lines on stderr" "1" "$(wc -l <"$work/run.err")"
  if grep -q "no CUDA driver found" "$work/run.err"; then pass
  else fail "$label: expected 'no CUDA driver found', found: $(cat "$work/run.err")"; fi
}

# GPT-2 small, fused attention
if "$FUSIONC" compile models/gpt2.xml tests/clusters/one-gpu.xml -o "$work/gpt2" >"$work/log" 2>&1; then pass
else fail "compile GPT-2 small for one GPU: $(tail -c 1500 "$work/log")"; fi
[ -d "$work/gpt2/gpu" ] && check_cuda_bundle "gpt2 small" "$work/gpt2/gpu"
echo "gpt2 small: $(grep -c '^extern' "$work/gpt2/gpu/kernels.cu" 2>/dev/null) kernels" >&2

# GPT-2 small in bf16 and fp16: every kernel in its 16-bit form (cuda_bf16.h,
# cuda_fp16.h), compiled for sm_80 and sm_90, the products on cublasGemmEx.
for p in bf16 fp16; do
  if "$FUSIONC" compile models/gpt2.xml tests/clusters/one-gpu.xml -o "$work/gpt2-$p" --precision $p >"$work/log" 2>&1
  then pass; else fail "compile GPT-2 small --precision $p for one GPU: $(tail -c 1500 "$work/log")"; fi
  [ -d "$work/gpt2-$p/gpu" ] && check_cuda_bundle "gpt2 small $p" "$work/gpt2-$p/gpu"
  t=$([ $p = bf16 ] && echo __nv_bfloat16 || echo __half)
  n16=$(grep -c "^extern \"C\"" "$work/gpt2-$p/gpu/kernels.cu" 2>/dev/null)
  k16=$(awk -v t="$t" '/^extern "C"/ { k = 1 } k && index($0, t " *") { n++; k = 0 } END { print n + 0 }' "$work/gpt2-$p/gpu/kernels.cu" 2>/dev/null)
  [ "${k16:-0}" -gt 0 ] && pass || fail "gpt2 small $p: no kernel takes a $t tensor"
  echo "gpt2 small $p: $n16 kernels, $k16 of them on $t tensors" >&2
done

# GPT-2 small's sizes, attention from its parts (split, matmul, causal softmax, merge)
if "$FUSIONC" compile models/gpt2.xml tests/clusters/one-gpu.xml -o "$work/gpt2p" --set attn_parts=1 --set layers=2 \
     >"$work/log" 2>&1; then pass
else fail "compile GPT-2 (attn_parts=1) for one GPU: $(tail -c 1500 "$work/log")"; fi
[ -d "$work/gpt2p/gpu" ] && check_cuda_bundle "gpt2 attn_parts" "$work/gpt2p/gpu"

# ResNet-50, and in bf16 (convolution, pooling, batchnorm in 16 bits)
if "$FUSIONC" compile models/resnet.xml tests/clusters/one-gpu.xml -o "$work/resnet" >"$work/log" 2>&1; then pass
else fail "compile ResNet-50 for one GPU: $(tail -c 1500 "$work/log")"; fi
[ -d "$work/resnet/gpu" ] && check_cuda_bundle "resnet-50" "$work/resnet/gpu"
echo "resnet-50: $(grep -c '^extern' "$work/resnet/gpu/kernels.cu" 2>/dev/null) kernels" >&2
if "$FUSIONC" compile models/resnet.xml tests/clusters/one-gpu.xml -o "$work/resnet-bf16" --precision bf16 \
     >"$work/log" 2>&1; then pass
else fail "compile ResNet-50 --precision bf16 for one GPU: $(tail -c 1500 "$work/log")"; fi
[ -d "$work/resnet-bf16/gpu" ] && check_cuda_bundle "resnet-50 bf16" "$work/resnet-bf16/gpu"

# Llama (rmsnorm, rope, grouped-query attention on q, k, v apart, SwiGLU)
# on the four-GPU host, a pipeline of four stages, in f32 and bf16: every
# stage's kernels through ptxas for both architectures.
for p in fp32 bf16; do
  if "$FUSIONC" compile models/llama.xml clusters/local-gpu-4.xml -o "$work/llama-$p" --precision $p >"$work/log" 2>&1
  then pass; else fail "compile Llama --precision $p for local-gpu-4: $(tail -c 1500 "$work/log")"; fi
  for d in a100-0 a100-1 h100-0 h100-1; do
    [ -d "$work/llama-$p/$d" ] && check_cuda_bundle "llama $p $d" "$work/llama-$p/$d" "80 90"
  done
  echo "llama $p: $(cat "$work/llama-$p"/*/kernels.cu 2>/dev/null | grep -c '^extern') kernels over 4 stages" >&2
done
k16=$(awk '/^extern "C"/ { k = 1 } k && index($0, "__nv_bfloat16 *") { n++; k = 0 } END { print n + 0 }' \
  "$work"/llama-bf16/*/kernels.cu 2>/dev/null)
[ "${k16:-0}" -gt 0 ] && pass || fail "llama bf16: no kernel takes a __nv_bfloat16 tensor"

# Mixed CPU + CUDA: every device gets its backend.
if "$FUSIONC" compile models/gpt2.xml clusters/local-mixed.xml -o "$work/mixed" --stages 4 --set layers=2 \
     --set dim=96 --set heads=4 --set vocab=256 --set ctx=32 >"$work/log" 2>&1; then pass
else fail "compile for the mixed cluster: $(tail -c 1500 "$work/log")"; fi
for d in cpu-0 cpu-1 gpu-0 gpu-1; do
  kind=cuda; case $d in cpu-*) kind=cpu ;; esac
  expect_eq "mixed: $d's manifest" "$kind" "$(sed -n 's/^device *[^ ]* (\([a-z]*\),.*/\1/p' "$work/mixed/$d/manifest.txt" 2>/dev/null)"
  if [ $kind = cuda ]; then
    [ -s "$work/mixed/$d/kernels.cu" ] && pass || fail "mixed: $d has no kernels.cu"
    [ -d "$work/mixed/$d" ] && check_cuda_bundle "mixed $d" "$work/mixed/$d" "80 90"
  else
    [ ! -e "$work/mixed/$d/kernels.cu" ] && pass || fail "mixed: CPU device $d got CUDA kernels"
    python3 tests/cuda_cubins.py "$work/mixed/$d/fusion-$d" >/dev/null 2>&1 && fail "mixed: CPU bundle $d holds a CUBIN" || pass
  fi
done

# The cluster's own GPUs: a Turing card gets sm_75 code, a consumer mix a
# CUBIN for each of its archs; bf16 on Turing and a V100 (sm_70, which the
# CUDA 13 toolkit here cannot target) are refused at compile, naming the
# device and the arch, with nothing written.
tiny=(--set layers=1 --set dim=32 --set heads=2 --set vocab=256 --set ctx=16 --set batch=2 --set seq=16)
gpu_cluster() { # gpu_cluster FILE NAME ARCH...: a host of one GPU a given arch
  local file=$1 name=$2 i=0
  shift 2
  { echo "<cluster name=\"$name\"><region name=\"r\" bandwidth=\"10Gbps\" latency=\"50us\"><host name=\"h\" address=\"127.0.0.1\">"
    for a in "$@"; do
      echo "<device name=\"gpu-$i\" kind=\"cuda\" arch=\"$a\" peak-fp32=\"13TFLOPS\" peak-tf32=\"13TFLOPS\" peak-fp16=\"26TFLOPS\" peak-bf16=\"26TFLOPS\" memory=\"11GiB\" memory-bandwidth=\"616GB/s\"/>"
      i=$((i + 1))
    done
    echo "</host></region></cluster>"; } >"$file"
}
gpu_cluster "$work/turing.xml" turing sm_75
"$FUSIONC" compile models/gpt2.xml "$work/turing.xml" -o "$work/turing" "${tiny[@]}" --cublas system >"$work/log" 2>&1 \
  && pass || fail "compile for a Turing GPU: $(tail -c 1500 "$work/log")"
[ -d "$work/turing/gpu-0" ] && check_cuda_bundle "turing (sm_75)" "$work/turing/gpu-0" "75"
gpu_cluster "$work/consumer.xml" consumer sm_75 sm_86 sm_89
"$FUSIONC" compile models/gpt2.xml "$work/consumer.xml" -o "$work/consumer" "${tiny[@]}" --stages 1 --cublas system \
  --precision fp16 >"$work/log" 2>&1 && pass || fail "compile for sm_75, sm_86 and sm_89: $(tail -c 1500 "$work/log")"
[ -d "$work/consumer/gpu-0" ] && check_cuda_bundle "consumer mix" "$work/consumer/gpu-0" "75 86 89"
"$FUSIONC" compile models/gpt2.xml "$work/turing.xml" -o "$work/turing-bf16" "${tiny[@]}" --precision bf16 >/dev/null 2>"$work/err"
expect_eq "bf16 on Turing: exit" 1 $?
grep -q "turing.xml:[0-9]*: error: device gpu-0 is sm_75: bf16 needs sm_80 (Ampere) or newer" "$work/err" && pass \
  || fail "bf16 on Turing: $(cat "$work/err")"
[ ! -e "$work/turing-bf16" ] && pass || fail "a refused compile wrote $work/turing-bf16"
gpu_cluster "$work/volta.xml" volta sm_70
"$FUSIONC" compile models/gpt2.xml "$work/volta.xml" -o "$work/volta" "${tiny[@]}" >"$work/log" 2>"$work/err"
status=$?
if "$FUSIONC" --version | grep -q "NVRTC     1[3-9]"; then  # this machine's toolkit: sm_70 is gone
  expect_eq "a V100 under CUDA 13: exit" 1 $status
  grep -q "volta.xml:[0-9]*: error: device gpu-0: arch sm_70 cannot be compiled for by this toolkit's NVRTC 1[0-9.]*, which targets sm_75 to sm_[0-9]*" \
    "$work/err" && pass || fail "a V100 under CUDA 13: $(cat "$work/err")"
  [ ! -e "$work/volta" ] && pass || fail "a refused compile wrote $work/volta"
else  # an older toolkit compiles Volta: its bundle holds sm_70 code
  expect_eq "a V100: compile" 0 $status
  check_cuda_bundle "volta (sm_70)" "$work/volta/gpu-0" "70"
fi

# cuBLAS travels with a CUDA bundle (default --cublas bundle): libcublas and
# libcublasLt in lib/, hard links (to the toolkit's files, or to the first
# device's), the same file in both CUDA devices; no CPU device carries them.
for d in gpu-0 gpu-1; do
  for lib in libcublas libcublasLt; do
    f=$(ls "$work/mixed/$d/lib/$lib".so.* 2>/dev/null | head -1)
    if [ -n "$f" ] && [ "$(stat -c %h "$f")" -gt 1 ]; then pass
    else fail "mixed: $d/lib: expected $lib.so.N as a hard link (link count > 1), found: '${f:-none}' $( [ -n "$f" ] && stat -c 'links %h' "$f")"; fi
  done
done
for lib in libcublas libcublasLt; do
  expect_eq "mixed: gpu-0's and gpu-1's $lib are one file (inode)" \
    "$(stat -c %i "$work/mixed/gpu-0/lib/$lib".so.* 2>/dev/null)" "$(stat -c %i "$work/mixed/gpu-1/lib/$lib".so.* 2>/dev/null)"
done
expect_eq "mixed: cuBLAS in CPU device cpu-0's lib/" "" "$(ls "$work/mixed/cpu-0/lib" | grep cublas)"
expect_eq "mixed: files left under temporary names in lib/" "" "$(ls "$work"/mixed/*/lib | grep '\.tmp\.')"
echo "mixed gpu-0/lib: $(ls -l "$work/mixed/gpu-0/lib" | awk '/cublas/ {print $9 " (" $2 " links, " $5 " bytes)"}' | paste -sd' ')" >&2
# libcublas.so.N finds libcublasLt.so.N beside it: its run path is $ORIGIN.
blas=$(ls "$work/mixed/gpu-0/lib"/libcublas.so.* 2>/dev/null | head -1)
expect_eq "libcublas's run path" "[\$ORIGIN]" "$(readelf -d "$blas" 2>/dev/null | sed -n 's/.*(RUNPATH) *Library runpath: //p')"

# --cublas system: the bundle leaves cuBLAS to the host.
if "$FUSIONC" compile models/gpt2.xml tests/clusters/one-gpu.xml -o "$work/sys" --set layers=2 --cublas system \
     >"$work/log" 2>&1; then pass
else fail "compile with --cublas system: $(tail -c 1500 "$work/log")"; fi
expect_eq "--cublas system: cuBLAS in the bundle's lib/" "" "$(ls "$work/sys/gpu/lib" 2>&1 | grep cublas)"
[ -x "$work/sys/gpu/fusion-gpu" ] && pass || fail "--cublas system: no program in $work/sys/gpu"

# A toolkit without cuBLAS: the compile fails and says what is missing,
# unless --cublas system.
mkdir -p "$work/no-cublas/lib64"
CUDA_HOME="$work/no-cublas" "$FUSIONC" compile models/gpt2.xml tests/clusters/one-gpu.xml -o "$work/nocub" \
  --set layers=2 >"$work/log" 2>&1
expect_eq "toolkit without cuBLAS: exit status" 1 "$?"
grep -q "no cuBLAS (libcublas.so.13, .12 or .11 in $work/no-cublas/lib64)" "$work/log" && pass \
  || fail "toolkit without cuBLAS: expected 'no cuBLAS (libcublas.so.13, .12 or .11 in $work/no-cublas/lib64)', found: $(tail -c 600 "$work/log")"
CUDA_HOME="$work/no-cublas" "$FUSIONC" compile models/gpt2.xml tests/clusters/one-gpu.xml -o "$work/nocub" \
  --set layers=2 --cublas system >"$work/log" 2>&1 && pass \
  || fail "toolkit without cuBLAS, --cublas system: $(tail -c 600 "$work/log")"

# The cache: a recompile of the same kernels reads them back (no new entries).
before=$(ls "$FUSION_CACHE_DIR" | wc -l)
"$FUSIONC" compile models/gpt2.xml tests/clusters/one-gpu.xml -o "$work/gpt2" --force >"$work/log" 2>&1 || fail "recompile: $(tail -c 800 "$work/log")"
expect_eq "cache entries after a recompile" "$before" "$(ls "$FUSION_CACHE_DIR" | wc -l)"
cmp -s "$work/gpt2/gpu/kernels.cu" "$work/gpt2/gpu/kernels.cu" && pass

finish
