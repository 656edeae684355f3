#!/usr/bin/env bash
# install_openai: the official OpenAI client for Node (npm's `openai`,
# pinned), installed into BUILD_DIR/npm-openai for tests/test_serve.sh: an
# independent client of fusionc serve.  Quiet when the pinned version is
# already there; needs npm and the registry the first time only.
# usage: tests/serve/install_openai.sh BUILD_DIR
set -euo pipefail
version=7.59.0
[ $# -eq 1 ] || { echo "usage: $0 BUILD_DIR" >&2; exit 2; }
prefix=$1/npm-openai
json=$prefix/node_modules/openai/package.json
have=$([ -f "$json" ] && sed -n 's/^ *"version": *"\([^"]*\)".*/\1/p' "$json" | head -1 || true)
[ "$have" = "$version" ] && exit 0
command -v npm >/dev/null || { echo "install_openai: npm is not installed" >&2; exit 1; }
mkdir -p "$prefix"
if ! log=$(npm install --prefix "$prefix" --save-exact --no-audit --no-fund --loglevel=error "openai@$version" 2>&1); then
  echo "install_openai: npm install into $prefix failed (is the registry $(npm config get registry) reachable?):" >&2
  echo "$log" | tail -n 20 >&2
  exit 1
fi
