#!/usr/bin/env bash
# The main job on a built-in model: install what is missing, build, write a
# small synthetic container, inspect it, run the model on it in one process,
# and check it the way the daemon will serve it (serving lands with issue 4).
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
echo "== waste run: generate in one process (random weights, so the text is noise)"
"$bin/waste" run "$out" "Hello world" -n 24 --temp 0.8 --seed 1 --local
echo
echo "== waste bench: speed, cache hits, where the time goes"
"$bin/waste" bench "$out" --prompt-tokens 32 --gen 32 --local
echo
echo "== wasted --check: the daemon validates the container and its budget"
"$bin/wasted" --check "$out"
echo
echo "== wasted: the daemon serves the trunk and an expert cache; clients attach"
sock="$(dirname "$out")/wasted.sock"
"$bin/wasted" "$out" --socket "$sock" --state-dir "$(dirname "$out")/state" \
  --log-file "$(dirname "$out")/wasted.log" --idle-exit 60
"$bin/waste" run "$out" "Hello world" -n 24 --temp 0.8 --seed 1 --socket "$sock"
"$bin/waste" run "$out" "Hello world" -n 24 --temp 0.8 --seed 1 --socket "$sock"  # warm cache
echo
echo "== wastectl status"
"$bin/wastectl" status --socket "$sock"
"$bin/wastectl" stop --socket "$sock"
