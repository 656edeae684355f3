# Checkpoints: 40 straight steps, against a run killed (kill -9) after its
# first checkpoint (every 10 steps), resumed, and run to step 40: the same
# losses and bitwise the same parameters and optimizer state.  The layout
# (DIR/step-N/, its MANIFEST, DIR/latest, --keep), the fallback to an older
# step when the newest does not verify, --init (weights by name),
# --dump-grads, and the refusals.
. "$(dirname "$0")/lib.sh"
no_leak_scan_in_threaded_programs

cat /usr/share/common-licenses/* > "$work/corpus.txt"
small=(--set vocab=256 --set ctx=32 --set layers=2 --set dim=64 --set heads=2 --set batch=8 --set seq=32
       --set lr=3e-3 --set warmup=4 --set steps=40)
"$FUSIONC" compile models/gpt2.xml clusters/local-1.xml -o "$work/out" "${small[@]}" >/dev/null || fail "compile"
exe="$work/out/cpu0/fusion-cpu0"
losses() { awk '/^step /{print $2, $4}' "$1"; }

"$exe" --data "$work/corpus.txt" --steps 40 --seed 9 --save "$work/straight" >"$work/straight.out" 2>&1 ||
  fail "straight run: $(tail -2 "$work/straight.out")"

# Save every 10 steps, and kill -9 the process once its first checkpoint is there.
"$exe" --data "$work/corpus.txt" --steps 1000000 --seed 9 --save "$work/ckpt" --save-every 10 \
  --log "$work/killed.jsonl" >"$work/killed.out" 2>&1 &
pid=$!
for _ in $(seq 1 3000); do
  [ -e "$work/ckpt/latest" ] && break
  sleep 0.01
done
kill -9 "$pid" 2>/dev/null; wait "$pid" 2>/dev/null
[ -s "$work/ckpt/latest/checkpoint.safetensors" ] && pass || fail "no checkpoint after the kill"
# A kill during a save leaves at most a step folder without a MANIFEST (and temporary files).
expect_eq "entries of the checkpoint folder" "" "$(ls "$work/ckpt" | grep -Ev '^(latest|step-[0-9]+)$' | grep -v '\.tmp\.' || true)"
"$exe" --data "$work/corpus.txt" --steps 40 --resume "$work/ckpt" --save "$work/resumed" >"$work/resumed.out" 2>&1 ||
  fail "resumed run: $(tail -2 "$work/resumed.out")"
first_resumed=$(losses "$work/resumed.out" | head -1 | cut -d/ -f1)
killed_at=$(grep -c '"step"' "$work/killed.jsonl")
case "$first_resumed" in 11|21|31) pass ;; *) fail "resumed at step '$first_resumed', expected 11, 21 or 31" ;; esac
[ "$killed_at" -ge "$((first_resumed - 1))" ] && [ "$killed_at" -lt 40 ] && pass ||
  fail "the killed run reached step $killed_at; the resume started at $first_resumed"
expect_eq "losses after the resume" "$(losses "$work/straight.out" | awk -v s="$first_resumed" '{ split($1, a, "/"); if (a[1] >= s) print }')" \
  "$(losses "$work/resumed.out")"
grep -q "^fusion: resumed from $work/ckpt/step-$((first_resumed - 1)) (step $((first_resumed - 1)))" "$work/resumed.out" \
  && pass || fail "no 'resumed from' line: $(grep fusion: "$work/resumed.out" | head -3)"
if cmp -s "$work/straight/latest/checkpoint.safetensors" "$work/resumed/latest/checkpoint.safetensors"; then pass
else fail "params and optimizer state at step 20 differ between the straight and the resumed run"; fi

# --init: weights by name; the step-20 params as initial weights give another loss than the seed's.
"$exe" --data "$work/corpus.txt" --steps 1 --seed 9 --init "$work/straight/latest/checkpoint.safetensors" >"$work/init.out" ||
  fail "--init run"
init_loss=$(losses "$work/init.out" | awk '{print $2}')
seed_loss=$(losses "$work/straight.out" | head -1 | awk '{print $2}')
awk -v a="$init_loss" -v b="$seed_loss" 'BEGIN { exit !(a < b - 0.3) }' && pass ||
  fail "--init with trained weights: first loss $init_loss, expected well under the fresh $seed_loss"

# --init from a BF16 checkpoint (as a Hugging Face one saved in bf16): torch rounds the step-20
# params to bfloat16 and writes them as BF16, and beside it as F32 (.to(bfloat16).float()); both
# load into the fp32 parameters and give the same first loss, bit for bit.
/usr/bin/python3 -c '
import json, struct, sys, torch
raw = open(sys.argv[1], "rb").read()
n = struct.unpack("<Q", raw[:8])[0]
hdr, data = json.loads(raw[8:8 + n]), bytearray(raw[8 + n:])
def write(path, as_bf16):
    header, blob = {}, b""
    for name, e in hdr.items():
        if name == "__metadata__" or e["dtype"] != "F32":
            continue
        b, end = e["data_offsets"]
        t = torch.frombuffer(data[b:end], dtype=torch.float32).to(torch.bfloat16) if end > b else torch.empty(0, dtype=torch.bfloat16)
        r = t.view(torch.int16).numpy().tobytes() if as_bf16 else t.float().numpy().tobytes()
        header[name] = {"dtype": "BF16" if as_bf16 else "F32", "shape": e["shape"], "data_offsets": [len(blob), len(blob) + len(r)]}
        blob += r
    text = json.dumps(header).encode()
    open(path, "wb").write(struct.pack("<Q", len(text)) + text + blob)
write(sys.argv[2], True)
write(sys.argv[3], False)' "$work/straight/latest/checkpoint.safetensors" "$work/bf16.safetensors" "$work/bf16-as-f32.safetensors" ||
  fail "torch could not write the bf16 checkpoint (/usr/bin/python3 with torch is required)"
grep -q '"dtype": "BF16"' "$work/bf16.safetensors" && pass || fail "no BF16 tensor in the converted checkpoint"
"$exe" --data "$work/corpus.txt" --steps 1 --seed 9 --init "$work/bf16.safetensors" >"$work/init-bf16.out" 2>&1 ||
  fail "--init from a BF16 checkpoint: $(tail -2 "$work/init-bf16.out")"
"$exe" --data "$work/corpus.txt" --steps 1 --seed 9 --init "$work/bf16-as-f32.safetensors" >"$work/init-bf16-f32.out" 2>&1 ||
  fail "--init from its F32 twin: $(tail -2 "$work/init-bf16-f32.out")"
expect_eq "first loss from the BF16 checkpoint and from its F32 twin" "$(losses "$work/init-bf16-f32.out")" \
  "$(losses "$work/init-bf16.out")"
[ -n "$(losses "$work/init-bf16.out")" ] && pass || fail "--init from the BF16 checkpoint printed no loss"

# --dump-grads: one gradient per parameter (grad.<param>), the inputs and the loss.
"$exe" --data "$work/corpus.txt" --steps 1 --dump-grads "$work/grads.safetensors" >/dev/null || fail "--dump-grads run"
names=$(/usr/bin/python3 -c '
import json, struct, sys
with open(sys.argv[1], "rb") as f:
    n = struct.unpack("<Q", f.read(8))[0]
    h = json.loads(f.read(n))
print(len([k for k in h if k.startswith("grad.")]), " ".join(sorted(k for k in h if k != "__metadata__" and not k.startswith("grad."))))' "$work/grads.safetensors")
params=$(grep -c '^param ' "$work/out/cpu0/manifest.txt")
expect_eq "tensors dumped (gradients, then the rest)" "$params idx loss targets" "$names"

# Refusals: one line, non-zero exit.
"$exe" --data "$work/corpus.txt" --steps 20 --resume "$work/nothing" >/dev/null 2>"$work/err"; expect_eq "resume from nothing" 1 $?
grep -q "nothing: cannot open the checkpoint folder" "$work/err" && pass || fail "resume message: $(cat "$work/err")"
"$exe" --data "$work/corpus.txt" --steps 20 --seed 3 --resume "$work/ckpt" >/dev/null 2>"$work/err"
expect_eq "resume with another seed" 1 $?
grep -q "was trained with --seed 9, not 3" "$work/err" && pass || fail "seed message: $(cat "$work/err")"
"$FUSIONC" compile models/gpt2.xml clusters/local-1.xml -o "$work/other" "${small[@]}" --set lr=1e-3 >/dev/null
# Another compile of the same model (another learning rate): read by tensor name.
"$work/other/cpu0/fusion-cpu0" --data "$work/corpus.txt" --steps 40 --resume "$work/ckpt" >"$work/other.out" 2>"$work/err"
expect_eq "resume in another compile" 0 $?
grep -q "a checkpoint of another compile (1 part), read by tensor name" "$work/other.out" && pass \
  || fail "another compile: $(cat "$work/other.out" "$work/err")"

# The layout: --save-every 2 --keep 2 over 7 steps keeps steps 4 and 6 and the end's 7; latest -> step-7.
"$exe" --data "$work/corpus.txt" --steps 7 --seed 9 --save "$work/keep" --save-every 2 --keep 3 >"$work/keep.out" 2>&1 ||
  fail "--keep run: $(tail -2 "$work/keep.out")"
expect_eq "steps kept by --keep 3" "latest step-4 step-6 step-7" "$(ls "$work/keep" | sort -V | tr '\n' ' ' | sed 's/ $//')"
expect_eq "latest" "step-7" "$(readlink "$work/keep/latest")"
grep -q "^fusion: checkpoint of step 7: $work/keep/step-7, 1 part, [0-9.]* MB, [0-9.]* s$" "$work/keep.out" && pass \
  || fail "no save line for step 7: $(grep fusion: "$work/keep.out" | tail -2)"
expect_eq "MANIFEST of step 7" "fusion checkpoint 1|step 7|part checkpoint.safetensors $(stat -c %s "$work/keep/step-7/checkpoint.safetensors") " \
  "$(head -3 "$work/keep/step-7/MANIFEST" | tr '\n' '|' | sed 's/[0-9a-f]\{16\}|$//')"

# Refusals: a fresh run into a folder holding a run; --steps not above the checkpoint's.
"$exe" --data "$work/corpus.txt" --steps 9 --save "$work/keep" >/dev/null 2>"$work/err"; expect_eq "a fresh run into a run's folder" 1 $?
grep -q "keep holds the checkpoints of a run (newest: step-7): give --resume" "$work/err" && pass || fail "message: $(cat "$work/err")"
"$exe" --data "$work/corpus.txt" --steps 7 --resume "$work/keep" >/dev/null 2>"$work/err"; expect_eq "--steps at the checkpoint's" 1 $?
grep -q "the checkpoint is at step 7 and --steps is 7: nothing to train" "$work/err" && pass || fail "message: $(cat "$work/err")"

# The newest step damaged (one byte of its part): the run says so and resumes from the one before,
# with the losses of the straight run from there.
cp -r "$work/keep" "$work/damaged"
printf 'X' | dd of="$work/damaged/step-7/checkpoint.safetensors" bs=1 seek=5000 conv=notrunc 2>/dev/null
"$exe" --data "$work/corpus.txt" --steps 9 --seed 9 --resume "$work/damaged" --save "$work/damaged" >"$work/fallback.out" 2>&1 ||
  fail "fallback resume: $(tail -2 "$work/fallback.out")"
grep -q "^fusion: $work/damaged/step-7 does not verify: .*step-7/checkpoint.safetensors: its XXH3 is .*; trying step-6" \
  "$work/fallback.out" && pass || fail "no fallback line: $(grep fusion: "$work/fallback.out" | head -3)"
expect_eq "losses after the fallback to step 6" "$(losses "$work/straight.out" | awk '{ split($1, a, "/"); if (a[1] == 7 || a[1] == 8 || a[1] == 9) print $2 }')" \
  "$(losses "$work/fallback.out" | awk '{print $2}')"

# A checkpoint of a model with a layer more is refused, naming what this program lacks.
"$FUSIONC" compile models/gpt2.xml clusters/local-1.xml -o "$work/three" "${small[@]}" --set layers=3 >/dev/null || fail "3-layer compile"
"$work/three/cpu0/fusion-cpu0" --data "$work/corpus.txt" --steps 2 --save "$work/three.ck" >/dev/null 2>&1 || fail "3-layer run"
"$exe" --data "$work/corpus.txt" --steps 5 --resume "$work/three.ck" >/dev/null 2>"$work/err"; expect_eq "a 3-layer checkpoint in a 2-layer program" 1 $?
grep -q "a checkpoint of another 'gpt2' (its parameters differ from this program's): it holds [0-9]* this program has not: 'h.2\." \
  "$work/err" && pass || fail "message: $(cat "$work/err")"
finish
