# Gradient parity with PyTorch (Debian's python3-torch): the same model from
# the same safetensors weights and batch gives the same loss and every
# parameter gradient within 1e-4 of the tensor's largest magnitude, for GPT
# configurations with awkward sizes (T not a power of two, C not a multiple
# of 64, vocab 257, 1 head and many, attention whole and in parts), the MLP,
# ResNet-18 on 32x32 images (batch 8) with batch-norm in training mode, and
# Llama (models/llama.xml) with grouped- and multi-query attention;
# and after 10 AdamW steps (decay, clipping, warm-up and cosine) the MLP's
# parameters match torch.optim.AdamW's (the GPT's after one step; see below).
. "$(dirname "$0")/lib.sh"
no_leak_scan_in_threaded_programs
py=/usr/bin/python3
"$py" -c 'import torch' 2>/dev/null || { echo "FAIL: /usr/bin/python3 cannot import torch (install python3-torch)" >&2; exit 1; }
parity=tests/parity/torch_parity.py

# check KIND MODEL CONFIG: compile, one step with --dump-grads, compare.
check() {
  local kind=$1 model=$2 cfg=$3 name=$4 sets=()
  IFS=, read -ra kv <<<"$cfg"
  for s in "${kv[@]}"; do sets+=(--set "$s"); done
  if ! "$FUSIONC" compile "$model" clusters/local-1.xml -o "$work/$name" "${sets[@]}" >"$work/$name.log" 2>&1; then
    fail "$name: compile: $(tail -2 "$work/$name.log")"; return; fi
  "$py" "$parity" make "$kind" "$cfg" "$work/$name.w" "$work/$name.in" 7 || { fail "$name: make"; return; }
  if ! "$work/$name/cpu0/fusion-cpu0" --init "$work/$name.w" --inputs "$work/$name.in" --steps 1 \
       --dump-grads "$work/$name.dump" >"$work/$name.run" 2>&1; then
    fail "$name: run: $(tail -2 "$work/$name.run")"; return; fi
  if "$py" "$parity" grads "$kind" "$cfg" "$work/$name.w" "$work/$name.dump" >"$work/$name.cmp" 2>&1; then
    pass; echo "  $name: $(tail -1 "$work/$name.cmp")" >&2
  else fail "$name: $(cat "$work/$name.cmp")"; fi
}

check gpt2 models/gpt2.xml "vocab=257,ctx=16,layers=2,dim=36,heads=3,batch=2,seq=7" gpt-3heads
check gpt2 models/gpt2.xml "vocab=257,ctx=8,layers=1,dim=20,heads=1,batch=3,seq=5" gpt-1head
check gpt2 models/gpt2.xml "vocab=100,ctx=16,layers=1,dim=48,heads=12,batch=2,seq=9,attn_parts=1" gpt-12heads-parts
check mlp models/mlp.xml "batch=8,in_dim=10,hidden=16,layers=2,classes=5" mlp
check resnet models/resnet.xml "depth=18,batch=8,size=32,classes=7" resnet18
# Llama (issue 19): grouped-query attention 4 over 2 at the default rope
# base, and 8 query heads over 1 (multi-query) at Llama-3's base and eps;
# T not a power of two, ffn not a multiple of 8.
check llama models/llama.xml "vocab=257,ctx=16,layers=2,dim=48,heads=4,kv_heads=2,ffn=72,batch=2,seq=11" llama-gqa
check llama models/llama.xml "vocab=100,ctx=32,layers=1,dim=64,heads=8,kv_heads=1,ffn=44,batch=3,seq=13,rope_base=500000,norm_eps=1e-5" llama-mqa

# adamw NAME KIND MODEL CONFIG STEPS: STEPS AdamW steps from the same weights
# on the same batch, then every parameter against torch.optim.AdamW's.
adamw() {
  local name=$1 kind=$2 model=$3 cfg=$4 steps=$5 sets=()
  IFS=, read -ra kv <<<"$cfg"
  for s in "${kv[@]}"; do sets+=(--set "$s"); done
  "$FUSIONC" compile "$model" clusters/local-1.xml -o "$work/$name" "${sets[@]}" >/dev/null || { fail "$name compile"; return; }
  "$py" "$parity" make "$kind" "$cfg" "$work/$name.w" "$work/$name.in" 11
  "$work/$name/cpu0/fusion-cpu0" --init "$work/$name.w" --inputs "$work/$name.in" --steps "$steps" \
    --save "$work/$name.ckpt" >"$work/$name.run" 2>&1 || { fail "$name run: $(tail -2 "$work/$name.run")"; return; }
  if "$py" "$parity" adamw "$kind" "$cfg" "$work/$name.w" "$work/$name.in" "$work/$name.ckpt/latest/checkpoint.safetensors" \
       "$steps" >"$work/$name.cmp" 2>&1; then pass; echo "  $name: $(tail -1 "$work/$name.cmp")" >&2
  else fail "$name: $(cat "$work/$name.cmp")"; fi
}
optimizer="lr=1e-3,weight_decay=0.1,grad_clip=1.0,warmup=3,steps=10,min_lr=1e-4"
# 10 steps with weight decay, clipping, warm-up and cosine decay.
adamw adamw-mlp mlp models/mlp.xml "batch=8,in_dim=10,hidden=16,layers=2,classes=5,$optimizer" 10
# The GPT for one step.  From the second step on, Adam divides each
# element's step by that element's own gradient history, so elements whose
# gradient is tiny next to the tensor's largest (cancelling sums; the key
# bias's is exactly zero in exact arithmetic) turn the rounding differences
# of two BLAS summation orders into differences of a sizeable part of a
# step.  Gradients from the same parameters still agree at every step (the
# gradient checks above, run from any point), so later steps compare noise.
adamw adamw-gpt gpt2 models/gpt2.xml "vocab=257,ctx=16,layers=2,dim=36,heads=3,batch=2,seq=7,$optimizer" 1
finish
