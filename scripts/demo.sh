#!/usr/bin/env bash
# The main job on a built-in model: install what is missing, build, write a
# small synthetic container, inspect it, and show what the daemon and the
# compute client can do with it so far.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/deps.sh
scripts/build.sh
bin=${WASTE_BUILD_DIR:-build}/bin
out=${WASTE_DEMO_DIR:-demo}/tiny-kimi.waste

echo "== waste synth: a few-MB Kimi-Linear-shaped container"
"$bin/waste" synth --preset tiny-kimi --force "$out"
echo
echo "== waste info"
"$bin/waste" info "$out"
echo
echo "== waste plan: the memory floor and the budget this machine would get"
"$bin/waste" plan "$out"
echo
echo "== wasted --check: the daemon validates the container and its budget"
"$bin/wasted" --check "$out"
