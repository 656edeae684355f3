# Training settings at run time (issue 33, item 1): a device program's
# --lr, --min-lr, --warmup, --lr-schedule, --schedule-steps,
# --weight-decay and --grad-clip give, bit for bit, the losses of a
# program compiled with those values as the model's hyper-parameters
# (clipping turned on at run time in a model compiled without it); the
# schedule's length is the run's --steps unless --schedule-steps says
# otherwise, and its rates are the formula's (cosine and linear); every
# step's JSONL carries lr, grad_norm (the norm of the gradients
# --dump-grads writes), tokens seen and a wall-clock time, and the
# console line the rate, the norm and an ETA; bad settings are refused
# in one line.
. "$(dirname "$0")/lib.sh"
no_leak_scan_in_threaded_programs

head -c 40000 /usr/share/common-licenses/GPL-3 >"$work/train.txt"
model=(--set vocab=256 --set ctx=16 --set layers=2 --set dim=16 --set heads=2 --set batch=4 --set seq=16)
"$FUSIONC" compile models/gpt2.xml clusters/local-1.xml -o "$work/plain" "${model[@]}" --set grad_clip=0 \
  >"$work/c.out" 2>&1 && pass || fail "compile: $(cat "$work/c.out")"
"$FUSIONC" compile models/gpt2.xml clusters/local-1.xml -o "$work/tuned" "${model[@]}" --set grad_clip=0.5 \
  --set lr=1e-3 --set weight_decay=0.05 --set warmup=2 --set steps=8 --set min_lr=1e-4 >"$work/c.out" 2>&1 \
  && pass || fail "compile tuned: $(cat "$work/c.out")"
plain="$work/plain/cpu0/fusion-cpu0" tuned="$work/tuned/cpu0/fusion-cpu0"
losses() { awk '/^step /{print $4}' "$1"; }
field() { grep -o "\"$2\": [^,}]*" "$1" | awk '{print $2}'; }

# The run's options over a model compiled without them = the model compiled with them.
"$tuned" --data "$work/train.txt" --steps 10 --seed 3 --log "$work/tuned.jsonl" >"$work/tuned.out" 2>&1 \
  && pass || fail "tuned run: $(tail -2 "$work/tuned.out")"
"$plain" --data "$work/train.txt" --steps 10 --seed 3 --lr 1e-3 --weight-decay 0.05 --grad-clip 0.5 --warmup 2 \
  --lr-schedule cosine --schedule-steps 8 --min-lr 1e-4 --log "$work/set.jsonl" >"$work/set.out" 2>&1 \
  && pass || fail "run with settings: $(tail -2 "$work/set.out")"
expect_eq "losses: run-time settings against compiled ones" "$(losses "$work/tuned.out")" "$(losses "$work/set.out")"
expect_eq "learning rates: run-time settings against compiled ones" "$(field "$work/tuned.jsonl" lr)" \
  "$(field "$work/set.jsonl" lr)"
"$plain" --data "$work/train.txt" --steps 10 --seed 3 >"$work/default.out" 2>&1
[ "$(losses "$work/default.out")" != "$(losses "$work/set.out")" ] && pass || fail "the settings changed nothing"
grep -q "^fusion: learning rate 0.001, cosine to 0.0001 by step 8 (the model's steps), after 2 warm-up steps; weight decay 0.05; gradient norm clipped at 0.5$" \
  "$work/tuned.out" && pass || fail "tuned start line: $(grep 'learning rate' "$work/tuned.out")"
grep -q "^fusion: the schedule ends at step 8, before the run's 10: the rate stays at 0.0001 after it" "$work/set.out" \
  && pass || fail "no word of the schedule ending early: $(grep 'schedule' "$work/set.out")"
grep -q "^fusion: learning rate 0.0006, constant; weight decay 0.1; no gradient clipping$" "$work/default.out" \
  && pass || fail "default start line: $(grep 'learning rate' "$work/default.out")"

# The schedule's length is the run's --steps: cosine and linear, rate by rate.
"$plain" --data "$work/train.txt" --steps 20 --seed 3 --lr-schedule cosine --lr 2e-3 --min-lr 2e-4 --warmup 4 \
  --log "$work/cos.jsonl" >"$work/cos.out" 2>&1 && pass || fail "cosine run: $(tail -2 "$work/cos.out")"
grep -q "cosine to 0.0002 by step 20 (the run's --steps), after 4 warm-up steps" "$work/cos.out" && pass \
  || fail "cosine start line: $(grep 'learning rate' "$work/cos.out")"
field "$work/cos.jsonl" lr | awk 'function want(t) { if (t <= 4) return 2e-3 * t / 4;
    return 2e-4 + 0.5 * (1 + cos(3.141592653589793 * (t - 4) / 16)) * (2e-3 - 2e-4) }
  { w = want(NR); d = $1 - w; if (d < 0) d = -d; if (d > 1e-6 * w) { printf "step %d: lr %s, expected %.9g\n", NR, $1, w; bad = 1 } }
  END { if (NR != 20) { print NR " rates"; bad = 1 } exit bad }' >"$work/cos.bad" && pass \
  || fail "cosine rates: $(cat "$work/cos.bad")"
"$plain" --data "$work/train.txt" --steps 20 --seed 3 --lr-schedule linear --lr 2e-3 --log "$work/lin.jsonl" \
  >"$work/lin.out" 2>&1 && pass || fail "linear run: $(tail -2 "$work/lin.out")"
expect_eq "linear rates at steps 1, 10, 20" "0.0019 0.001 0" "$(field "$work/lin.jsonl" lr | sed -n '1p;10p;20p' | xargs)"

# Every step's JSONL: grad_norm, tokens (4 x 16 a step), a wall-clock time; the console: lr, gnorm, eta.
"$plain" --data "$work/train.txt" --steps 3 --seed 3 --dump-grads "$work/grads.safetensors" --log "$work/g.jsonl" \
  >"$work/g.out" 2>&1 && pass || fail "run with --dump-grads: $(tail -2 "$work/g.out")"
norm=$(/usr/bin/python3 - "$work/grads.safetensors" <<'EOF'
import json, math, struct, sys
raw = open(sys.argv[1], "rb").read()
n = struct.unpack("<Q", raw[:8])[0]
header, total = json.loads(raw[8:8 + n]), 0.0
for name, t in header.items():
    if name.startswith("grad."):
        a, b = t["data_offsets"]
        total += sum(x * x for x in struct.unpack("<%df" % ((b - a) // 4), raw[8 + n + a:8 + n + b]))
print(math.sqrt(total))
EOF
)
awk -v a="$(field "$work/g.jsonl" grad_norm | head -1)" -v b="$norm" 'BEGIN { d = a - b; if (d < 0) d = -d; exit !(b > 0 && d <= 1e-4 * b) }' \
  && pass || fail "grad_norm at step 1: $(field "$work/g.jsonl" grad_norm | head -1), the dumped gradients' norm $norm"
expect_eq "tokens seen" "64 128 192" "$(field "$work/g.jsonl" tokens | xargs)"
now=$(date +%s)
field "$work/g.jsonl" time | awk -v now="$now" '{ if ($1 < now - 600 || $1 > now + 1 || $1 < last) bad = 1; last = $1 } END { exit bad || NR != 3 }' \
  && pass || fail "wall-clock times: $(field "$work/g.jsonl" time | xargs) (now $now)"
grep -Eq '^step +2/3  loss [0-9.]+ +[0-9]+ tok/s +[0-9.]+ ms/step  lr 6\.00e-04  gnorm [0-9.e+-]+  eta [0-9]+s$' "$work/g.out" \
  && pass || fail "console step line: $(grep '^step ' "$work/g.out" | sed -n 2p)"

# Refused in one line.
"$plain" --data "$work/train.txt" --lr-schedule cosin >/dev/null 2>"$work/err"; expect_eq "--lr-schedule cosin: exit" 2 $?
grep -q -- "--lr-schedule expects constant, cosine or linear, found 'cosin'" "$work/err" && pass || fail "cosin: $(cat "$work/err")"
"$plain" --data "$work/train.txt" --steps 20 --lr-schedule cosine --warmup 20 >/dev/null 2>"$work/err"
expect_eq "warm-up as long as the schedule: exit" 1 $?
grep -q "the cosine schedule's 20 steps (the run's --steps) are not more than its 20 warm-up steps" "$work/err" && pass \
  || fail "warm-up too long: $(cat "$work/err")"
"$plain" --data "$work/train.txt" --min-lr 0.1 >/dev/null 2>"$work/err"; expect_eq "--min-lr above lr: exit" 1 $?
grep -q -- "--min-lr 0.1: must be in \[0, lr\] (lr is 0.0006)" "$work/err" && pass || fail "min-lr: $(cat "$work/err")"
"$plain" --data "$work/train.txt" --lr 0 >/dev/null 2>"$work/err"; expect_eq "--lr 0: exit" 2 $?
finish
