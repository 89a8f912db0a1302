#!/usr/bin/env bash
# Configures and builds into build/ (or $WASTE_BUILD_DIR). Extra arguments go
# to cmake's configure step, e.g. -DWASTE_WERROR=ON.
set -euo pipefail
cd "$(dirname "$0")/.."
build=${WASTE_BUILD_DIR:-build}
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo "$@" >/dev/null
cmake --build "$build" --parallel "$(nproc)"
