# The compress pass (AdaTopK): on a 4-stage pipeline across local-4's slow
# link, the activation and the activation gradient that cross it get a top-k
# density, nothing else does (not the fast links, not a parameter's partial
# gradient); the compressed program trains (its loss falls, unlike the
# uncompressed run's bit for bit); a bad --compress gets one line.
. "$(dirname "$0")/lib.sh"
no_leak_scan_in_threaded_programs

cat /usr/share/common-licenses/* > "$work/corpus.txt"
model=(--set vocab=256 --set ctx=32 --set layers=4 --set dim=48 --set heads=4 --set batch=8 --set seq=32
       --set lr=3e-3 --set warmup=5)
base=$((34000 + ($$ % 900) * 30))

for c in none topk:0.05 adatopk; do
  "$FUSIONC" compile models/gpt2.xml clusters/local-4.xml -o "$work/$c" "${model[@]}" --scheduler uniform \
    --micro-batches 4 --compress "$c" --port-base "$base" --dump-ir=compress >"$work/$c.out" 2>"$work/$c.ir" \
    && pass || fail "compile --compress $c: $(tail -3 "$work/$c.ir")"
  base=$((base + 10))
done
sends() { grep '^node .*= send(' "$1" | grep 'density=' | sed 's/^node \([^ ]*\) = .*density=\([0-9.e-]*\).*/\1 \2/'; }
expect_eq "none: compressed sends" "" "$(sends "$work/none.ir")"
expect_eq "topk:0.05: compressed sends" "h.1.out:send2 0.05
grad.h.1.out:send1 0.05" "$(sends "$work/topk:0.05.ir")"
# adatopk: the same two, at beta T* / (2 S): below 1/2, above 0.1%.
sends "$work/adatopk.ir" | awk '{ n++; if (!($2 > 0.001 && $2 < 0.5)) bad = 1 } END { exit !(n == 2 && !bad) }' \
  && pass || fail "adatopk densities: $(sends "$work/adatopk.ir")"
# Every recv has its send's density.
for c in topk:0.05 adatopk; do
  expect_eq "$c: recv densities" "$(grep '= send(' "$work/$c.ir" | grep -o 'density=[0-9.e-]*' | sort)" \
    "$(grep '= recv(' "$work/$c.ir" | grep -o 'density=[0-9.e-]*' | sort)"
done

for c in none topk:0.05; do
  "$work/$c/launch-local.sh" --data "$work/corpus.txt" --steps 20 --seed 2 >"$work/$c.train" 2>&1 \
    && pass || fail "train --compress $c: $(tail -3 "$work/$c.train")"
  sed 's/^\[[^]]*\] //' "$work/$c.train" | awk '/^step /{ print $4 }' >"$work/$c.loss"
done
expect_eq "compressed steps" 20 "$(wc -l <"$work/topk:0.05.loss")"
first=$(head -1 "$work/topk:0.05.loss"); last=$(tail -1 "$work/topk:0.05.loss")
awk -v f="$first" -v l="$last" 'BEGIN { exit !(l < f - 0.3) }' && pass || fail "compressed loss went from $first to $last"
cmp -s "$work/none.loss" "$work/topk:0.05.loss" && fail "compression changed nothing" || pass
echo "loss after 20 steps: uncompressed $(tail -1 "$work/none.loss"), top 5% on the slow link $last" >&2

"$FUSIONC" compile models/gpt2.xml clusters/local-4.xml -o "$work/bad" "${model[@]}" --compress topk:2 >/dev/null 2>"$work/err"
expect_eq "bad --compress exit" 2 $?
grep -q "expects none, topk:RHO" "$work/err" && pass || fail "bad --compress message: $(head -1 "$work/err")"
finish
