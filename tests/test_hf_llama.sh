# Hugging Face Llama checkpoints in: a model folder as Hugging Face ships
# one (config.json with tied embeddings, Llama 3's rope_scaling and 4 query
# heads over 2; bf16 weights in two shards and model.safetensors.index.json),
# written with PyTorch (tests/parity/hf_llama.py), compiled with
# `fusionc compile --hf-config DIR/config.json` and trained one plain-SGD
# step with `--init DIR`: the loss and every gradient equal an independent
# PyTorch Llama's within 1e-4 of each tensor's largest magnitude; the same
# with the rope scaling left off differs (the comparison sees it); as 2
# pipeline stages its losses equal one device's.  A
# folder holding model.safetensors loads too, and a tied checkpoint loads
# with lm_head.weight or without it.  Refused, naming the file, exit 1: a
# config.json of another architecture, an unsupported rope_scaling,
# attention biases, a shard the index names that is missing.
. "$(dirname "$0")/lib.sh"
no_leak_scan_in_threaded_programs
py=/usr/bin/python3
"$py" -c 'import torch' 2>/dev/null || { echo "FAIL: /usr/bin/python3 cannot import torch (install python3-torch)" >&2; exit 1; }
hf=tests/parity/hf_llama.py
sets=(--set batch=2 --set seq=24 --set sgd=1 --set lr=0.1 --set grad_clip=0)

"$py" "$hf" make "$work/ckpt" "$work/in.st" 3 && pass || fail "writing the checkpoint folder"
"$py" "$hf" make "$work/nohead" "$work/in.st" 3 --no-head && pass || fail "writing the checkpoint folder without lm_head"
grep -q '"BF16"' "$work/ckpt/model-00002-of-00002.safetensors" && pass || fail "the shards are not bf16"

# compile NAME [OPTIONS...]: models/llama.xml from the folder's config.json.
compile() {
  local name=$1; shift
  if "$FUSIONC" compile models/llama.xml clusters/local-1.xml -o "$work/$name" --hf-config "$work/ckpt/config.json" \
       "${sets[@]}" "$@" >"$work/$name.log" 2>&1; then pass; else fail "$name: compile: $(tail -2 "$work/$name.log")"; fi
}
# step NAME BUILD INIT: one step from INIT with --dump-grads, compared with PyTorch (0: they match).
step() {
  local name=$1 build=$2 init=$3
  if ! "$work/$build/cpu0/fusion-cpu0" --init "$init" --inputs "$work/in.st" --steps 1 \
       --dump-grads "$work/$name.dump" >"$work/$name.run" 2>&1; then
    fail "$name: run: $(tail -2 "$work/$name.run")"; return 2; fi
  "$py" "$hf" grads "$init" "$work/in.st" "$work/$name.dump" >"$work/$name.cmp" 2>&1
}

compile tied
step sharded tied "$work/ckpt" && { pass; echo "  sharded bf16 folder: $(tail -1 "$work/sharded.cmp")" >&2; } \
  || fail "sharded: $(cat "$work/sharded.cmp" "$work/sharded.run" 2>/dev/null | tail -5)"
step nohead tied "$work/nohead" && { pass; echo "  without lm_head.weight: $(tail -1 "$work/nohead.cmp")" >&2; } \
  || fail "no lm_head: $(cat "$work/nohead.cmp" "$work/nohead.run" 2>/dev/null | tail -5)"
# The tied model has no lm_head.weight of its own, and its gradient is one.
"$py" - "$work/sharded.dump" <<'PYEOF' && pass || fail "the tied model's gradients: lm_head.weight present or embed_tokens absent"
import sys
sys.path.insert(0, "tests/parity")
from torch_parity import st_read
d = st_read(sys.argv[1])
sys.exit(0 if "grad.model.embed_tokens.weight" in d and not any("lm_head" in k for k in d) else 1)
PYEOF

# One file in the folder: model.safetensors, the shards merged.
mkdir -p "$work/single"
cp "$work/ckpt/config.json" "$work/single/"
"$py" - "$work/ckpt" "$work/single/model.safetensors" <<'PYEOF'
import glob, sys
sys.path.insert(0, "tests/parity")
from torch_parity import st_read, st_write
t = {}
for f in sorted(glob.glob(sys.argv[1] + "/model-*.safetensors")):
    t.update(st_read(f))
st_write(sys.argv[2], t)
PYEOF
step single tied "$work/single" && pass || fail "single: $(cat "$work/single.cmp" "$work/single.run" 2>/dev/null | tail -5)"

# As 2 pipeline stages (the tied embedding at both ends, each device
# reading only its stage's shards), the losses equal one device's.
claim_ports
cat /usr/share/common-licenses/* >"$work/corpus.txt"
losses() { sed 's/^\[[^]]*\] //' "$1" | awk '/^step /{print $4}'; }
"$work/tied/cpu0/fusion-cpu0" --init "$work/ckpt" --data "$work/corpus.txt" --steps 5 --seed 3 >"$work/one.out" 2>&1 \
  && pass || fail "one device from the folder: $(tail -3 "$work/one.out")"
if "$FUSIONC" compile models/llama.xml clusters/local-4.xml -o "$work/pp" --hf-config "$work/ckpt/config.json" \
     "${sets[@]}" --stages 2 --replicas 1 --micro-batches 2 --compress none --port-base "$ports" >"$work/pp.log" 2>&1 \
   && "$work/pp/launch-local.sh" --init "$work/ckpt" --data "$work/corpus.txt" --steps 5 --seed 3 >"$work/pp.out" 2>&1; then
  pass
  losses "$work/one.out" >"$work/one.loss"
  losses "$work/pp.out" >"$work/pp.loss"
  expect_eq "pipeline steps" 5 "$(wc -l <"$work/pp.loss")"
  losses_within "tied hf llama, 2 stages" "$work/one.loss" "$work/pp.loss"
else
  fail "2 stages: $(tail -3 "$work/pp.log" "$work/pp.out")"
fi
release_ports

# The comparison sees the rope scaling: left off, the gradients differ.
compile unscaled --set rope_factor=0
step unscaled unscaled "$work/ckpt"
expect_eq "without the llama3 scaling, torch's gradients (with it) differ: exit" 1 $?
echo "  rope scaling left off (must differ): $(tail -1 "$work/unscaled.cmp")" >&2

# --set wins over the config; plan and simulate take the option too.
"$FUSIONC" stats models/llama.xml --hf-config "$work/ckpt/config.json" --set layers=1 >"$work/stats" 2>&1
grep -Eq '^  layers +1$' "$work/stats" && grep -Eq '^  tie +1$' "$work/stats" && grep -Eq '^  rope_old_ctx +32$' "$work/stats" \
  && pass || fail "stats with --hf-config and --set layers=1: $(head -20 "$work/stats")"
"$FUSIONC" simulate models/llama.xml clusters/local-4.xml --hf-config "$work/ckpt/config.json" --set seq=24 \
  -o "$work/sim" >"$work/sim.out" 2>&1 && pass || fail "simulate --hf-config: $(tail -3 "$work/sim.out")"

# Taken: what Hugging Face defaults (no num_key_value_heads: as many as
# heads; rope_scaling null: none), the older "type" key, Mistral without a
# sliding window.
# taken NAME EDIT HYPER VALUE: stats with the edited config shows HYPER VALUE.
taken() {
  local name=$1 edit=$2 hyper=$3 value=$4
  mkdir -p "$work/ok-$name"
  "$py" -c "import json, sys; c = json.load(open(sys.argv[1])); $edit; json.dump(c, open(sys.argv[2], 'w'))" \
    "$work/ckpt/config.json" "$work/ok-$name/config.json"
  "$FUSIONC" stats models/llama.xml --hf-config "$work/ok-$name/config.json" >"$work/ok-$name.out" 2>&1
  grep -Eq "^  $hyper +$value\$" "$work/ok-$name.out" && pass || fail "$name: expected $hyper $value: $(head -20 "$work/ok-$name.out")"
}
taken no-kv 'del c["num_key_value_heads"]' kv_heads 4
taken no-scaling 'c["rope_scaling"] = None' rope_factor 0
taken old-type 'c["rope_scaling"]["type"] = c["rope_scaling"].pop("rope_type")' rope_factor 8
taken mistral 'c["model_type"] = "mistral"; c["architectures"] = ["MistralForCausalLM"]; c["sliding_window"] = None' tie 1

# ---- refused, naming the file ----
# refused NAME JQ-LIKE-EDIT EXPECTED: config.json edited by python, compile exits 1 with EXPECTED.
refused() {
  local name=$1 edit=$2 expected=$3
  mkdir -p "$work/bad-$name"
  "$py" -c "import json, sys; c = json.load(open(sys.argv[1])); $edit; json.dump(c, open(sys.argv[2], 'w'))" \
    "$work/ckpt/config.json" "$work/bad-$name/config.json"
  "$FUSIONC" compile models/llama.xml clusters/local-1.xml -o "$work/bad-$name/out" \
    --hf-config "$work/bad-$name/config.json" "${sets[@]}" >"$work/bad-$name.out" 2>&1
  expect_eq "$name: exit" 1 $?
  grep -qF "$work/bad-$name/config.json: $expected" "$work/bad-$name.out" && pass \
    || fail "$name: expected '$expected', found: $(cat "$work/bad-$name.out")"
  [ ! -e "$work/bad-$name/out" ] && pass || fail "$name: an output folder was made"
}
refused neox 'c["model_type"] = "gpt_neox"; c["architectures"] = ["GPTNeoXForCausalLM"]' \
  "model_type 'gpt_neox' is not supported (llama, mistral, gpt2)"
refused yarn 'c["rope_scaling"] = {"rope_type": "yarn", "factor": 4.0}' \
  "rope_scaling type 'yarn' is not supported (llama3 only)"
refused bias 'c["attention_bias"] = True' "attention_bias true is not supported"
refused gelu 'c["hidden_act"] = "gelu"' "hidden_act 'gelu' is not supported (silu only)"
refused head-dim 'c["head_dim"] = 32' "head_dim 32 is not supported"
refused qwen2 'c["model_type"] = "qwen2"' "model_type 'qwen2' is not supported"
refused sliding 'c["model_type"] = "mistral"; c["architectures"] = ["MistralForCausalLM"]; c["sliding_window"] = 16' \
  "sliding_window 16 is not supported"
"$FUSIONC" stats models/llama.xml --hf-config "$work/nothere.json" >/dev/null 2>"$work/nothere.err"
expect_eq "a config.json that is not there: exit" 1 $?
grep -q "$work/nothere.json: cannot open" "$work/nothere.err" && pass || fail "missing config: $(cat "$work/nothere.err")"

# A shard the index names, missing: refused before anything is read.
cp -r "$work/ckpt" "$work/gone"
rm "$work/gone/model-00002-of-00002.safetensors"
"$work/tied/cpu0/fusion-cpu0" --init "$work/gone" --inputs "$work/in.st" --steps 1 >/dev/null 2>"$work/gone.err"
expect_eq "a missing shard: exit" 1 $?
grep -qE "$work/gone/model-00002-of-00002.safetensors: named by model.safetensors.index.json for 'model\.(layers\.1\.|norm)[a-z_.]*weight', missing" \
  "$work/gone.err" && pass || fail "missing shard: $(cat "$work/gone.err")"
# A folder with neither file.
mkdir -p "$work/empty"
"$work/tied/cpu0/fusion-cpu0" --init "$work/empty" --inputs "$work/in.st" --steps 1 >/dev/null 2>"$work/empty.err"
expect_eq "an empty folder: exit" 1 $?
grep -q "$work/empty: a folder with neither model.safetensors nor model.safetensors.index.json" "$work/empty.err" \
  && pass || fail "empty folder: $(cat "$work/empty.err")"
finish
