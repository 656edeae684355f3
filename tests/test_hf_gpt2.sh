# Hugging Face GPT-2 checkpoints in and out: a model folder as
# GPT2LMHeadModel.save_pretrained leaves one (config.json; bf16 weights in
# model.safetensors, every name prefixed "transformer.", the attention's
# mask buffers beside them; or two shards and the index, unprefixed, with a
# tied lm_head.weight), written with PyTorch (tests/parity/hf_gpt2.py),
# compiled with `fusionc compile models/gpt2.xml --hf-config
# DIR/config.json` and stepped once with `--init DIR`: the loss and every
# gradient equal an independent PyTorch GPT-2's (Conv1D layout, tied head,
# gelu's tanh form) within 1e-4 of each tensor's largest magnitude.  A
# GPT-2 trained a few steps exports (`fusionc export`) as a folder that the
# same PyTorch model loads by name, giving fusion's loss and gradients on
# the trained weights within 1e-4; its config.json compiles back.
# Refused, naming the file, exit 1: an activation other than gelu_new,
# untied embeddings, another n_inner, a Llama config given to
# models/gpt2.xml and a GPT-2 config to models/llama.xml; a parameter the
# folder lacks is named.
. "$(dirname "$0")/lib.sh"
no_leak_scan_in_threaded_programs
py=/usr/bin/python3
"$py" -c 'import torch' 2>/dev/null || { echo "FAIL: /usr/bin/python3 cannot import torch (install python3-torch)" >&2; exit 1; }
hf=tests/parity/hf_gpt2.py
sets=(--set batch=2 --set seq=24 --set sgd=1 --set lr=0.1 --set grad_clip=0)

"$py" "$hf" make "$work/ckpt" "$work/in.st" 5 && pass || fail "writing the checkpoint folder"
"$py" "$hf" make "$work/sharded" "$work/in.st" 5 --shards && pass || fail "writing the sharded folder"
grep -q '"transformer.h.0.attn.bias"' "$work/ckpt/model.safetensors" && grep -q '"BF16"' "$work/ckpt/model.safetensors" &&
  pass || fail "the folder has no bf16 weights with the transformer. prefix and the attn.bias buffer"

if "$FUSIONC" compile models/gpt2.xml clusters/local-1.xml -o "$work/one" --hf-config "$work/ckpt/config.json" \
     "${sets[@]}" >"$work/one.log" 2>&1; then pass; else fail "compile: $(tail -2 "$work/one.log")"; fi
# step NAME INIT: one step from INIT with --dump-grads, compared with PyTorch on DIR (0: they match).
step() {
  local name=$1 init=$2 dir=$3
  if ! "$work/one/cpu0/fusion-cpu0" --init "$init" --inputs "$work/in.st" --steps 1 \
       --dump-grads "$work/$name.dump" >"$work/$name.run" 2>&1; then
    fail "$name: run: $(tail -2 "$work/$name.run")"; return 2; fi
  "$py" "$hf" grads "$dir" "$work/in.st" "$work/$name.dump" >"$work/$name.cmp" 2>&1
}
step single "$work/ckpt" "$work/ckpt" && { pass; echo "  prefixed bf16 model.safetensors: $(tail -1 "$work/single.cmp")" >&2; } \
  || fail "single: $(cat "$work/single.cmp" "$work/single.run" 2>/dev/null | tail -5)"
step sharded "$work/sharded" "$work/sharded" && { pass; echo "  2 shards and the index: $(tail -1 "$work/sharded.cmp")" >&2; } \
  || fail "sharded: $(cat "$work/sharded.cmp" "$work/sharded.run" 2>/dev/null | tail -5)"

# The comparison sees the epsilon: another one differs.
"$FUSIONC" compile models/gpt2.xml clusters/local-1.xml -o "$work/eps" --hf-config "$work/ckpt/config.json" \
  "${sets[@]}" --set norm_eps=0.5 >"$work/eps.log" 2>&1 || fail "compile with norm_eps: $(tail -2 "$work/eps.log")"
"$work/eps/cpu0/fusion-cpu0" --init "$work/ckpt" --inputs "$work/in.st" --steps 1 --dump-grads "$work/eps.dump" >/dev/null 2>&1
"$py" "$hf" grads "$work/ckpt" "$work/in.st" "$work/eps.dump" >"$work/eps.cmp" 2>&1
expect_eq "with norm_eps 0.5, torch's gradients (1e-5) differ: exit" 1 $?

"$FUSIONC" stats models/gpt2.xml --hf-config "$work/ckpt/config.json" >"$work/stats" 2>&1
grep -Eq '^  ctx +32$' "$work/stats" && grep -Eq '^  dim +64$' "$work/stats" && grep -Eq '^  norm_eps +1e-05$' "$work/stats" &&
  grep -Eq '^parameters +[0-9,]+' "$work/stats" && pass || fail "stats with --hf-config: $(head -24 "$work/stats")"

# Taken: an older config's n_ctx (no n_positions); gelu_pytorch_tanh (the same tanh form).
# taken NAME EDIT HYPER VALUE: stats with the edited config shows HYPER VALUE.
taken() {
  local name=$1 edit=$2 hyper=$3 value=$4
  mkdir -p "$work/ok-$name"
  "$py" -c "import json, sys; c = json.load(open(sys.argv[1])); $edit; json.dump(c, open(sys.argv[2], 'w'))" \
    "$work/ckpt/config.json" "$work/ok-$name/config.json"
  "$FUSIONC" stats models/gpt2.xml --hf-config "$work/ok-$name/config.json" >"$work/ok-$name.out" 2>&1
  grep -Eq "^  $hyper +$value\$" "$work/ok-$name.out" && pass || fail "$name: expected $hyper $value: $(head -20 "$work/ok-$name.out")"
}
taken n-ctx 'del c["n_positions"]; c["n_ctx"] = 48' ctx 48
taken pytorch-tanh 'c["activation_function"] = "gelu_pytorch_tanh"; c["layer_norm_epsilon"] = 1e-6' norm_eps 1e-06

# ---- out: a trained GPT-2 exported, and PyTorch on it ----
cat /usr/share/common-licenses/* >"$work/corpus.txt"
"$FUSIONC" compile models/gpt2.xml clusters/local-1.xml -o "$work/bytes" --set vocab=256 --set ctx=32 --set layers=2 \
  --set dim=64 --set heads=4 --set batch=4 --set seq=24 >"$work/bytes.log" 2>&1 && pass || fail "compile: $(cat "$work/bytes.log")"
"$work/bytes/cpu0/fusion-cpu0" --data "$work/corpus.txt" --steps 5 --save "$work/bytes/ckpt" >"$work/train" 2>&1 &&
  pass || fail "training: $(tail -3 "$work/train")"
"$FUSIONC" export "$work/bytes/ckpt" -o "$work/hf" >"$work/export" 2>&1 && pass || fail "export: $(cat "$work/export")"
"$py" - "$work/hf" <<'PYEOF' && pass || fail "the export's config.json and names: see above"
import json, sys
sys.path.insert(0, "tests/parity")
from torch_parity import gpt2_params, st_read
from hf_gpt2 import model_config
c = json.load(open(sys.argv[1] + "/config.json"))
want = {"architectures": ["GPT2LMHeadModel"], "model_type": "gpt2", "n_layer": 2, "n_embd": 64, "n_head": 4,
        "n_positions": 32, "n_ctx": 32, "vocab_size": 256, "layer_norm_epsilon": 1e-5,
        "activation_function": "gelu_new", "tie_word_embeddings": True, "torch_dtype": "float32"}
bad = [f"{k}: {c.get(k)!r}, expected {v!r}" for k, v in want.items() if c.get(k) != v]
t = st_read(sys.argv[1])
names = gpt2_params(model_config(c))
bad += [f"{n}: {list(t[n].shape) if n in t else 'absent'}, expected {list(s)}" for n, s in names.items()
        if n not in t or tuple(t[n].shape) != s]
bad += [f"not GPT-2's: {n}" for n in t if n not in names]
print("\n".join(bad), file=sys.stderr)
sys.exit(1 if bad else 0)
PYEOF
# fusion on its own checkpoint's weights; PyTorch on the export, by name.
"$py" - "$work/bin.st" <<'PYEOF' || fail "making byte inputs"
import sys, torch
sys.path.insert(0, "tests/parity")
from torch_parity import st_write
g = torch.Generator().manual_seed(11)
st_write(sys.argv[1], {k: torch.randint(0, 256, (4, 24), generator=g, dtype=torch.int32) for k in ("idx", "targets")})
PYEOF
"$work/bytes/cpu0/fusion-cpu0" --init "$work/bytes/ckpt/step-5/checkpoint.safetensors" --inputs "$work/bin.st" \
  --steps 1 --dump-grads "$work/trained.dump" >"$work/trained.run" 2>&1 || fail "fusion on the checkpoint: $(tail -2 "$work/trained.run")"
"$py" "$hf" grads "$work/hf" "$work/bin.st" "$work/trained.dump" >"$work/trained.cmp" 2>&1 &&
  { pass; echo "  the export of 5 trained steps: $(tail -1 "$work/trained.cmp")" >&2; } || fail "PyTorch on the export: $(cat "$work/trained.cmp")"
# Its config.json compiles back, and the folder loads with --init: the same loss.
"$FUSIONC" compile models/gpt2.xml clusters/local-1.xml -o "$work/back" --hf-config "$work/hf/config.json" \
  --set batch=4 --set seq=24 >"$work/back.log" 2>&1 && pass || fail "compile --hf-config of the export: $(cat "$work/back.log")"
"$work/back/cpu0/fusion-cpu0" --init "$work/hf" --inputs "$work/bin.st" --steps 1 >"$work/back.run" 2>&1 ||
  fail "--init of the export: $(tail -2 "$work/back.run")"
expect_eq "the export's loss against the checkpoint's" "$(awk '/^step /{print $4}' "$work/trained.run")" \
  "$(awk '/^step /{print $4}' "$work/back.run")"

# ---- refused, naming the file ----
# refused NAME MODEL EDIT EXPECTED: the config edited by python, compile exits 1 with EXPECTED.
refused() {
  local name=$1 model=$2 edit=$3 expected=$4
  mkdir -p "$work/bad-$name"
  "$py" -c "import json, sys; c = json.load(open(sys.argv[1])); $edit; json.dump(c, open(sys.argv[2], 'w'))" \
    "$work/ckpt/config.json" "$work/bad-$name/config.json"
  "$FUSIONC" compile "$model" clusters/local-1.xml -o "$work/bad-$name/out" \
    --hf-config "$work/bad-$name/config.json" --set batch=2 --set seq=24 >"$work/bad-$name.out" 2>&1
  expect_eq "$name: exit" 1 $?
  grep -qF "$work/bad-$name/config.json: $expected" "$work/bad-$name.out" && pass \
    || fail "$name: expected '$expected', found: $(cat "$work/bad-$name.out")"
  [ ! -e "$work/bad-$name/out" ] && pass || fail "$name: an output folder was made"
}
refused relu models/gpt2.xml 'c["activation_function"] = "relu"' \
  "activation_function 'relu' is not supported (gelu_new: gelu's tanh form)"
refused untied models/gpt2.xml 'c["tie_word_embeddings"] = False' "tie_word_embeddings false is not supported"
refused inner models/gpt2.xml 'c["n_inner"] = 128' "n_inner 128 is not supported"
refused by-layer models/gpt2.xml 'c["scale_attn_by_inverse_layer_idx"] = True' \
  "scale_attn_by_inverse_layer_idx true is not supported"
refused llama-to-gpt2 models/gpt2.xml \
  'c = {"model_type": "llama", "architectures": ["LlamaForCausalLM"], "num_hidden_layers": 2, "hidden_size": 64,
        "num_attention_heads": 4, "intermediate_size": 96, "vocab_size": 300}' \
  "a llama config (model_type 'llama') given to models/gpt2.xml, which is model 'gpt2' (use models/llama.xml)"
refused gpt2-to-llama models/llama.xml 'pass' \
  "a gpt2 config (model_type 'gpt2') given to models/llama.xml, which is model 'llama' (use models/gpt2.xml)"
refused no-type models/gpt2.xml 'del c["model_type"]; c["architectures"] = ["GPT2DoubleHeadsModel"]' \
  "architecture 'GPT2DoubleHeadsModel' is not supported (GPT2LMHeadModel)"

# A parameter the folder lacks: named.
mkdir -p "$work/short"
cp "$work/ckpt/config.json" "$work/short/"
"$py" - "$work/ckpt/model.safetensors" "$work/short/model.safetensors" <<'PYEOF'
import sys
sys.path.insert(0, "tests/parity")
from torch_parity import st_read, st_write
t = st_read(sys.argv[1])
del t["transformer.h.1.mlp.c_fc.bias"]
st_write(sys.argv[2], t)
PYEOF
"$work/one/cpu0/fusion-cpu0" --init "$work/short" --inputs "$work/in.st" --steps 1 >/dev/null 2>"$work/short.err"
expect_eq "a parameter missing: exit" 1 $?
grep -q "h.1.mlp.c_fc.bias" "$work/short.err" && pass || fail "missing parameter: $(cat "$work/short.err")"
finish
