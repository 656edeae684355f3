# Hierarchical all-reduce, the same mathematics: one stage of 4 data-parallel
# replicas whose replicas span two regions, so that the comm pass averages
# the gradients hierarchically (passes/allreduce_plan.h: a ring inside each
# region, a ring among the regions' leaders, each leader's result sent back
# to its region), gives step for step the losses of the one-device run of
# the same global batch and seed, within 1e-5 relative, for 12 steps:
#   local-4                  2 + 2 replicas (cpu-a0 cpu-a1 | cpu-b0 cpu-b1)
#   two-regions-3-1 (tests/) 3 + 1 replicas: a ring of 3, a group of one
# The plan says so (plan.txt: "hierarchical"), the simulator prices the
# hierarchy below the ring it replaces, and the compiled device programs
# train to the end (each replica ends its steps with the same parameters,
# else their losses would part from the one-device run's).
. "$(dirname "$0")/lib.sh"
no_leak_scan_in_threaded_programs

cat /usr/share/common-licenses/* > "$work/corpus.txt"
model=(--set vocab=256 --set ctx=32 --set layers=2 --set dim=48 --set heads=4 --set batch=8 --set seq=32
       --set lr=3e-3 --set warmup=5)
steps=12
claim_ports   # tests/lib.sh: this test's own ports
base=$ports

losses() { awk '/^step /{print $4}' "$1"; }

"$FUSIONC" compile models/gpt2.xml clusters/local-1.xml -o "$work/one" "${model[@]}" >"$work/c1" 2>&1 \
  && pass || fail "one-device compile: $(cat "$work/c1")"
"$work/one/cpu0/fusion-cpu0" --data "$work/corpus.txt" --steps $steps --seed 5 >"$work/one.out" 2>&1 \
  && pass || fail "one-device run: $(tail -3 "$work/one.out")"
losses "$work/one.out" >"$work/one.loss"
expect_eq "one-device steps" $steps "$(wc -l <"$work/one.loss")"

# run NAME CLUSTER: compile 1 stage x 4 replicas, check the plan is
# hierarchical, train with launch-local.sh, compare the losses.
run() {
  local name=$1 cluster=$2
  if "$FUSIONC" compile models/gpt2.xml "$cluster" -o "$work/$name" "${model[@]}" --port-base "$base" \
       --compress none --stages 1 --replicas 4 --micro-batches 2 >"$work/$name.compile" 2>&1; then pass
  else fail "$name compile: $(cat "$work/$name.compile")"; return; fi
  base=$((base + 20))
  grep -q "1 stage x 4 replicas" "$work/$name.compile" && pass || fail "$name: $(cat "$work/$name.compile")"
  grep -q "hierarchical" "$work/$name/plan.txt" && pass \
    || fail "$name: plan.txt does not say the all-reduce is hierarchical: $(cat "$work/$name/plan.txt")"
  if "$work/$name/launch-local.sh" --data "$work/corpus.txt" --steps $steps --seed 5 >"$work/$name.out" 2>&1; then
    pass; else fail "$name run: $(tail -5 "$work/$name.out"; tail -n 3 "$work/$name"/logs/*.log)"; fi
  sed 's/^\[[^]]*\] //' "$work/$name.out" | losses /dev/stdin >"$work/$name.loss"
  expect_eq "$name steps" $steps "$(wc -l <"$work/$name.loss")"
  losses_within "$name" "$work/one.loss" "$work/$name.loss"
}

run local4 clusters/local-4.xml
run three-one tests/clusters/two-regions-3-1.xml
finish
