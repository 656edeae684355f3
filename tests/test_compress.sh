# The compress pass (AdaTopK): on a 4-stage pipeline across local-4's slow
# links, the activation, the activation gradient and the tied embedding's
# partial gradient (grad.wte.weight.1, last stage -> first) that cross them are
# compressed, nothing else is (not the fast links).  topk:RHO gives all
# three a top-k density; adatopk gives grad.wte.weight.1 (a parameter's partial
# gradient) a top-k density with error feedback (feedback=1) and the other
# two rows of 8 or 4 bits (bits=, runtime/comm/quant.h); every recv matches
# its send; the summed gradient is its stage's last backward node; without
# --compress a cluster of several regions gets adatopk.
# Both compressed programs train (the loss falls, unlike the uncompressed
# run's bit for bit: how close adatopk comes to it over a longer run is
# bench/bench_adatopk.sh's to say); with --adapt-density the sender
# changes the density between steps (the receiver reads k from the
# message) and logs it, and training still works; a bad --compress gets
# one line.
. "$(dirname "$0")/lib.sh"
no_leak_scan_in_threaded_programs

cat /usr/share/common-licenses/* > "$work/corpus.txt"
model=(--set vocab=256 --set ctx=32 --set layers=4 --set dim=48 --set heads=4 --set batch=8 --set seq=32
       --set lr=3e-3 --set warmup=5)
claim_ports   # tests/lib.sh: this test's own ports
base=$ports

for c in none topk:0.05 adatopk; do
  "$FUSIONC" compile models/gpt2.xml clusters/local-4.xml -o "$work/$c" "${model[@]}" --scheduler uniform \
    --micro-batches 4 --compress "$c" --port-base "$base" --dump-ir=compress >"$work/$c.out" 2>"$work/$c.ir" \
    && pass || fail "compile --compress $c: $(tail -3 "$work/$c.ir")"
  base=$((base + 10))
done
sends() { grep '^node .*= send(' "$1" | grep 'density=' | sed 's/^node \([^ ]*\) = .*density=\([0-9.e-]*\).*/\1 \2/'; }
expect_eq "none: compressed sends" "" "$(sends "$work/none.ir")"
expect_eq "topk:0.05: compressed sends" "h.1.out:send2 0.05
grad.wte.weight.1:send0 0.05
grad.h.1.out:send1 0.05" "$(sends "$work/topk:0.05.ir")"
feedback() { grep '^node .*= send(' "$1" | grep 'feedback=1' | sed 's/^node \([^ ]*\) = .*/\1/'; }
for c in topk:0.05 adatopk; do
  expect_eq "$c: sends with error feedback" "grad.wte.weight.1:send0" "$(feedback "$work/$c.ir")"
done
expect_eq "recvs with error feedback (the sender's business)" "" "$(grep '= recv(' "$work/topk:0.05.ir" | grep feedback)"
# adatopk: grad.wte.weight.1 at beta T* / (2 S), below 1/2 and above 0.1%; the
# activation and its gradient as rows of 8 or 4 bits.
sends "$work/adatopk.ir" | awk '{ n++; if (!($2 > 0.001 && $2 < 0.5)) bad = 1 } END { exit !(n == 1 && !bad) }' \
  && pass || fail "adatopk densities (grad.wte.weight.1:send0 in (0.001, 0.5)): $(sends "$work/adatopk.ir")"
bits() { grep '^node .*= send(' "$1" | grep 'bits=' | sed 's/^node \([^ ]*\) = .*bits=\([0-9]*\).*/\1 \2/'; }
bits "$work/adatopk.ir" | awk '{ n++; names = names $1 " "; if ($2 != 8 && $2 != 4) bad = 1 }
  END { exit !(n == 2 && !bad && names ~ /^h.1.out:send2 grad.h.1.out:send1 $/) }' \
  && pass || fail "adatopk rows of bits (h.1.out, grad.h.1.out at 8 or 4): $(bits "$work/adatopk.ir")"
expect_eq "topk:0.05: rows of bits" "" "$(bits "$work/topk:0.05.ir")"
# The summed gradient leaves last in its stage's backward (the comm pass):
# its codec must not hold up the activation gradient the stages before
# wait for, and it is due only at the update.
expect_eq "adatopk: stage 3's last backward node" "grad.wte.weight.1:send0" \
  "$(grep '^node .* stage=3 phase=backward' "$work/adatopk.ir" | tail -1 | sed 's/^node \([^ ]*\) .*/\1/')"
# Without --compress a cluster of several regions gets adatopk.
"$FUSIONC" compile models/gpt2.xml clusters/local-4.xml -o "$work/default" "${model[@]}" --scheduler uniform \
  --micro-batches 4 --port-base "$base" --dump-ir=compress >/dev/null 2>"$work/default.ir" \
  && pass || fail "compile without --compress: $(tail -3 "$work/default.ir")"
expect_eq "the default on local-4 (two regions)" "$(grep '= send(' "$work/adatopk.ir")" "$(grep '= send(' "$work/default.ir")"
# Every recv has its send's density and bits.
for c in topk:0.05 adatopk; do
  expect_eq "$c: recv densities" "$(grep '= send(' "$work/$c.ir" | grep -o 'density=[0-9.e-]*' | sort)" \
    "$(grep '= recv(' "$work/$c.ir" | grep -o 'density=[0-9.e-]*' | sort)"
  expect_eq "$c: recv bits" "$(grep '= send(' "$work/$c.ir" | grep -o 'bits=[0-9]*' | sort)" \
    "$(grep '= recv(' "$work/$c.ir" | grep -o 'bits=[0-9]*' | sort)"
done

for c in none topk:0.05 adatopk; do
  "$work/$c/launch-local.sh" --data "$work/corpus.txt" --steps 20 --seed 2 >"$work/$c.train" 2>&1 \
    && pass || fail "train --compress $c: $(tail -3 "$work/$c.train")"
  sed 's/^\[[^]]*\] //' "$work/$c.train" | awk '/^step /{ print $4 }' >"$work/$c.loss"
done
expect_eq "compressed steps" 20 "$(wc -l <"$work/topk:0.05.loss")"
first=$(head -1 "$work/topk:0.05.loss"); last=$(tail -1 "$work/topk:0.05.loss")
awk -v f="$first" -v l="$last" 'BEGIN { exit !(l < f - 0.3) }' && pass || fail "compressed loss went from $first to $last"
cmp -s "$work/none.loss" "$work/topk:0.05.loss" && fail "compression changed nothing" || pass
cmp -s "$work/none.loss" "$work/adatopk.loss" && fail "adatopk changed nothing" || pass
dense=$(tail -1 "$work/none.loss"); ada=$(tail -1 "$work/adatopk.loss")
awk -v f="$(head -1 "$work/adatopk.loss")" -v l="$ada" 'BEGIN { exit !(l < f - 0.3) }' && pass \
  || fail "adatopk's loss went from $(head -1 "$work/adatopk.loss") to $ada"
echo "loss after 20 steps: uncompressed $dense, top 5% on the slow link $last, adatopk $ada" >&2

# --adapt-density on loopback: each sender re-measures its links between
# steps and moves its densities (its progress line says "rho X" per
# compressed send; which way depends on this machine's per-message time,
# so only a change within [0.001, 1] is checked), the receivers follow
# from the message, and the loss still falls.
"$work/topk:0.05/launch-local.sh" --data "$work/corpus.txt" --steps 8 --seed 2 --adapt-density \
  --log "$work/adapt.jsonl" >"$work/adapt.train" 2>&1 && pass || fail "train --adapt-density: $(tail -3 "$work/adapt.train")"
# The JSONL log carries the same densities.
expect_eq "cpu-b1's JSONL lines with a rho list" 8 "$(grep -c '"rho": \[0\.[0-9]*\][,}]' "$work/adapt.cpu-b1.jsonl")"
rho=$(grep '^\[cpu-b1\] step ' "$work/adapt.train" | sed 's/.*rho \([0-9.]*\).*/\1/')
expect_eq "cpu-b1 (sends grad.wte.weight.1) logs rho every step" 8 "$(grep -c . <<<"$rho")"
expect_eq "first step at the compiled density" 0.0500 "$(head -1 <<<"$rho")"
awk '{ if ($1 != 0.05) moved = 1; if (!($1 >= 0.001 && $1 <= 1)) bad = 1 } END { exit !(moved && !bad) }' <<<"$rho" \
  && pass || fail "adapted densities: $(echo $rho), expected a change from 0.0500, each within [0.001, 1]"
sed 's/^\[[^]]*\] //' "$work/adapt.train" | awk '/^step .* loss /{ print $4 }' >"$work/adapt.loss"
awk -v f="$(head -1 "$work/adapt.loss")" -v l="$(tail -1 "$work/adapt.loss")" 'BEGIN { exit !(l < f) }' \
  && pass || fail "adaptive loss went from $(head -1 "$work/adapt.loss") to $(tail -1 "$work/adapt.loss")"

"$FUSIONC" compile models/gpt2.xml clusters/local-4.xml -o "$work/bad" "${model[@]}" --compress topk:2 >/dev/null 2>"$work/err"
expect_eq "bad --compress exit" 2 $?
grep -q "expects none, topk:RHO" "$work/err" && pass || fail "bad --compress message: $(head -1 "$work/err")"
finish
