# fusionc simulate: the event simulation of a placed model's training steps
# agrees with the estimator on one device, with the plan's cost model on a
# pipeline, and with the send/recv pairs of the placed graph on the wire;
# top-k compression shrinks the slow link's traffic; gantt.svg is drawn;
# the plan is put beside the best single site (each region alone, placed
# and simulated the same way) and its throughput printed; bad options get
# one line.
. "$(dirname "$0")/lib.sh"

model=(--set vocab=256 --set ctx=32 --set layers=4 --set dim=48 --set heads=4 --set batch=8 --set seq=32)
four=clusters/local-4.xml

# field FILE LABEL: the number after "LABEL: " (ms and fractions)
field() { awk -v l="$2:" '$1 " " $2 == l || $1 == l { print ($1 == l ? $2 : $3); exit }' "$1"; }
# link_bytes FILE FROM->TO COLUMN (2 forward, 3 backward, 4 update, 5 total)
link_bytes() { awk -v k="$2" -v c="$3" '$1 == k { print $c; exit }' "$1"; }
# within A B FRACTION: |A - B| <= FRACTION * B
within() { awk -v a="$1" -v b="$2" -v f="$3" 'BEGIN { d = a - b; if (d < 0) d = -d; exit !(d <= f * b) }'; }

# (Dense unless a test says otherwise: local-4's default is adatopk.)
# -v: every link's row.
sim() { local out=$1; shift; mkdir -p "$work/$out"; "$FUSIONC" simulate -v models/gpt2.xml --compress none "$@" "${model[@]}" -o "$work/$out" >"$work/$out.txt" 2>&1; }

# One device: the step is every op's estimated time back to back, no idle.
sim one clusters/local-1.xml && pass || fail "simulate local-1: $(cat "$work/one.txt")"
step=$(field "$work/one.txt" "simulated step"); ops=$(field "$work/one.txt" "op estimates")
within "$step" "$ops" 0.01 && pass || fail "local-1: simulated step $step ms, expected the op estimates' sum $ops ms (1%)"
expect_eq "local-1 bubble" "0.0000" "$(field "$work/one.txt" bubble)"

# A pipeline of 4 stages, 1 and 4 micro-batches, over 3 steps (equal steps).
sim m1 "$four" --scheduler uniform --micro-batches 1 && pass || fail "simulate M=1: $(cat "$work/m1.txt")"
sim m4 "$four" --scheduler uniform --micro-batches 4 --steps 3 && pass || fail "simulate M=4: $(cat "$work/m4.txt")"
# Step 1 holds the pipeline's start (stages begin step 2 as soon as their
# own update is done); from step 2 on the steps are equal.
s2=$(awk '/^step 2:/ { print $3 }' "$work/m4.txt"); s3=$(awk '/^step 3:/ { print $3 }' "$work/m4.txt")
within "$s3" "$s2" 0.01 && pass || fail "M=4: step 3 takes $s3 ms, step 2 $s2 ms: expected equal steps"
for m in m1 m4; do
  sim_ms=$(field "$work/$m.txt" "simulated step"); plan_ms=$(field "$work/$m.txt" "plan estimate")
  echo "uniform $m on local-4: simulated $sim_ms ms, plan's estimate $plan_ms ms" >&2
done
# The plan's model charges the clip-norm agreement S latencies of the slowest
# cut (fence_cost.c); the graph's chain crosses the slow link twice, so at
# M=1 the two differ by two latencies: compare where the pipeline dominates.
sim_ms=$(field "$work/m4.txt" "simulated step"); plan_ms=$(field "$work/m4.txt" "plan estimate")
within "$sim_ms" "$plan_ms" 0.25 && pass || fail "M=4: simulated $sim_ms ms, plan's estimate $plan_ms ms: not within 25%"

# The bubble falls as M grows where compute matters: local-4 with the sites
# joined at the sites' own speed (on local-4 itself the 40 ms link is the
# step, and M=4 only sends the tied embedding's gradient back 4 times).
sed -e 's/bandwidth="20Mbps" latency="40ms"/bandwidth="10Gbps" latency="50us"/' "$four" >"$work/fast-4.xml"
sim f1 "$work/fast-4.xml" --scheduler uniform --micro-batches 1 && pass || fail "simulate fast M=1: $(cat "$work/f1.txt")"
sim f4 "$work/fast-4.xml" --scheduler uniform --micro-batches 4 && pass || fail "simulate fast M=4: $(cat "$work/f4.txt")"
b1=$(field "$work/f1.txt" bubble); b4=$(field "$work/f4.txt" bubble)
echo "bubble on fast-linked local-4: M=1 $b1, M=4 $b4; on local-4: M=1 $(field "$work/m1.txt" bubble), M=4 $(field "$work/m4.txt" bubble)" >&2
awk -v a="$b1" -v b="$b4" 'BEGIN { exit !(b < a) }' && pass || fail "bubble M=1 $b1, M=4 $b4: expected it to fall"

# The wire: 4 micro-batches of 8/4 rows carry h.1.out (rows x seq x dim x 4
# bytes) from stage 1 (cpu-a1) to stage 2 (cpu-b0), and its gradient back.
h1=$(( 8 / 4 * 32 * 48 * 4 ))
expect_eq "a1->b0 forward bytes" $(( 4 * h1 )) "$(link_bytes "$work/m4.txt" "cpu-a1->cpu-b0" 2)"
expect_eq "b0->a1 backward bytes" $(( 4 * h1 )) "$(link_bytes "$work/m4.txt" "cpu-b0->cpu-a1" 3)"

# Top-k at 5%: the slow link carries over 5x fewer bytes, and the step is shorter.
sim k4 "$four" --scheduler uniform --micro-batches 4 --compress topk:0.05 && pass || fail "simulate topk: $(cat "$work/k4.txt")"
dense=$(link_bytes "$work/m4.txt" "cpu-a1->cpu-b0" 5); sparse=$(link_bytes "$work/k4.txt" "cpu-a1->cpu-b0" 5)
awk -v d="$dense" -v s="$sparse" 'BEGIN { exit !(s * 5 < d) }' && pass || fail "topk:0.05: a1->b0 $sparse bytes, dense $dense: not 5x fewer"
ks=$(field "$work/k4.txt" "simulated step")
awk -v d="$sim_ms" -v s="$ks" 'BEGIN { exit !(s < d) }' && pass || fail "topk:0.05: step $ks ms, dense $sim_ms ms: not shorter"

# The timeline: an SVG with one row label per device.
g="$work/m4/gantt.svg"
grep -q "<svg" "$g" && pass || fail "gantt.svg is not an SVG"
expect_eq "gantt device rows" 4 "$(grep -c 'class="row device"' "$g")"
for d in cpu-a0 cpu-a1 cpu-b0 cpu-b1; do
  grep -q "class=\"row device\"[^>]*>$d " "$g" && pass || fail "gantt.svg has no row for $d"
done
ls "$work/m4" | grep -q tmp && fail "a temporary file was left in $work/m4" || pass

# Honest baselines.  local-4's sites are its two regions of two devices;
# the plan's ratio is the best site's step over its own.  A one-region,
# one-host cluster has no other site to compare with.
best=$(grep "^best single site:" "$work/m4.txt")
[[ $best =~ ^best\ single\ site:\ region\ site[AB]\ \(2\ devices\)\ ([0-9.]+)\ ms/step\;\ this\ plan\ ([0-9.]+)x$ ]] && pass ||
  fail "local-4 best single site: '$best'"
site_ms=${BASH_REMATCH[1]:-0}; ratio=${BASH_REMATCH[2]:-0}; plan_ms=$(field "$work/m4.txt" "simulated step")
within "$ratio" "$(awk -v a="$site_ms" -v b="$plan_ms" 'BEGIN { print a / b }')" 0.02 && pass ||
  fail "local-4: ratio $ratio, but the site takes $site_ms ms and the plan $plan_ms ms"
expect_eq "local-1 best site" "best single site: the cluster is one site (one region of one host)" \
  "$(grep '^best single site:' "$work/one.txt")"
# Throughput: the global batch's tokens (8 x 32) over the simulated step.
tput=$(awk '/^throughput:/ { gsub(/\(/, "", $4); print $2, $3, $4 }' "$work/m4.txt")
expect_eq "local-4 tokens a step" "256" "$(echo "$tput" | awk '{ print $3 }')"
within "$(echo "$tput" | awk '{ print $1 }')" "$(awk -v t="$plan_ms" 'BEGIN { print 256 / (t / 1e3) }')" 0.01 && pass ||
  fail "throughput '$tput' is not 256 tokens over the $plan_ms ms step"
# The FusionLLM testbed: OP-Fence's plan for GPT-2 small is its best site alone.
"$FUSIONC" simulate models/gpt2.xml clusters/fusionllm-48.xml --set batch=32 --micro-batches 8 --precision fp16 \
  -o "$work" >"$work/f48.txt" 2>&1 && pass || fail "fusionllm-48: $(tail -2 "$work/f48.txt")"
grep -qE "^best single site: region lab-a100 \(8 devices\) [0-9.]+ ms/step; this plan 1.000x$" "$work/f48.txt" && pass ||
  fail "fusionllm-48: $(grep '^best single' "$work/f48.txt")"
"$FUSIONC" plan models/gpt2.xml "$four" "${model[@]}" -o "$work" >"$work/plan.out" 2>&1 &&
  grep -qE "^best single site: region site[AB] \(2 devices\) [0-9.]+ ms/step; this plan [0-9.]+x$" "$work/plan.out" &&
  pass || fail "plan's best single site: $(grep '^best' "$work/plan.out")"

# Bad requests: one line, the right exit status.
"$FUSIONC" simulate models/gpt2.xml "$four" "${model[@]}" --scheduler nonsense >/dev/null 2>"$work/err"
expect_eq "bad scheduler exit" 2 $?
grep -q "expects opfence" "$work/err" && pass || fail "bad scheduler message: $(head -1 "$work/err")"
"$FUSIONC" simulate models/gpt2.xml "$work/no-such-cluster.xml" "${model[@]}" >/dev/null 2>"$work/err"
expect_eq "unknown file exit" 1 $?
expect_eq "unknown file lines" 1 "$(wc -l <"$work/err")"
finish
