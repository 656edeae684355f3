# DT-FM's schedulers as issue 34 asks for them, on clusters/dtfm-worldwide.xml
# (a small GPT, so that it takes seconds): gcma's answer is never slower
# than the megatron or opfence plan it is weighed against; gcma-alone is
# DT-FM's search's own answer, never faster than gcma; megatron-paper is
# Megatron as DT-FM ran it (file order, a pipeline of 8 times 8 replicas);
# an unknown scheduler is refused naming them all.
. "$(dirname "$0")/lib.sh"
gpt=(--set layers=8 --set dim=256 --set heads=4 --set ctx=256 --set seq=256 --set batch=64 --micro-batches 8 --precision fp16)
step() { "$FUSIONC" plan models/gpt2.xml clusters/dtfm-worldwide.xml "${gpt[@]}" --scheduler "$1" >"$work/$1" 2>&1 \
  && sed -n 's/^estimated step: \([0-9.]*\) ms.*/\1/p' "$work/$1"; }
for s in opfence megatron megatron-paper gcma gcma-alone random; do
  t=$(step $s)
  [ -n "$t" ] && pass || fail "plan --scheduler $s: $(tail -2 "$work/$s")"
  eval "t_${s//-/_}=\$t"
done
no_slower() { awk -v a="$2" -v b="$3" 'BEGIN { exit !(a <= b * (1 + 1e-9)) }' && pass || fail "$1: $2 ms against $3 ms"; }
no_slower "gcma against megatron" "$t_gcma" "$t_megatron"
no_slower "gcma against opfence" "$t_gcma" "$t_opfence"
no_slower "gcma against its search alone" "$t_gcma" "$t_gcma_alone"
no_slower "gcma against random" "$t_gcma" "$t_random"
grep -q "^plan: gpt2 on dtfm-worldwide, scheduler megatron-paper: .* 8 stages x 8 replicas" "$work/megatron-paper" && pass \
  || fail "megatron-paper's shape: $(head -1 "$work/megatron-paper")"
grep -q "^plan: gpt2 on dtfm-worldwide, scheduler gcma-alone:" "$work/gcma-alone" && pass || fail "gcma-alone: $(head -1 "$work/gcma-alone")"
echo "dtfm-worldwide, small GPT: opfence $t_opfence, megatron $t_megatron, megatron-paper $t_megatron_paper, gcma $t_gcma, gcma alone $t_gcma_alone, random $t_random ms" >&2
"$FUSIONC" plan models/gpt2.xml clusters/dtfm-worldwide.xml "${gpt[@]}" --scheduler dtfm >/dev/null 2>"$work/err"
expect_eq "an unknown scheduler: exit" 2 $?
grep -q "expects opfence, uniform, megatron, megatron-paper, gcma, gcma-alone or random, found 'dtfm'" "$work/err" && pass \
  || fail "unknown scheduler: $(cat "$work/err")"
finish
