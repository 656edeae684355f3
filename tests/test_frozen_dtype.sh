# --frozen-dtype (passes/shapes.c's precision pass): frozen parameters
# stored in 16 bits.
#  - a LoRA fine-tune whose base is stored bf16 trains exactly as one whose
#    f32 base holds the same values rounded to bf16 (a CPU widens a 16-bit
#    weight exactly): every step's loss and every trained adapter bit for
#    bit, from --init of the f32 base (rounded as it loads) and from a bf16
#    file; the plan and the manifest say so, and the arena is smaller by
#    the base's halved bytes;
#  - under --precision bf16 as well, and fp16 frozen under fp32;
#  - a checkpoint of the bf16 run resumes on its base, and is refused on
#    the base stored f32 (the values it trained on differ);
#  - bad input: no frozen parameter; a 16-bit type against another 16-bit
#    precision.
. "$(dirname "$0")/lib.sh"

py=/usr/bin/python3
cfg="vocab=256,ctx=32,layers=2,dim=64,heads=4,kv_heads=2,ffn=172,batch=4,seq=24"
model=(models/llama.xml)
IFS=, read -ra kv <<<"$cfg"
for s in "${kv[@]}"; do model+=(--set "$s"); done
lora=(--lora rank=4,alpha=8,targets=q_proj,v_proj,down_proj)
losses() { awk '/^step .*loss/{print $4}' "$1"; }
head -c 200000 /usr/share/common-licenses/GPL-3 >"$work/corpus.txt"

"$py" tests/parity/torch_parity.py make llama "$cfg" "$work/base.st" "$work/in.st" 7 || fail "making the base"
# The base rounded: as f32 (the reference), and as a bf16 file.
"$py" - "$work" <<'PYEOF' || fail "rounding the base"
import sys, torch
sys.path.insert(0, "tests/parity")
from torch_parity import st_read, st_write
w = sys.argv[1]
base = st_read(w + "/base.st")
for name, dt in (("bf16", torch.bfloat16), ("fp16", torch.float16)):
    st_write(f"{w}/base_{name}_as_f32.st", {k: v.to(dt).float() for k, v in base.items()})
st_write(w + "/base_bf16.st", {k: v.to(torch.bfloat16) for k, v in base.items()})
PYEOF

compile() { # NAME ARGS...: compile the LoRA model for one CPU
  local name=$1
  shift
  "$FUSIONC" compile "${model[@]}" "${lora[@]}" clusters/local-1.xml -o "$work/$name" "$@" >"$work/$name.compile" 2>&1 ||
    fail "compile $name: $(cat "$work/$name.compile")"
}
train() { # NAME INIT OUT [ARGS...]: 8 steps, saved at the end
  local name=$1 init=$2 out=$3
  shift 3
  "$work/$name/cpu0/fusion-cpu0" --init "$init" --data "$work/corpus.txt" --seed 3 --steps 8 --save "$work/$out.ck" "$@" \
    >"$work/$out" 2>&1 || fail "training $out: $(tail -3 "$work/$out")"
}
# The adapters of two saved runs, bit for bit.
same_adapters() {
  "$py" - "$work/$1.ck/step-8/checkpoint.safetensors" "$work/$2.ck/step-8/checkpoint.safetensors" <<'PYEOF'
import sys
sys.path.insert(0, "tests/parity")
from torch_parity import st_read
a, b = st_read(sys.argv[1]), st_read(sys.argv[2])
names = [n for n in a if ".lora_" in n]
bad = [n for n in names if n not in b or not a[n].equal(b[n])]
print(f"{len(bad)} of {len(names)} adapters differ: {bad[:3]}" if bad or not names else
      f"frozen dtype: {len(names)} adapters and moments bit for bit", file=sys.stderr)
sys.exit(1 if bad or not names else 0)
PYEOF
}

compile f32
compile bf16 --frozen-dtype bf16
pass
grep -q "^precision: f32 (all but the frozen parameters); frozen parameters bf16$" "$work/bf16/plan.txt" && pass ||
  fail "the plan does not name the frozen dtype: $(grep precision "$work/bf16/plan.txt")"
grep -q "^precision  f32; frozen parameters bf16$" "$work/bf16/cpu0/manifest.txt" && pass ||
  fail "the manifest does not name the frozen dtype: $(grep precision "$work/bf16/cpu0/manifest.txt")"
# The arena: every base weight's bytes halved, less the scratch a CPU
# widens the largest of them in (the embedding's table, 256 x 64).
read -r base_floats largest < <("$py" -c "
import sys; sys.path.insert(0, 'tests/parity')
from torch_parity import st_read
b = st_read('$work/base.st'); print(sum(v.numel() for v in b.values()), max(v.numel() for v in b.values()))")
arena() { sed -n 's/^arena *\([0-9]*\) bytes$/\1/p' "$work/$1/cpu0/manifest.txt"; }
saved=$(($(arena f32) - $(arena bf16))) want=$((base_floats * 2 - largest * 4 - 4096))
[ "$saved" -ge "$want" ] && pass ||
  fail "the arena shrank by $saved bytes, less than the base's halved bytes less the widening scratch, $want"
echo "  frozen dtype: arena $(arena f32) bytes with an f32 base, $(arena bf16) with bf16 ($base_floats base floats)" >&2

train bf16 "$work/base.st" bf16.run
train f32 "$work/base_bf16_as_f32.st" f32.run
expect_eq "bf16 base against its values in f32: the losses" "$(losses "$work/f32.run" | xargs)" \
  "$(losses "$work/bf16.run" | xargs)"
same_adapters bf16.run f32.run && pass || fail "the adapters differ"
train bf16 "$work/base_bf16.st" bf16file.run
same_adapters bf16.run bf16file.run && pass || fail "a bf16 file's base is not the f32 file's rounded"

# Under --precision bf16 too; and fp16 frozen under fp32.
compile bf16p --precision bf16 --frozen-dtype bf16
compile f32p --precision bf16
train bf16p "$work/base.st" bf16p.run
train f32p "$work/base_bf16_as_f32.st" f32p.run
same_adapters bf16p.run f32p.run && pass || fail "--precision bf16: the bf16 base is not its values in f32"
compile fp16 --frozen-dtype fp16
train fp16 "$work/base.st" fp16.run
train f32 "$work/base_fp16_as_f32.st" f32h.run
same_adapters fp16.run f32h.run && pass || fail "fp16 base: not its values in f32"

# Resume: on the base it trained on; refused on the f32 one (other values).
"$work/bf16/cpu0/fusion-cpu0" --init "$work/base.st" --data "$work/corpus.txt" --steps 9 --resume "$work/bf16.run.ck" \
  >"$work/resumed" 2>&1 && pass || fail "resume: $(tail -3 "$work/resumed")"
"$work/f32/cpu0/fusion-cpu0" --init "$work/base.st" --data "$work/corpus.txt" --steps 9 --resume "$work/bf16.run.ck" \
  >"$work/other" 2>&1
expect_eq "resumed on the f32 base: exit status" 1 $?
grep -q "frozen parameter '.*' is not the one the checkpoint was trained on" "$work/other" && pass ||
  fail "no other-base error: $(tail -2 "$work/other")"

# Bad input.
"$FUSIONC" plan "${model[@]}" clusters/local-1.xml --frozen-dtype bf16 -o "$work/bad" >"$work/bad.out" 2>&1
expect_eq "nothing frozen: exit status" 1 $?
grep -q "error: precision: --frozen-dtype bf16: no parameter is frozen (give --freeze or --lora)" "$work/bad.out" && pass ||
  fail "no nothing-frozen error: $(cat "$work/bad.out")"
"$FUSIONC" plan "${model[@]}" "${lora[@]}" clusters/local-1.xml --precision bf16 --frozen-dtype fp16 -o "$work/bad" \
  >"$work/bad.out" 2>&1
expect_eq "fp16 frozen under bf16: exit status" 1 $?
grep -q "error: precision: --frozen-dtype fp16 with --precision bf16: a matrix product cannot mix two 16-bit types (give --frozen-dtype bf16)" \
  "$work/bad.out" && pass || fail "no mixed-16-bit error: $(cat "$work/bad.out")"
"$FUSIONC" plan "${model[@]}" "${lora[@]}" clusters/local-1.xml --frozen-dtype int8 -o "$work/bad" >"$work/bad.out" 2>&1
expect_eq "--frozen-dtype int8: exit status" 2 $?
grep -q -- "--frozen-dtype expects fp32, bf16 or fp16, found 'int8'" "$work/bad.out" && pass ||
  fail "no bad-value error: $(cat "$work/bad.out")"
finish
