# `fusionc dump --format dot` renders with graphviz for every shipped model;
# expanded (--expand) it draws every op; by default each repeated block is
# one box a phase and device, and GPT-2 small after every pass renders in
# under 10 s; --stage and --device cut a placed graph to one stage.
. "$(dirname "$0")/lib.sh"
command -v dot >/dev/null || { echo "FAIL: graphviz's dot is not installed (scripts/install-deps.sh)" >&2; exit 1; }
# Whole pipelines (forward and backward) for the small variants; the large
# ones as forward graphs, which graphviz lays out in seconds rather than minutes.
variants=(
  "models/gpt2.xml --set layers=2"
  "models/gpt2.xml --set attn_parts=1 --set layers=2"
  "models/resnet.xml --set depth=18 --after shapes"
  "models/resnet.xml --after shapes"
  "models/resnet.xml --set depth=101 --after shapes"
  "models/mlp.xml"
)
for v in "${variants[@]}"; do
  # shellcheck disable=SC2086
  if ! "$FUSIONC" dump $v --format dot --expand -o "$work/g.dot" 2>"$work/err"; then
    fail "dump $v --format dot: $(cat "$work/err")"; continue
  fi
  if dot -Tsvg "$work/g.dot" -o "$work/g.svg" 2>"$work/dot.err" && grep -q "<svg" "$work/g.svg"; then
    nodes=$(grep -c 'class="node"' "$work/g.svg")
    ops=$(grep -c '^node' <("$FUSIONC" dump ${v}))
    # every op is drawn (plus one ellipse per source)
    if [ "$nodes" -gt "$ops" ]; then pass; else fail "$v: svg has $nodes nodes, expected more than $ops ops"; fi
  else
    fail "dot -Tsvg rejected the dump of $v: $(head -3 "$work/dot.err")"
  fi
done

# GPT-2 small after every pass, default options: collapsed, and dot lays it out in under 10 s.
"$FUSIONC" dump models/gpt2.xml --format dot -o "$work/gpt2.dot" 2>"$work/err" && pass || fail "dump gpt2: $(cat "$work/err")"
grep -q 'label="h.0-11 forward\\n12 blocks, [0-9]* ops' "$work/gpt2.dot" && pass || fail "no collapsed forward block in $(grep -m3 box3d "$work/gpt2.dot")"
grep -q 'label="h.0-11 backward' "$work/gpt2.dot" && pass || fail "no collapsed backward block"
start=$(date +%s.%N)
timeout 60 dot -Tsvg "$work/gpt2.dot" -o "$work/gpt2.svg" 2>"$work/dot.err" && grep -q "<svg" "$work/gpt2.svg" && pass \
  || fail "dot -Tsvg of GPT-2 small: $(head -3 "$work/dot.err")"
seconds=$(awk -v a="$start" -v b="$(date +%s.%N)" 'BEGIN { printf "%.2f", b - a }')
awk -v s="$seconds" 'BEGIN { exit !(s < 10) }' && pass || fail "dot took $seconds s for GPT-2 small (limit 10 s)"
echo "GPT-2 small after every pass: $(grep -c 'shape=' "$work/gpt2.dot") shapes, rendered in $seconds s" >&2
# Expanded, the same graph has many times the boxes.
"$FUSIONC" dump models/gpt2.xml --format dot --expand -o "$work/gpt2-all.dot"
[ "$(grep -c 'shape=' "$work/gpt2-all.dot")" -gt $((5 * $(grep -c 'shape=' "$work/gpt2.dot"))) ] && pass \
  || fail "--expand: $(grep -c 'shape=' "$work/gpt2-all.dot") shapes against $(grep -c 'shape=' "$work/gpt2.dot") collapsed"

# Placed on a cluster, one stage: stage 1's ops only, with what they receive.
small=(--set layers=4)
"$FUSIONC" dump models/gpt2.xml clusters/local-4.xml "${small[@]}" --format dot --device cpu-a1 -o "$work/s1.dot" 2>"$work/err" \
  && pass || fail "dump --device cpu-a1: $(cat "$work/err")"
grep -q 'label="gpt2, stage 1"' "$work/s1.dot" && pass || fail "--device cpu-a1 is not stage 1: $(head -5 "$work/s1.dot")"
grep -q 'label="logits\\nlinear"' "$work/s1.dot" && pass || fail "stage 1 lacks its logits op"
grep -q 'label="tok_emb\\nembedding"' "$work/s1.dot" && fail "stage 1 shows stage 0's tok_emb" || pass
grep -q 'label="ln_f:s1\\nrecv"' "$work/s1.dot" && pass || fail "stage 1 does not show what it receives from stage 0"
dot -Tsvg "$work/s1.dot" -o /dev/null && pass || fail "dot rejected the stage's graph"
"$FUSIONC" dump models/gpt2.xml clusters/local-4.xml "${small[@]}" --format dot --stage 0 -o "$work/s0.dot" && \
  grep -q 'label="tok_emb\\nembedding"' "$work/s0.dot" && pass || fail "--stage 0"
# Bad uses: clear messages, no output.
"$FUSIONC" dump models/gpt2.xml --format dot --stage 1 >/dev/null 2>"$work/err"; expect_eq "--stage without a cluster: exit" 2 $?
grep -q "stages are the placement's" "$work/err" && pass || fail "--stage without a cluster: $(head -1 "$work/err")"
"$FUSIONC" dump models/gpt2.xml clusters/local-4.xml "${small[@]}" --format dot --device nosuch -o "$work/x.dot" 2>"$work/err"
expect_eq "--device nosuch: exit" 1 $?
grep -q "local-4.xml:0: error: --device nosuch: the cluster has no device of that name" "$work/err" && pass || fail "--device nosuch: $(cat "$work/err")"
[ ! -e "$work/x.dot" ] && pass || fail "a failed dump left its output"
"$FUSIONC" dump models/gpt2.xml clusters/local-4.xml "${small[@]}" --format dot --stage 7 >/dev/null 2>"$work/err"
grep -q "stage 7: the plan has stages 0 to 1" "$work/err" && pass || fail "--stage 7: $(cat "$work/err")"
finish
