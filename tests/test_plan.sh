# fusionc plan: OP-Fence keeps a slow site off the pipeline when that pays,
# uniform uses every device in file order, cut at layer boundaries; the
# report and plan.svg are written; bad placement requests get one line.
. "$(dirname "$0")/lib.sh"

model=(--set vocab=256 --set ctx=64 --set layers=4 --set dim=128 --set heads=4 --set batch=16 --set seq=64)
hetero=clusters/local-4-hetero.xml

"$FUSIONC" plan models/gpt2.xml "$hetero" "${model[@]}" -o "$work" >"$work/opfence.txt" 2>&1 \
  && pass || fail "plan opfence: $(cat "$work/opfence.txt")"
grep -q "scheduler opfence: 2 fences" "$work/opfence.txt" && pass || fail "opfence fences: $(head -1 "$work/opfence.txt")"
# The slow site (4 times slower, behind 20 Mbps) holds no stage.
awk '/^[0-9]+ /' "$work/opfence.txt" | grep -q "cpu-b" && fail "opfence placed a stage on site B: $(cat "$work/opfence.txt")" || pass
[ -s "$work/plan.txt" ] && pass || fail "no plan.txt"
grep -q "<svg" "$work/plan.svg" && grep -q "stage 0" "$work/plan.svg" && pass || fail "plan.svg is not a drawing of the stages"

"$FUSIONC" plan models/gpt2.xml "$hetero" "${model[@]}" --scheduler uniform -o "$work" >"$work/uniform.txt" 2>&1 \
  && pass || fail "plan uniform: $(cat "$work/uniform.txt")"
expect_eq "uniform stages" "cpu-a0 cpu-a1 cpu-b0 cpu-b1" "$(awk '/^[0-9]+ / { printf "%s%s", n++ ? " " : "", $2 }' "$work/uniform.txt")"
# Equal layers: 4 blocks on 4 stages, one block each: every stage after the
# first receives the residual stream from the one before.
for s in 1 2 3; do
  grep -q "h\.$((s - 1))\.out:send$s" "$work/plan.svg" && pass || fail "uniform: stage $s does not start at block $s"
done
u=$(awk '/^estimated step/ { print $3 }' "$work/uniform.txt")
o=$(awk '/^estimated step/ { print $3 }' "$work/opfence.txt")
awk -v u="$u" -v o="$o" 'BEGIN { exit !(o * 1.5 <= u) }' && pass || fail "opfence's estimate $o ms is not 1.5x below uniform's $u ms"
grep -q "bottleneck: the link from stage 1 to 2" "$work/uniform.txt" && pass || fail "uniform's bottleneck: $(grep bottleneck "$work/uniform.txt")"

"$FUSIONC" plan models/gpt2.xml clusters/local-4.xml "${model[@]}" --stages 2 --replicas 2 -o "$work" >"$work/grid.txt" 2>&1 \
  && pass || fail "plan 2x2: $(cat "$work/grid.txt")"
grep -q "2 stages x 2 replicas" "$work/grid.txt" && pass || fail "2x2: $(head -1 "$work/grid.txt")"

# megatron: every device in file order as the fastest S x R the batch
# allows, equal layers.  Uniform (4 x 1, equal layers) is one of its
# shapes, so its estimate is never above uniform's; with --stages 2 it is
# 2 x 2 with stage 0 on the file's first two devices.
"$FUSIONC" plan models/gpt2.xml clusters/local-4.xml "${model[@]}" --scheduler megatron -o "$work" >"$work/mega.txt" 2>&1 \
  && pass || fail "plan megatron: $(cat "$work/mega.txt")"
mg=$(awk '/^estimated step/ { print $3 }' "$work/mega.txt")
"$FUSIONC" plan models/gpt2.xml clusters/local-4.xml "${model[@]}" --scheduler uniform -o "$work" >"$work/u4.txt" 2>&1
u4=$(awk '/^estimated step/ { print $3 }' "$work/u4.txt")
awk -v m="$mg" -v u="$u4" 'BEGIN { exit !(m > 0 && m <= u * 1.000001) }' && pass ||
  fail "megatron's estimate $mg ms is above uniform's $u4 ms on local-4"
"$FUSIONC" plan models/gpt2.xml clusters/local-4.xml "${model[@]}" --scheduler megatron --stages 2 -o "$work" \
  >"$work/mega2.txt" 2>&1 && pass || fail "plan megatron --stages 2: $(cat "$work/mega2.txt")"
grep -q "scheduler megatron: .*2 stages x 2 replicas" "$work/mega2.txt" && pass || fail "megatron 2: $(head -1 "$work/mega2.txt")"
grep -qE "^0 +cpu-a0,cpu-a1 " "$work/mega2.txt" && pass || fail "megatron's stage 0: $(grep '^0 ' "$work/mega2.txt")"

# Bad requests: one line, the right exit status.
"$FUSIONC" plan models/gpt2.xml "$hetero" "${model[@]}" --scheduler nonsense >/dev/null 2>"$work/err"
expect_eq "unknown scheduler exit" 2 $?
grep -q "expects opfence, uniform, megatron, megatron-paper, gcma, gcma-alone or random" "$work/err" && pass ||
  fail "unknown scheduler message: $(head -1 "$work/err")"
"$FUSIONC" plan models/gpt2.xml "$hetero" "${model[@]}" --stages 3 --replicas 2 >/dev/null 2>"$work/err"
expect_eq "impossible grid exit" 1 $?
expect_eq "impossible grid lines" 1 "$(wc -l <"$work/err")"
grep -q "no placement of 3 stages x 2 replicas" "$work/err" && pass || fail "impossible grid message: $(cat "$work/err")"
"$FUSIONC" plan models/gpt2.xml "$hetero" "${model[@]}" --micro-batches 5 >/dev/null 2>"$work/err"
expect_eq "indivisible batch exit" 1 $?
grep -q "does not split into 5 micro-batches" "$work/err" && pass || fail "indivisible batch message: $(cat "$work/err")"
finish
