# fusionc generate and the inference programs (passes/decode.c,
# runtime/generate.c, tools/generate.c):
#  - greedy parity: a tiny Llama and a tiny GPT-2 trained 300 steps on the
#    licences and exported as Hugging Face folders; 40 tokens greedy from
#    a prompt equal an independent PyTorch loop that runs the whole
#    sequence every step (tests/parity/generate.py: no cache); on one
#    device and over two stages of local-4 (two processes: the activations
#    over a sealed link, the drawn token back to the first stage);
#  - the same on a CUDA device, its bundle run through the emulated driver;
#  - the weights stored bf16 (--frozen-dtype bf16): PyTorch's greedy tokens
#    on the weights rounded to bf16;
#  - the text: --prompt without a tokenizer is bytes in and out, streamed;
#    --print-ids ends standard output with the ids; the last line on
#    standard error is "generated N tokens in S s (X tok/s)";
#  - drawing: --top-k 1 and --top-p 1e-6 are greedy; a seed draws the same tokens again,
#    another seed others; --stop ends the text before the stop text;
#  - the cache: a second run compiles nothing (its folder is reused);
#  - the prompt step (--prefill P, passes/prefill.c): one device takes the
#    15-token prompt in one step of 64 (generate's default), two stages in
#    steps of 4 (the last one short), the CUDA device in steps of 8;
#  - the IR: an inference graph prints `output logits` (and with --prefill
#    `prefill_output`, its ops in phase prefill) and reads back;
#  - --sample-every during training: a sample of 24 tokens every 10 steps,
#    the losses those of the run without it;
#  - bad input: no --init; both prompts; an id outside the vocabulary; a
#    prompt longer than ctx; a model without the weights' tensors.
. "$(dirname "$0")/lib.sh"
claim_ports

py=/usr/bin/python3
export FUSION_CACHE_DIR=$work/cache
cat /usr/share/common-licenses/* >"$work/corpus.txt"
llama=(--set vocab=256 --set ctx=64 --set layers=2 --set dim=64 --set heads=4 --set kv_heads=2 --set ffn=172)
gpt2=(--set vocab=256 --set ctx=64 --set layers=2 --set dim=64 --set heads=4)
ids() { printf '%s' "$1" | od -An -tu1 | tr -s ' \n' ',,' | sed 's/^,//;s/,$//'; }
prompt="The GNU General"

train() { # NAME MODEL SETTINGS...: 300 steps, exported as a Hugging Face folder
  local name=$1 model=$2
  shift 2
  "$FUSIONC" compile "$model" "$@" --set batch=8 --set seq=32 --set lr=3e-3 clusters/local-1.xml -o "$work/$name.train" \
    >"$work/$name.compile" 2>&1 || fail "$name: compile for training: $(cat "$work/$name.compile")"
  "$work/$name.train/cpu0/fusion-cpu0" --data "$work/corpus.txt" --steps 300 --save "$work/$name.ck" >"$work/$name.run" 2>&1 ||
    fail "$name: training: $(tail -3 "$work/$name.run")"
  "$FUSIONC" export "$work/$name.ck" -o "$work/$name.hf" >"$work/$name.export" 2>&1 ||
    fail "$name: export: $(cat "$work/$name.export")"
}
train llama models/llama.xml "${llama[@]}"
train gpt2 models/gpt2.xml "${gpt2[@]}"

# ---- --sample-every during training: a sample every 10 steps, the losses untouched
losses() { awk '/^step .*loss/{print $4}' "$1"; }
for s in 0 10; do
  extra=()
  [ $s -gt 0 ] && extra=(--sample-every $s --sample-tokens 24)
  "$work/llama.train/cpu0/fusion-cpu0" --data "$work/corpus.txt" --steps 20 "${extra[@]}" >"$work/sample$s" 2>&1 ||
    fail "training with --sample-every $s: $(tail -3 "$work/sample$s")"
done
expect_eq "--sample-every: two samples" 2 "$(grep -c '^step  *[12]0: sample: ' "$work/sample10")"
"$py" - "$work/sample10" <<'PYEOF' && pass || fail "a sample is not 24 byte tokens: $(grep sample "$work/sample10")"
import re, sys
samples = [l.split("sample: ", 1)[1].rstrip("\n") for l in open(sys.argv[1]) if " sample: " in l]
count = lambda s: len(re.findall(r"\\x[0-9a-f]{2}|\\n|.", s))
sys.exit(0 if samples and all(count(s) == 24 for s in samples) else 1)
PYEOF
expect_eq "--sample-every leaves the training as it was" "$(losses "$work/sample0" | xargs)" \
  "$(losses "$work/sample10" | xargs)"

# ---- greedy parity with PyTorch
for m in llama gpt2; do
  if [ $m = llama ]; then set -- models/llama.xml "${llama[@]}"; cfg="vocab=256,ctx=64,layers=2,dim=64,heads=4,kv_heads=2,ffn=172"
  else set -- models/gpt2.xml "${gpt2[@]}"; cfg="vocab=256,ctx=64,layers=2,dim=64,heads=4"; fi
  "$FUSIONC" generate "$@" clusters/local-1.xml --init "$work/$m.hf" --prompt-ids "$(ids "$prompt")" --max-tokens 40 \
    --temperature 0 --print-ids >"$work/$m.gen" 2>"$work/$m.gen.err" && pass ||
    fail "$m: generate: $(cat "$work/$m.gen.err")"
  "$py" tests/parity/generate.py $m "$cfg,batch=1,seq=1" "$work/$m.hf" "$(ids "$prompt")" 40 >"$work/$m.torch" \
    2>&1 || fail "$m: the PyTorch loop: $(cat "$work/$m.torch")"
  expect_eq "$m: 40 greedy tokens against PyTorch's" "$(cat "$work/$m.torch")" "$(tail -1 "$work/$m.gen")"
  # Two stages of local-4: two processes, the activations over a sealed link, the token back;
  # the prompt in steps of 4 tokens (4 + 4 + 4 + 3, the last padded) where one device took it whole.
  "$FUSIONC" generate "$@" clusters/local-4.xml --stages 2 --replicas 1 --compress none --port-base $((ports + 10)) \
    --prefill 4 \
    --init "$work/$m.hf" --prompt-ids "$(ids "$prompt")" --max-tokens 40 --temperature 0 --print-ids \
    >"$work/$m.gen2" 2>"$work/$m.gen2.err" && pass || fail "$m: generate over two stages: $(cat "$work/$m.gen2.err")"
  expect_eq "$m: over two stages of local-4, PyTorch's 40 tokens" "$(cat "$work/$m.torch")" "$(tail -1 "$work/$m.gen2")"
  [ "$(tr ',' '\n' <"$work/$m.torch" | sort -u | wc -l)" -ge 4 ] && pass ||
    fail "$m: the greedy tokens are too few different ones to test the cache: $(cat "$work/$m.torch")"
  grep -q "^generated 40 tokens in [0-9.]* s ([0-9.]* tok/s)$" "$work/$m.gen.err" && pass ||
    fail "$m: no speed line: $(cat "$work/$m.gen.err")"
done
echo "  generate: greedy llama $(cat "$work/llama.torch" | cut -c1-60)..." >&2

# ---- the weights stored bf16 (--frozen-dtype: an inference program's
# weights are all frozen), its products reading them as they are: the
# greedy tokens of PyTorch's loop on the weights rounded to bf16
"$py" - "$work" <<'PYEOF' || fail "rounding the weights"
import sys, torch
sys.path.insert(0, "tests/parity")
from torch_parity import st_read, st_write
w = sys.argv[1]
st_write(w + "/llama_bf16.st", {k: v.to(torch.bfloat16).float() for k, v in st_read(w + "/llama.hf").items()})
PYEOF
"$py" tests/parity/generate.py llama "vocab=256,ctx=64,layers=2,dim=64,heads=4,kv_heads=2,ffn=172,batch=1,seq=1" \
  "$work/llama_bf16.st" "$(ids "$prompt")" 40 >"$work/bf16.torch" 2>&1 || fail "the PyTorch loop, bf16: $(cat "$work/bf16.torch")"
"$FUSIONC" generate models/llama.xml "${llama[@]}" clusters/local-1.xml --frozen-dtype bf16 --init "$work/llama.hf" \
  --prompt-ids "$(ids "$prompt")" --max-tokens 40 --temperature 0 --print-ids >"$work/bf16.gen" 2>"$work/bf16.err" &&
  pass || fail "generate with bf16 weights: $(cat "$work/bf16.err")"
expect_eq "bf16 weights: PyTorch's 40 tokens on the rounded weights" "$(cat "$work/bf16.torch")" \
  "$(tail -1 "$work/bf16.gen")"

# ---- a CUDA device through the emulated driver (tests/emu_driver: the
# bundle's own kernels, compiled as C++): the same greedy tokens
"$FUSIONC" compile models/llama.xml "${llama[@]}" --set batch=1 --set seq=1 --inference --prefill 8 --cublas system \
  tests/clusters/one-gpu.xml -o "$work/gpu" >"$work/gpu.compile" 2>&1 && pass ||
  fail "the CUDA inference bundle: $(tail -c 1500 "$work/gpu.compile")"
build_emulated_cuda_driver "$work/lib" "$work/gpu/gpu/kernels.cu" && pass || fail "the emulated driver (above)"
LD_LIBRARY_PATH="$work/lib" "$work/gpu/gpu/fusion-gpu" --init "$work/llama.hf" --prompt-ids "$(ids "$prompt")" \
  --max-tokens 40 --temperature 0 2>"$work/gpu.err" | paste -sd, >"$work/gpu.ids"
expect_eq "a CUDA device (emulated): 40 greedy tokens against PyTorch's" "$(cat "$work/llama.torch")" \
  "$(cat "$work/gpu.ids")"

# ---- text, drawing, the cache
run() { "$FUSIONC" generate models/llama.xml "${llama[@]}" clusters/local-1.xml --init "$work/llama.hf" "$@"; }
run --prompt "$prompt" --max-tokens 40 --temperature 0 >"$work/text" 2>/dev/null && pass || fail "generate --prompt"
want=$("$py" -c "import sys; print(''.join(chr(int(i)) for i in open('$work/llama.torch').read().split(',')))")
expect_eq "--prompt: the text is the greedy ids' bytes" "$want" "$(cat "$work/text")"
ls "$work/cache/generate" >"$work/cache.before"
run --prompt "$prompt" --max-tokens 10 --temperature 0.8 --top-k 1 --print-ids >"$work/topk1" 2>/dev/null ||
  fail "--top-k 1"
expect_eq "--top-k 1 is greedy" "$(cut -d, -f1-10 "$work/llama.torch")" "$(tail -1 "$work/topk1")"
run --prompt "$prompt" --max-tokens 10 --temperature 1 --top-p 1e-6 --seed 9 --print-ids >"$work/topp" 2>/dev/null ||
  fail "--top-p"
expect_eq "--top-p 1e-6 is greedy" "$(cut -d, -f1-10 "$work/llama.torch")" "$(tail -1 "$work/topp")"
expect_eq "the cache: no second compile" "$(cat "$work/cache.before")" "$(ls "$work/cache/generate")"
for s in 1 1 2; do
  run --prompt "$prompt" --max-tokens 30 --temperature 1 --seed $s --print-ids 2>/dev/null | tail -1 >>"$work/draws"
done
[ "$(sed -n 1p "$work/draws")" = "$(sed -n 2p "$work/draws")" ] && pass || fail "seed 1 drew differently twice"
[ "$(sed -n 1p "$work/draws")" != "$(sed -n 3p "$work/draws")" ] && pass || fail "seeds 1 and 2 drew the same"
stop=$(cut -c28-29 "$work/text")
run --prompt "$prompt" --max-tokens 40 --temperature 0 --stop "$stop" >"$work/stopped" 2>/dev/null || fail "--stop"
expect_eq "--stop '$stop': the text before it" "$("$py" -c "import sys; print(open(sys.argv[1]).read().split(sys.argv[2])[0])" \
  "$work/text" "$stop")" "$(cat "$work/stopped")"

# ---- the IR
"$FUSIONC" dump models/gpt2.xml "${gpt2[@]}" --set batch=1 --set seq=1 --inference --prefill 8 -o "$work/inf.fir" \
  >/dev/null 2>&1 || fail "dump --inference"
grep -q "^output logits$" "$work/inf.fir" && grep -q "attention_cached(" "$work/inf.fir" && pass ||
  fail "the inference IR has no output line or cached attention"
grep -q "^prefill_output prefill.logits$" "$work/inf.fir" &&
  grep -q "^node prefill.logits = .* : f32\[1,8,256\] .*phase=prefill" "$work/inf.fir" && pass ||
  fail "the inference IR has no prompt step of 8 tokens: $(grep prefill.logits "$work/inf.fir")"
"$FUSIONC" dump "$work/inf.fir" -o "$work/inf2.fir" >/dev/null 2>&1 && cmp -s "$work/inf.fir" "$work/inf2.fir" && pass ||
  fail "the inference IR does not read back byte for byte"

# ---- bad input
"$FUSIONC" compile models/llama.xml "${llama[@]}" clusters/local-1.xml --prefill 8 -o "$work/bad.out" >"$work/bad" 2>&1
expect_eq "--prefill without --inference: exit status" 1 $?
grep -q -- "--prefill needs an inference program (--inference)" "$work/bad" && pass || fail "no --prefill error: $(cat "$work/bad")"
"$FUSIONC" compile models/llama.xml "${llama[@]}" --set batch=4 --set seq=1 clusters/local-4.xml --inference \
  --replicas 2 -o "$work/bad.out" >"$work/bad" 2>&1
expect_eq "--inference with --replicas 2: exit status" 1 $?
grep -q "an inference program runs its rows as one micro-batch on one replica a stage" "$work/bad" && pass ||
  fail "no replicas error: $(cat "$work/bad")"
run --prompt "$prompt" --prompt-ids 1,2 >"$work/bad" 2>&1
expect_eq "both prompts: exit status" 2 $?
grep -q "expected one of --prompt TEXT and --prompt-ids IDS" "$work/bad" && pass || fail "no both-prompts error: $(cat "$work/bad")"
"$FUSIONC" generate models/llama.xml "${llama[@]}" clusters/local-1.xml --prompt x >"$work/bad" 2>&1
expect_eq "no --init: exit status" 2 $?
run --prompt-ids 1,256 >"$work/bad" 2>&1
expect_eq "an id outside the vocabulary: exit status" 1 $?
grep -q "prompt-ids '1,256': item 2 is not a token id in \[0, 256)" "$work/bad" && pass ||
  fail "no bad-id error: $(cat "$work/bad")"
run --prompt-ids "$(seq -s, 1 70)" >"$work/bad" 2>&1
expect_eq "a prompt longer than ctx: exit status" 1 $?
grep -q -- "--prompt-ids: more than 64 ids" "$work/bad" && pass || fail "no too-long error: $(cat "$work/bad")"
"$FUSIONC" generate models/llama.xml "${llama[@]}" clusters/local-1.xml --init "$work/gpt2.hf" --prompt x >"$work/bad" 2>&1
expect_eq "another model's weights: exit status" 1 $?
grep -q "has no parameter 'model.embed_tokens.weight'" "$work/bad" && pass || fail "no missing-weight error: $(cat "$work/bad")"
finish
