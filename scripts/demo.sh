#!/usr/bin/env bash
# The main job on the trained demo model: install what is missing, build,
# convert the committed checkpoint (models/demo-moe, a small DeepSeek-V3-shaped
# MoE trained on Python's documentation), inspect it, serve it with wasted,
# show the cache and its routing, and end with the text it writes.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/deps.sh
scripts/build.sh
bin=${WASTE_BUILD_DIR:-build}/bin
demo=${WASTE_DEMO_DIR:-demo}
out=$demo/demo-moe.waste
# waste run adds no BOS of its own; the model was trained with one before each document.
bos="<｜begin▁of▁sentence｜>"
prompt="The list data type has some more methods. Here are all of the methods of list objects:"

echo "== waste convert: the checkpoint (safetensors, tokenizer.json) to a container, VQ3R experts"
rm -rf "$out"
mkdir -p "$demo"
"$bin/waste" convert models/demo-moe "$out" --quiet
echo
echo "== waste info"
"$bin/waste" info "$out"
echo
echo "== waste plan: the memory floor and the budget this machine would get"
"$bin/waste" plan "$out"
echo
echo "== wasted --check: the daemon validates the container and its budget"
"$bin/wasted" --check "$out"
echo
echo "== wasted: the daemon serves the trunk and an expert cache; clients attach"
sock="$demo/wasted.sock"
"$bin/wasted" "$out" --socket "$sock" --state-dir "$demo/state" \
  --log-file "$demo/wasted.log" --idle-exit 60
"$bin/waste" run "$out" "$bos$prompt" -n 60 --temp 0.7 --seed 1 --socket "$sock"  # sampled
echo
echo "== waste eval --perplexity: held-out text the model never trained on"
"$bin/waste" eval "$out" --perplexity models/demo-moe/heldout.txt --windows 8 --socket "$sock"
echo
echo "== waste bench: speed, cache hits, where the time goes"
"$bin/waste" bench "$out" --prompt-tokens 32 --gen 32 --socket "$sock"
echo
echo "== wastectl status: the cache, per layer, and the experts the routing chose"
"$bin/wastectl" status --socket "$sock"
echo
echo "== waste run through the warm daemon, greedy: the model's own continuation"
echo "prompt: $prompt"
"$bin/waste" run "$out" "$bos$prompt" -n 60 --temp 0 --socket "$sock"
"$bin/wastectl" stop --socket "$sock"
