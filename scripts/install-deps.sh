#!/usr/bin/env bash
# Installs what fusion needs to build and test, from Debian's archive.
# Idempotent, and silent when everything is already there.
set -euo pipefail

packages=(
  build-essential cmake pkg-config   # the build
  libxml2-dev libxml2-utils          # model and cluster files: parsing, XSD validation
  llvm-dev                           # the per-device host program (LLVM C API)
  uthash-dev                         # hash tables (name lookups)
  libcjson-dev                       # safetensors headers (JSON)
  libstb-dev zlib1g-dev              # image datasets: PNG/JPEG decoding and resizing (stb_image), gzipped IDX files
  dataset-fashion-mnist              # the image benchmark's dataset (bench/bench_resnet_fashion.sh)
  libxxhash-dev                      # the build id of a compiled graph (XXH3)
  clang libclang-rt-14-dev libomp-14-dev   # the sanitizer build, the fuzz target (libFuzzer), OpenMP
  clang-format                       # the tree's one layout (.clang-format; tests/test_code_format.sh)
  libpcre2-dev libutf8proc-dev       # the tokenizer: pre-tokenizer regexes (Unicode properties), normalization
  libnanomsg-dev                     # device-to-device transport
  libsqlite3-dev                     # the broker's state (fusionc broker), kept across restarts
  libmicrohttpd-dev                  # fusionc serve's HTTP (an OpenAI-compatible server)
  libsodium-dev                      # run secrets, the link handshake and sealed frames
  tcpdump                            # the test that no plaintext crosses a sealed link
  libopenblas-dev                    # CPU matrix products
  graphviz                           # rendering `fusionc dump --format dot` in tests
  chromium                           # opening `fusionc dump --format html` headless in tests
  python3-torch                      # independent reference in tests and benchmarks
  python3-jinja2                     # the chat-template test's reference (the engine transformers renders with)
  perl time                          # tests write token shards; benchmarks measure peak memory
  gnuplot-nox                        # bench/bench_adatopk.sh's loss curves (PNG)
  openssh-client rsync               # fusionc deploy and launch (ssh, rsync, scp)
  openssh-server iproute2            # the deploy test's hosts: sshd in network namespaces
  slurmctld slurmd slurm-client munge   # fusionc launch --slurm's test: a real Slurm on this machine
)

# node and npm: only the tokenizer test's independent reference (npm
# packages installed into the build folder).  A machine that has them from
# elsewhere (NodeSource's nodejs bundles npm) keeps them.
if ! command -v node >/dev/null || ! command -v npm >/dev/null; then
  packages+=(nodejs npm)
fi

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done
[ ${#missing[@]} -eq 0 ] && exit 0

if [ "$(id -u)" -ne 0 ]; then
  echo "install-deps: missing packages: ${missing[*]}; run as root (or: sudo $0)" >&2
  exit 1
fi
echo "install-deps: installing ${missing[*]}" >&2
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
