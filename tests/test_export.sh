# fusionc export: a checkpoint out as a Hugging Face folder.
# - a 2-stage pipeline's checkpoint (two parts) exports as one
#   model.safetensors with every parameter once and no optimizer state, and
#   a config.json with Llama's fields from the run's hyper-parameters;
# - an independent PyTorch Llama (tests/parity/torch_parity.py) loads the
#   folder by name and computes fusion's loss and every gradient within 1e-4
#   (fp32 files; and bf16 ones, against fusion on the same bf16 weights);
# - the export loads back with --init: its loss is the one the run resumed
#   from the checkpoint computes, bit for bit (the same weights, the same
#   inputs);
# - over --max-shard-size: shards and model.safetensors.index.json, the
#   earlier single file removed;
# - refused, naming what: a folder with no checkpoint, a part that does not
#   match its MANIFEST, a model without a Hugging Face architecture.
. "$(dirname "$0")/lib.sh"
no_leak_scan_in_threaded_programs
py=/usr/bin/python3
"$py" -c 'import torch' 2>/dev/null || { echo "FAIL: /usr/bin/python3 cannot import torch (install python3-torch)" >&2; exit 1; }
parity=tests/parity/torch_parity.py
cat /usr/share/common-licenses/* >"$work/corpus.txt"
cfg="vocab=256,ctx=32,layers=2,dim=64,heads=4,kv_heads=2,ffn=172,batch=8,seq=32"
model=()
IFS=, read -ra kv <<<"$cfg"
for s in "${kv[@]}"; do model+=(--set "$s"); done
claim_ports
# A byte tokenizer (256 ids, <0x00> .. <0xFF>: the model's vocab) and its config.
mkdir -p "$work/tok"
"$py" - "$work/tok" <<'PYEOF'
import json, sys
vocab = {f"<0x{b:02X}>": b for b in range(256)}
json.dump({"model": {"type": "BPE", "byte_fallback": True, "vocab": vocab, "merges": []},
           "decoder": {"type": "ByteFallback"}}, open(sys.argv[1] + "/tokenizer.json", "w"))
json.dump({"model_max_length": 32}, open(sys.argv[1] + "/tokenizer_config.json", "w"))
PYEOF

"$FUSIONC" compile models/llama.xml clusters/local-1.xml -o "$work/one" "${model[@]}" >"$work/c1" 2>&1 &&
  pass || fail "one-device compile: $(cat "$work/c1")"
"$FUSIONC" compile models/llama.xml clusters/local-4.xml -o "$work/pipe" "${model[@]}" --stages 2 --replicas 1 \
  --micro-batches 2 --port-base "$ports" --tokenizer "$work/tok" >"$work/c2" 2>&1 && pass || fail "pipeline compile: $(cat "$work/c2")"
cmp -s "$work/tok/tokenizer_config.json" "$work/pipe/tokenizer/tokenizer_config.json" && pass ||
  fail "compile --tokenizer did not copy the tokenizer's files to OUT/tokenizer"
"$work/pipe/launch-local.sh" --data "$work/corpus.txt" --steps 5 --seed 3 --save "$work/pipe/ckpt" >"$work/train" 2>&1 &&
  pass || fail "pipeline training: $(tail -5 "$work/train")"
ln -s "$work/pipe/ckpt" "$work/ckpt"
expect_eq "checkpoint parts" 2 "$(ls "$work"/ckpt/step-5/checkpoint-*.safetensors | wc -l)"

# ---- one file, fp32 ----
"$FUSIONC" export "$work/ckpt" -o "$work/hf" >"$work/e1" 2>&1 && pass || fail "export: $(cat "$work/e1")"
expect_eq "files" "config.json model.safetensors tokenizer.json tokenizer_config.json" "$(ls "$work/hf" | tr '\n' ' ' | sed 's/ $//')"
"$py" "$parity" names llama "$cfg" "$work/hf" >"$work/names" 2>&1 && pass || fail "export names: $(cat "$work/names")"
"$py" - "$work/hf" <<'PYEOF' && pass || fail "export contents: see above"
import json, os, sys
sys.path.insert(0, "tests/parity")
from torch_parity import st_read
t = st_read(sys.argv[1])
c = json.load(open(os.path.join(sys.argv[1], "config.json")))
want = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "vocab_size": 256, "hidden_size": 64,
        "intermediate_size": 172, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
        "max_position_embeddings": 32, "rope_theta": 10000, "rms_norm_eps": 1e-6, "tie_word_embeddings": False,
        "torch_dtype": "float32"}
bad = [f"{k}: {c.get(k)!r}, expected {v!r}" for k, v in want.items() if c.get(k) != v]
bad += [f"optimizer state exported: {n}" for n in t if n.startswith("adamw.") or n.startswith("fusion.")]
if len(t) != 2 + 2 * 9 + 1:
    bad.append(f"{len(t)} tensors, expected 21")
print("\n".join(bad), file=sys.stderr)
sys.exit(1 if bad else 0)
PYEOF

# PyTorch on the exported folder against fusion on the same weights.
"$py" "$parity" make llama "$cfg" "$work/w.st" "$work/in.st" 9 || fail "making inputs"
mkdir -p "$work/else" && cp -a "$work/pipe/ckpt" "$work/else/ckpt" # a checkpoint outside OUT: no tokenizer found
"$FUSIONC" export "$work/else/ckpt" -o "$work/hf-elsewhere" >/dev/null 2>&1 && pass || fail "export from a copy"
[ ! -e "$work/hf-elsewhere/tokenizer.json" ] && pass || fail "a tokenizer came from nowhere"
"$work/one/cpu0/fusion-cpu0" --init "$work/hf/model.safetensors" --inputs "$work/in.st" --steps 1 \
  --dump-grads "$work/dump.st" >"$work/init.run" 2>&1 && pass || fail "--init from the export: $(tail -2 "$work/init.run")"
"$py" "$parity" grads llama "$cfg" "$work/hf" "$work/dump.st" >"$work/cmp" 2>&1 && pass ||
  fail "PyTorch on the export: $(cat "$work/cmp")"
# The same loss as the checkpoint resumed (another plan: read by name).
"$work/one/cpu0/fusion-cpu0" --resume "$work/ckpt" --inputs "$work/in.st" --steps 6 >"$work/resume.run" 2>&1 &&
  pass || fail "resuming the pipeline's checkpoint on one device: $(tail -2 "$work/resume.run")"
expect_eq "the export's loss against the resumed run's" "$(awk '/^step /{print $4}' "$work/resume.run")" \
  "$(awk '/^step /{print $4}' "$work/init.run")"

# ---- bf16, in shards ----
"$FUSIONC" export "$work/ckpt" -o "$work/hf" --dtype bf16 --max-shard-size 40KB >"$work/e2" 2>&1 &&
  pass || fail "export bf16: $(cat "$work/e2")"
[ -f "$work/hf/model.safetensors.index.json" ] && [ ! -e "$work/hf/model.safetensors" ] && pass ||
  fail "shards: $(ls "$work/hf" | tr '\n' ' ')"
shards=$(ls "$work"/hf/model-*-of-*.safetensors | wc -l)
[ "$shards" -gt 1 ] && pass || fail "$shards shards"
grep -q '"torch_dtype": *"bfloat16"' "$work/hf/config.json" && pass || fail "config.json: $(cat "$work/hf/config.json")"
"$py" - "$work/hf" "$work/bf16.st" <<'PYEOF' || fail "merging the shards"
import sys
sys.path.insert(0, "tests/parity")
from torch_parity import st_read, st_write
t = st_read(sys.argv[1])
assert all(str(v.dtype) == "torch.bfloat16" for v in t.values()), "not all bf16"
st_write(sys.argv[2], t)
PYEOF
"$work/one/cpu0/fusion-cpu0" --init "$work/bf16.st" --inputs "$work/in.st" --steps 1 --dump-grads "$work/dump16.st" \
  >"$work/init16.run" 2>&1 && pass || fail "--init from the bf16 export: $(tail -2 "$work/init16.run")"
"$py" "$parity" grads llama "$cfg" "$work/hf" "$work/dump16.st" >"$work/cmp16" 2>&1 && pass ||
  fail "PyTorch on the bf16 export: $(cat "$work/cmp16")"

# ---- tied, Llama 3 rope scaling: config.json round trip through --hf-config ----
"$FUSIONC" compile models/llama.xml clusters/local-1.xml -o "$work/tied" "${model[@]}" --set tie=1 --set rope_factor=8 \
  --set rope_low_freq=1 --set rope_high_freq=4 --set rope_old_ctx=16 >"$work/ct" 2>&1 && pass || fail "tied compile: $(cat "$work/ct")"
"$work/tied/cpu0/fusion-cpu0" --data "$work/corpus.txt" --steps 2 --save "$work/tied/ckpt" >/dev/null 2>&1 || fail "tied training"
"$FUSIONC" export "$work/tied/ckpt" -o "$work/hf-tied" >"$work/et" 2>&1 && pass || fail "tied export: $(cat "$work/et")"
"$py" - "$work/hf-tied" <<'PYEOF' && pass || fail "tied export's config.json"
import json, sys
c = json.load(open(sys.argv[1] + "/config.json"))
want = {"tie_word_embeddings": True, "rope_scaling": {"rope_type": "llama3", "factor": 8, "low_freq_factor": 1,
        "high_freq_factor": 4, "original_max_position_embeddings": 16}}
bad = [f"{k}: {c.get(k)!r}, expected {v!r}" for k, v in want.items() if c.get(k) != v]
print("\n".join(bad), file=sys.stderr)
sys.exit(1 if bad else 0)
PYEOF
"$FUSIONC" compile models/llama.xml clusters/local-1.xml -o "$work/back" --hf-config "$work/hf-tied/config.json" \
  --set batch=8 --set seq=32 >"$work/cb" 2>&1 && pass || fail "compile --hf-config of the export: $(cat "$work/cb")"
"$work/back/cpu0/fusion-cpu0" --init "$work/hf-tied" --inputs "$work/in.st" --steps 1 >"$work/back.run" 2>&1 &&
  pass || fail "--init DIR of the tied export: $(tail -2 "$work/back.run")"
"$work/tied/cpu0/fusion-cpu0" --resume "$work/tied/ckpt" --inputs "$work/in.st" --steps 3 >"$work/tied.resume" 2>&1 ||
  fail "resuming the tied run: $(tail -2 "$work/tied.resume")"
expect_eq "tied: the export's loss against the resumed run's" "$(awk '/^step /{print $4}' "$work/tied.resume")" \
  "$(awk '/^step /{print $4}' "$work/back.run")"

# ---- refusals ----
# A tokenizer with more ids than the model's vocab: refused at compile.
"$py" -c 'import json, sys; json.dump({"model": {"type": "BPE", "byte_fallback": True, "merges": [],
  "vocab": {**{f"<0x{b:02X}>": b for b in range(256)}, "<extra>": 300}}}, open(sys.argv[1], "w"))' "$work/big.json"
"$FUSIONC" compile models/llama.xml clusters/local-1.xml -o "$work/big" "${model[@]}" --tokenizer "$work/big.json" >"$work/big.out" 2>&1
expect_eq "a tokenizer too big: exit" 1 $?
grep -qF "the tokenizer's 301 ids do not fit the model's vocab of 256" "$work/big.out" && pass || fail "too big: $(cat "$work/big.out")"
refused() { # WHAT NEEDLE ARGS...
  local what=$1 needle=$2
  shift 2
  "$FUSIONC" export "$@" >"$work/out" 2>&1
  expect_eq "$what: exit" 1 $?
  grep -qF -- "$needle" "$work/out" && pass || fail "$what: expected '$needle' in: $(cat "$work/out")"
}
mkdir -p "$work/empty"
refused "no checkpoint" "empty: no complete checkpoint" "$work/empty" -o "$work/x"
cp -r "$work/ckpt/step-5" "$work/bad-step-5"
printf 'X' | dd of="$(ls "$work"/bad-step-5/checkpoint-*.safetensors | head -1)" bs=1 seek=2000 conv=notrunc 2>/dev/null
refused "a damaged part" "checkpoint-" "$work/bad-step-5" -o "$work/x"
[ ! -e "$work/x" ] && pass || fail "a refused export wrote $work/x"
mlp_cfg="batch=8,in_dim=10,hidden=16,layers=2,classes=5"
"$FUSIONC" compile models/mlp.xml clusters/local-1.xml -o "$work/mlp" $(printf -- '--set %s ' ${mlp_cfg//,/ }) >/dev/null 2>&1
"$py" "$parity" make mlp "$mlp_cfg" "$work/mlp-w.st" "$work/mlp-in.st" 1 &&
  "$work/mlp/cpu0/fusion-cpu0" --inputs "$work/mlp-in.st" --steps 1 --save "$work/mlp-ckpt" >"$work/mlp.run" 2>&1 ||
  fail "training the mlp: $(tail -2 "$work/mlp.run")"
refused "an mlp" "model 'mlp' has no Hugging Face architecture" "$work/mlp-ckpt" -o "$work/x"
finish
