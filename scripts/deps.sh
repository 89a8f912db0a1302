#!/usr/bin/env bash
# Installs the build and test dependencies from Debian's packages, only what
# is missing. Needs root (or sudo) the first time; a no-op afterwards.
set -euo pipefail

packages=(
  g++ cmake ninja-build pkg-config git
  capnproto libcapnp-dev     # protocol
  libuv1-dev                 # the daemon's event loop
  libhttp-parser-dev         # serve/: HTTP/1.1 requests parsed by Node's http-parser (callbacks, fits libuv)
  libspdlog-dev              # logging
  libgtest-dev               # tests
  libbenchmark-dev           # bench/ (microbenchmarks, -DWASTE_BUILD_BENCHMARKS=ON)
  nlohmann-json3-dev         # manifest.json and --json output
  libcli11-dev               # command lines
  zlib1g-dev                 # crc32 of expert records
  libpcre2-dev               # the tokenizer's pre-token regex (Unicode properties)
  help2man                   # man pages from each program's --help, at build time
  groff-base                 # tests: the man pages render without warnings
  systemd                    # tests: systemd-analyze verify and security on the units (nothing is started)
  strace                     # tests: wasted's system calls against its unit's seccomp filter
  clang libclang-rt-dev      # libFuzzer (scripts/fuzz.sh); Debian's clang and its runtime, same version
  curl                       # tests: waste serve's HTTP server against a real client (SSE framing, uploads)
  python3 python3-venv       # tests: the openai Python client against waste serve (scripts/openai_check.sh)
  chromium                   # tests: waste serve's chat page in a headless browser (scripts/openai_check.sh)
  tmux                       # tests drive `wastectl status --watch` in a terminal and read the screen
)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0

echo "deps: installing ${missing[*]}"
sudo=""
[ "$(id -u)" -ne 0 ] && sudo="sudo"
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -qq
$sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
