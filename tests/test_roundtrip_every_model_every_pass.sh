# print -> parse -> print is byte-identical for every shipped model (and
# variants) after every pass; and re-running the passes on the parsed text
# gives back the same IR.
. "$(dirname "$0")/lib.sh"

passes=$("$FUSIONC" passes | awk '{ print $1 }')
[ -n "$passes" ] && pass || fail "fusionc passes printed nothing"

variants=(
  "models/gpt2.xml"
  "models/gpt2.xml --set attn_parts=1 --set layers=2 --set seq=17"
  "models/resnet.xml --set depth=18"
  "models/resnet.xml"
  "models/resnet.xml --set depth=101"
  "models/mlp.xml"
  "models/mlp.xml --set layers=0"
)
for v in "${variants[@]}"; do
  for p in $passes; do
    # shellcheck disable=SC2086
    if ! "$FUSIONC" dump $v --after "$p" -o "$work/a.fir" 2>"$work/err"; then
      fail "dump $v --after $p: $(cat "$work/err")"; continue
    fi
    # The text records the last pass ("after PASS"), so the parsed graph is at PASS.
    if ! "$FUSIONC" dump "$work/a.fir" --after "$p" -o "$work/b.fir" 2>"$work/err"; then
      fail "parse of dump $v --after $p: $(cat "$work/err")"; continue
    fi
    if cmp -s "$work/a.fir" "$work/b.fir"; then pass; else
      fail "$v after $p: print -> parse -> print differs: $(diff "$work/a.fir" "$work/b.fir" | head -5)"
    fi
  done
  # The parsed frontend graph, run through every pass, equals the direct result.
  last=$(echo "$passes" | tail -n 1)
  # shellcheck disable=SC2086
  "$FUSIONC" dump $v --after frontend -o "$work/front.fir" &&
  "$FUSIONC" dump "$work/front.fir" -o "$work/c.fir" &&
  "$FUSIONC" dump $v --after "$last" -o "$work/d.fir" 2>"$work/err"
  if cmp -s "$work/c.fir" "$work/d.fir"; then pass; else
    fail "$v: passes on parsed text differ from passes on the model: $(diff "$work/c.fir" "$work/d.fir" | head -5)"
  fi
done

# A graph is never taken back to an earlier stage: asking is an error.
"$FUSIONC" dump models/mlp.xml --after "$last" -o "$work/e.fir"
if "$FUSIONC" dump "$work/e.fir" --after frontend >/dev/null 2>"$work/err"; then
  fail "dump of a graph after '$last' --after frontend succeeded"
else
  grep -q "already past 'frontend'" "$work/err" && pass || fail "already-past message: $(cat "$work/err")"
fi
grep -qx "after $last" "$work/e.fir" && pass || fail "the dump does not record 'after $last'"
finish
