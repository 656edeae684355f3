# --sync diloco on clusters/local-4.xml (two sites of two CPU devices):
#  - its own mathematics: with H = 1, no delay, f32 on the wire, outer lr 1
#    and momentum 0, and plain SGD inside, the two sites' per-step losses,
#    weighted by their shares of the batch, equal exact data parallelism's
#    (4 replicas, SGD) within 1e-5 relative for 20 steps;
#  - validation measures the parameters the sites agree on: in that mode
#    they are exact data parallelism's, so site 0's val_loss every 5 steps
#    equals the exact plan's within 1e-5 relative (the same windows); no
#    other device reports one; with --outer-lr 1e-9 the agreed parameters
#    never leave their start, and every val_loss is the same while the
#    sites' own training loss falls;
#  - the default mode (H from the links, 8-bit rows with error feedback,
#    one round of delay) trains, and after the last step the two sites hold
#    bit-identical parameters;
#  - --site-batch each: a slower site takes fewer steps a round, and the
#    sites still end with the same parameters;
#  - plan and simulate say what the mode does; bad input: an unknown
#    --sync, --local-steps 0, diloco on a one-region cluster (a note: it
#    changes nothing).
. "$(dirname "$0")/lib.sh"
no_leak_scan_in_threaded_programs

cat /usr/share/common-licenses/* > "$work/corpus.txt"
cat docs/*.md > "$work/held-out.txt"
model=(models/gpt2.xml --set vocab=256 --set ctx=32 --set layers=4 --set dim=48 --set heads=4 --set batch=8
       --set seq=32 --set grad_clip=0)
sgd=(--set sgd=1 --set lr=0.5)
claim_ports   # tests/lib.sh: this test's own ports
base=$((ports + 17))
losses() { awk '/^step .*loss/{print $4}' "$1"; }

# compile NAME ARGS...: into $work/NAME, on its own ports.
compile() {
  local name=$1; shift
  if "$FUSIONC" compile "$@" -o "$work/$name" --port-base "$base" >"$work/$name.compile" 2>&1; then pass
  else fail "$name compile: $(cat "$work/$name.compile")"; fi
  base=$((base + 10))
}
train() {
  local name=$1; shift
  if "$work/$name/launch-local.sh" --data "$work/corpus.txt" --seed 5 "$@" >"$work/$name.out" 2>&1; then pass
  else fail "$name run: $(tail -5 "$work/$name.out"; tail -n 3 "$work/$name"/logs/*.log)"; fi
}

# ---- the mathematics: H = 1, outer lr 1, momentum 0, SGD == exact data parallelism
compile exact "${model[@]}" "${sgd[@]}" clusters/local-4.xml --compress none --stages 1 --replicas 4 --micro-batches 2
grep -q "1 stage x 4 replicas" "$work/exact.compile" && pass || fail "exact: $(cat "$work/exact.compile")"
compile math "${model[@]}" "${sgd[@]}" clusters/local-4.xml --sync diloco --local-steps 1 --outer-delay 0 \
  --outer-codec f32 --outer-lr 1 --outer-momentum 0
grep -q "with --sync diloco: 2 sites, H = 1" "$work/math.compile" && pass || fail "math: $(cat "$work/math.compile")"
val=(--val-data "$work/held-out.txt" --val-every 5 --val-batches 2)
train exact --steps 20 "${val[@]}"
train math --steps 20 "${val[@]}"
exact_reporter=$(sed -n 's/^reporter=//p' "$work/exact/launch-local.sh")
losses "$work/exact/logs/$exact_reporter.log" >"$work/exact.loss"
# Each site's reporter logs its site's mean loss; the sites split the batch 4 + 4.
grep -q "^site 0: region siteA (2 devices): 4 rows a step, H 1 (50.0% of a round's rows)" "$work/math/plan.txt" && pass \
  || fail "math: the shares are not 4 + 4: $(cat "$work/math/plan.txt")"
losses "$work/math/logs/cpu-a1.log" >"$work/a.loss"
losses "$work/math/logs/cpu-b1.log" >"$work/b.loss"
expect_eq "exact steps" 20 "$(wc -l <"$work/exact.loss")"
expect_eq "site A steps" 20 "$(wc -l <"$work/a.loss")"
paste "$work/exact.loss" "$work/a.loss" "$work/b.loss" | awk '
  { m = ($2 + $3) / 2; d = $1 - m; if (d < 0) d = -d; r = d / $1; if (r > worst) { worst = r; at = NR } }
  END { if (worst > 1e-5) { printf "FAIL: diloco H=1 step %d differs from exact by %.2g relative\n", at, worst > "/dev/stderr"; exit 1 }
        printf "diloco H=1 vs exact data parallelism: worst relative loss difference %.2g over %d steps\n", worst, NR > "/dev/stderr" }' \
  && pass || fail "diloco with H = 1 is not exact data parallelism"
val_losses() { sed -n 's/^step .*val_loss \([0-9.]*\)$/\1/p' "$1"; }
val_losses "$work/exact/logs/$exact_reporter.log" >"$work/exact.val"
val_losses "$work/math/logs/cpu-a1.log" >"$work/math.val"
expect_eq "exact validations" 4 "$(wc -l <"$work/exact.val")"
expect_eq "diloco validations on site 0's reporter" 4 "$(wc -l <"$work/math.val")"
expect_eq "val_loss on site 1 (site 0 reports the agreed model's)" 0 "$(cat "$work"/math/logs/cpu-b*.log | grep -c val_loss)"
paste "$work/exact.val" "$work/math.val" | awk '
  { d = $1 - $2; if (d < 0) d = -d; r = d / $1; if (r > worst) worst = r }
  END { if (NR != 4 || worst > 1e-5) { printf "FAIL: diloco val_loss differs from exact by %.2g relative\n", worst > "/dev/stderr"; exit 1 }
        printf "diloco H=1 vs exact: worst relative val_loss difference %.2g over %d validations\n", worst, NR > "/dev/stderr" }' \
  && pass || fail "diloco's validation does not measure the agreed parameters on exact's windows"
compile frozen "${model[@]}" --set lr=3e-3 clusters/local-4.xml --sync diloco --local-steps 2 --outer-lr 1e-9
train frozen --steps 20 "${val[@]}"
val_losses "$work/frozen/logs/cpu-a1.log" | awk '
  NR == 1 { first = $1 } { d = $1 - first; if (d < 0) d = -d; if (d / first > worst) worst = d / first }
  END { if (NR != 4 || worst > 1e-6) { printf "FAIL: %d validations, moving by %.2g relative\n", NR, worst > "/dev/stderr"; exit 1 } }' \
  && pass || fail "--outer-lr 1e-9: the validations did not all measure the start: $(val_losses "$work/frozen/logs/cpu-a1.log" | xargs)"
first=$(losses "$work/frozen/logs/cpu-a1.log" | head -1); last=$(losses "$work/frozen/logs/cpu-a1.log" | tail -1)
awk -v a="$first" -v b="$last" 'BEGIN { exit !(b < a - 0.3) }' && pass || fail "frozen: the sites' loss $first -> $last did not fall"

# ---- the default mode: trains, and the sites end with the same parameters
compile dl "${model[@]}" --set lr=3e-3 clusters/local-4.xml --sync diloco
grep -q "^diloco: 2 sites" "$work/dl/plan.txt" && pass || fail "dl: no diloco summary in plan.txt"
grep -q "8-bit rows with error feedback on the wire, applied one round late" "$work/dl/plan.txt" && pass \
  || fail "dl: the default is not int8 with a round of delay: $(head -2 "$work/dl/plan.txt")"
train dl --steps 50 --save "$work/ck" --val-data "$work/held-out.txt" --val-every 25 --val-batches 2
expect_eq "dl: validations on site 0's reporter" 2 "$(grep -c 'val_loss' "$work/dl/logs/cpu-a1.log")"
grep -q "outer step 1 (site 0 of 2" "$work/dl/logs/cpu-a0.log" && pass || fail "dl: no outer step on cpu-a0"
grep -q "the sites now hold the same parameters" "$work/dl/logs/cpu-b1.log" && pass || fail "dl: no final outer step"
first=$(losses "$work/dl/logs/cpu-a1.log" | head -1); last=$(losses "$work/dl/logs/cpu-a1.log" | tail -5 | sort -g | head -1)
awk -v a="$first" -v b="$last" 'BEGIN { exit !(b < a - 1.0) }' && pass || fail "dl: loss $first -> $last did not fall"
# same_params NAME FILES-OF-SITE-A -- FILES-OF-SITE-B: the parameters (not
# AdamW's moments, which are each site's own), by name, bit for bit.
same_params() {
  local name=$1; shift
  /usr/bin/python3 - "$@" <<'EOF' && pass || fail "$name: the sites' parameters differ after the last outer step"
import json, struct, sys
def tensors(paths):
    out = {}
    for path in paths:
        raw = open(path, "rb").read()
        n = struct.unpack("<Q", raw[:8])[0]
        head = json.loads(raw[8:8 + n])
        out.update({k: raw[8 + n + v["data_offsets"][0]:8 + n + v["data_offsets"][1]]
                    for k, v in head.items() if k != "__metadata__" and not k.startswith("adamw.")})
    return out
cut = sys.argv.index("--")
a, b = tensors(sys.argv[1:cut]), tensors(sys.argv[cut + 1:])
if not a or a.keys() != b.keys():
    sys.exit("different parameter names: %s vs %s" % (sorted(a), sorted(b)))
bad = [k for k in a if a[k] != b[k]]
if bad:
    sys.exit("differ: %s" % bad)
print("diloco: %d parameters bit-identical on both sites after the last outer step" % len(a), file=sys.stderr)
EOF
}
same_params dl "$work"/ck/latest/checkpoint-cpu-a*.safetensors -- "$work"/ck/latest/checkpoint-cpu-b*.safetensors

# ---- --site-batch each on local-4-hetero (site B's devices 4 times slower):
# site B takes a quarter of site A's steps a round, the rounds line up, and
# the sites end with the same parameters.
compile het "${model[@]}" --set lr=3e-3 clusters/local-4-hetero.xml --sync diloco --site-batch each --local-steps 8
grep -q "^site 1: region siteB (2 devices): 8 rows a step, H 2 " "$work/het/plan.txt" && pass \
  || fail "het: site B's H is not 2: $(grep '^site' "$work/het/plan.txt")"
train het --steps 20 --save "$work/hk"
expect_eq "het: site A's steps" 20 "$(losses "$work/het/logs/cpu-a1.log" | wc -l)"
expect_eq "het: site B's steps" 5 "$(losses "$work/het/logs/cpu-b1.log" | wc -l)"
expect_eq "het: site B's outer steps" 3 "$(grep -c 'outer step' "$work/het/logs/cpu-b0.log")"
same_params het "$work"/hk/latest/checkpoint-cpu-a*.safetensors -- "$work"/hk/latest/checkpoint-cpu-b*.safetensors

# ---- plan and simulate
"$FUSIONC" simulate "${model[@]}" clusters/local-4.xml --sync diloco -o "$work" >"$work/sim.out" 2>&1 && pass \
  || fail "simulate --sync diloco: $(cat "$work/sim.out")"
grep -q "^simulated step: .* (one global batch of 8 rows" "$work/sim.out" && pass || fail "simulate: no global step: $(cat "$work/sim.out")"
grep -q "^throughput: [0-9]* tokens/s" "$work/sim.out" && pass || fail "simulate: no throughput"
grep -q "^best single site: region site" "$work/sim.out" && pass || fail "simulate: no best single site line"
"$FUSIONC" plan "${model[@]}" clusters/local-4.xml --sync diloco --local-steps 7 -o "$work" >"$work/plan.out" 2>&1 \
  && grep -q "^H = 7 from --local-steps" "$work/plan.out" && pass || fail "plan --local-steps 7: $(cat "$work/plan.out")"
grep -q "the outer step's arithmetic [0-9.]* s" "$work/plan.out" && pass || fail "plan: the outer step is not priced"
# The shares when a site's step is not monotonic in its rows
# (bench_diloco's model, 16 rows, local-4 at 6 GFLOPS): water filling
# alone gave 9 + 7 (7 rows: one micro-batch, 407 ms) where 8 + 8 take 235.
sed -E 's/(peak-[a-z0-9]+)="[0-9.]+GFLOPS"/\1="6GFLOPS"/g' clusters/local-4.xml >"$work/six.xml"
"$FUSIONC" plan models/gpt2.xml --set vocab=256 --set ctx=64 --set layers=4 --set dim=128 --set heads=4 --set batch=16 \
  --set seq=64 "$work/six.xml" --sync diloco --local-steps 1 -o "$work/six" >"$work/six.out" 2>&1 && pass \
  || fail "plan on six.xml: $(cat "$work/six.out")"
expect_eq "16 rows over two equal sites" "8 8" \
  "$(sed -n 's/^site [01]: region site[AB] (2 devices): \([0-9]*\) rows a step.*/\1/p' "$work/six.out" | xargs)"

# ---- bad input
bad() {   # bad WHAT EXPECTED-STATUS PATTERN ARGS...
  local what=$1 status=$2 pattern=$3; shift 3
  "$FUSIONC" plan "${model[@]}" "$@" -o "$work" >"$work/bad.out" 2>&1
  local rc=$?
  expect_eq "$what: exit status" "$status" "$rc"
  grep -q -- "$pattern" "$work/bad.out" && pass || fail "$what: no '$pattern' in: $(cat "$work/bad.out")"
}
bad "--sync bogus" 2 "--sync expects exact or diloco, found 'bogus'" clusters/local-4.xml --sync bogus
bad "--local-steps 0" 2 "--local-steps expects a count of inner steps in \[1, 1000000\], found '0'" \
  clusters/local-4.xml --sync diloco --local-steps 0
bad "--outer-codec" 2 "--outer-codec expects int8, int4 or f32" clusters/local-4.xml --sync diloco --outer-codec int2
bad "one region" 0 "note: --sync diloco changes nothing on local-1: it is one region" clusters/local-1.xml --sync diloco
bad "batch too small" 1 "cannot give each of the 2 sites" clusters/local-4.xml --sync diloco --set batch=1

finish
