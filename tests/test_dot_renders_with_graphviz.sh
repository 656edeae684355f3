# `fusionc dump --format dot` renders with graphviz for every shipped model.
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
  if ! "$FUSIONC" dump $v --format dot -o "$work/g.dot" 2>"$work/err"; then
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
finish
