# --freeze PATTERN (passes/adapters.c): parameters that do not train.
#  - fusionc stats counts the trained parameters; the IR prints "frozen"
#    and reads it back byte for byte;
#  - step 1 of a tiny Llama with its embedding and layer 0 frozen: no
#    gradient for the frozen ten, and every other gradient bit for bit the
#    unfrozen run's (the backward skips only the frozen weights' products);
#  - 20 steps: every trained tensor changed; the checkpoint holds the
#    trained ones and their moments alone (the frozen by a hash), and the
#    frozen ones are bit for bit where they started (a resume from step
#    20 passes the hash check, one from step 1 with another seed not);
#  - the plan sees it: less memory, compute and update on the device;
#  - 2 stages x 2 replicas on local-4: the same losses as one device
#    within 1e-5 relative; resumed at 10, steps 11-20 the straight run's;
#  - bad input: a pattern matching nothing, and everything frozen.
. "$(dirname "$0")/lib.sh"
no_leak_scan_in_threaded_programs

cat /usr/share/common-licenses/* >"$work/corpus.txt"
model=(models/llama.xml --set vocab=256 --set dim=64 --set layers=2 --set heads=4 --set kv_heads=2 --set ffn=172
       --set ctx=32 --set seq=32 --set batch=4)
freeze=(--freeze 'model.layers.0.*' --freeze model.embed_tokens.weight)
py=/usr/bin/python3
claim_ports
losses() { awk '/^step .*loss/{print $4}' "$1"; }

# ---- stats and the IR
"$FUSIONC" stats "${model[@]}" "${freeze[@]}" >"$work/stats" 2>&1 && pass || fail "stats: $(cat "$work/stats")"
grep -q "^trained           61,888 (50.03%; the rest frozen)$" "$work/stats" && pass ||
  fail "stats: no trained line: $(grep -E 'param|trained' "$work/stats")"
"$FUSIONC" dump "${model[@]}" "${freeze[@]}" --after optimizer -o "$work/a.ir" 2>"$work/dump.err" && pass ||
  fail "dump: $(cat "$work/dump.err")"
expect_eq "params printed frozen" 10 "$(grep -c '^param .* frozen' "$work/a.ir")"
expect_eq "moments of frozen params" 0 "$(grep -c '^state adamw\.[mv]\.model\.layers\.0\.' "$work/a.ir")"
"$FUSIONC" dump "$work/a.ir" --after optimizer -o "$work/b.ir" 2>"$work/dump.err" && cmp -s "$work/a.ir" "$work/b.ir" &&
  pass || fail "the frozen IR does not read back byte for byte: $(cat "$work/dump.err")"

# ---- one device
compile() {
  local name=$1; shift
  "$FUSIONC" compile "$@" -o "$work/$name" --port-base $((ports + ${#name} * 10)) >"$work/$name.compile" 2>&1 && pass ||
    fail "$name compile: $(cat "$work/$name.compile")"
}
compile full "${model[@]}" clusters/local-1.xml
compile frz "${model[@]}" "${freeze[@]}" clusters/local-1.xml
run() { local prog=$1 out=$2; shift 2; "$prog" --data "$work/corpus.txt" --seed 3 "$@" >"$work/$out" 2>&1 && pass ||
  fail "$out: $(tail -3 "$work/$out")"; }
run "$work/full/cpu0/fusion-cpu0" full.1 --steps 1 --dump-grads "$work/full.st"
run "$work/frz/cpu0/fusion-cpu0" frz.1 --steps 1 --dump-grads "$work/frz.st" --save "$work/ck1"
run "$work/frz/cpu0/fusion-cpu0" frz.20 --steps 20 --save "$work/ck20"
"$py" - "$work" <<'PYEOF' && pass || fail "frozen gradients and parameters: see above"
import sys
sys.path.insert(0, "tests/parity")
from torch_parity import st_read
w = sys.argv[1]
full, frz = st_read(w + "/full.st"), st_read(w + "/frz.st")
frozen = lambda n: n.startswith("model.layers.0.") or n == "model.embed_tokens.weight"
bad = []
missing = sorted(k for k in full if k not in frz)
if len(missing) != 10 or not all(frozen(k[5:]) for k in missing):
    bad.append(f"gradients absent when frozen: {missing}, expected the 10 frozen")
bad += [f"{k}: differs from the unfrozen run's by {(full[k] - frz[k]).abs().max().item():.3g}"
        for k in frz if not full[k].equal(frz[k])]
one, twenty = st_read(w + "/ck1/step-1/checkpoint.safetensors"), st_read(w + "/ck20/step-20/checkpoint.safetensors")
params = [k for k in twenty if not k.startswith("adamw.")]
bad += [f"frozen {k} in the checkpoint (a hash of it is enough)" for k in params if frozen(k)]
bad += [f"trained {k} did not change" for k in params if one[k].equal(twenty[k])]
bad += [f"moments of a frozen parameter saved: {k}" for k in twenty if k.startswith("adamw.") and frozen(k.split(".", 2)[2])]
if sum(k.startswith("adamw.m.") for k in twenty) != len(params) or len(params) != 11:
    bad.append(f"{len(params)} trained parameters saved, expected 11, each with its moments")
print("\n".join(bad) if bad else f"freeze: 10 frozen, {len(params)} trained; gradients equal, the checkpoint the trained alone",
      file=sys.stderr)
sys.exit(1 if bad else 0)
PYEOF
# plan.txt: stage 0's compute, update and memory, frozen below full.
row() { awk '$1 == "0" && $2 == "cpu0" { print $4, $8, $12 }' "$work/$1/plan.txt"; }
read -r c_full u_full m_full <<<"$(row full)"
read -r c_frz u_frz m_frz <<<"$(row frz)"
awk -v a="$c_frz" -v b="$c_full" -v c="$u_frz" -v d="$u_full" -v e="$m_frz" -v f="$m_full" \
  'BEGIN { exit !(a < b && c < d && e < f) }' && pass ||
  fail "plan: frozen compute $c_frz, update $u_frz, memory $m_frz MiB not all below full's $c_full, $u_full, $m_full"

# ---- a pipeline of replicas, and resume
compile pipe "${model[@]}" "${freeze[@]}" clusters/local-4.xml --stages 2 --replicas 2 --micro-batches 2 --compress none
"$work/pipe/launch-local.sh" --data "$work/corpus.txt" --seed 3 --steps 20 >"$work/pipe.out" 2>&1 && pass ||
  fail "pipeline: $(tail -5 "$work/pipe.out")"
reporter=$(sed -n 's/^reporter=//p' "$work/pipe/launch-local.sh")
losses "$work/frz.20" >"$work/one.loss"
losses "$work/pipe/logs/$reporter.log" >"$work/pipe.loss"
paste "$work/one.loss" "$work/pipe.loss" | awk '{ d = $1 - $2; if (d < 0) d = -d; if (d / $1 > w) w = d / $1 }
  END { if (NR != 20 || w > 1e-5) { printf "FAIL: %d steps, worst %.2g\n", NR, w > "/dev/stderr"; exit 1 } }' && pass ||
  fail "2 x 2 with frozen weights is not one device's mathematics"
run "$work/frz/cpu0/fusion-cpu0" frz.21 --steps 21 --resume "$work/ck20"
"$work/frz/cpu0/fusion-cpu0" --data "$work/corpus.txt" --seed 4 --steps 2 --resume "$work/ck1" >"$work/seed4" 2>&1
expect_eq "resumed with another seed's frozen weights: exit status" 1 $?
grep -q "the checkpoint was trained with --seed 3, not 4" "$work/seed4" && pass || fail "seed 4: $(tail -2 "$work/seed4")"
run "$work/frz/cpu0/fusion-cpu0" frz.10 --steps 10 --save "$work/ck10"
run "$work/frz/cpu0/fusion-cpu0" frz.resumed --steps 20 --resume "$work/ck10"
expect_eq "resumed steps 11-20" "$(losses "$work/frz.20" | tail -10 | xargs)" "$(losses "$work/frz.resumed" | xargs)"

# ---- bad input
"$FUSIONC" plan "${model[@]}" clusters/local-1.xml --freeze 'model.layer.*' -o "$work/bad" >"$work/bad.out" 2>&1
expect_eq "a pattern matching nothing: exit status" 1 $?
grep -q "error: adapters: --freeze 'model.layer.\*' matches no parameter of the model; its parameters: model.embed_tokens.weight" \
  "$work/bad.out" && pass || fail "no pattern error: $(cat "$work/bad.out")"
"$FUSIONC" plan "${model[@]}" clusters/local-1.xml --freeze '*' -o "$work/bad" >"$work/bad.out" 2>&1
expect_eq "everything frozen: exit status" 1 $?
grep -q "every parameter of the model is frozen: nothing to train" "$work/bad.out" && pass ||
  fail "no nothing-to-train error: $(cat "$work/bad.out")"
finish
