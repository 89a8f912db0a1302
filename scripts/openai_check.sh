#!/usr/bin/env bash
# waste serve against the real `openai` Python client from PyPI (and curl),
# on the trained demo model and a synthetic one: tests/openai/serve_client_test.py;
# its Anthropic Messages API against the real `anthropic` client and its
# Responses API against openai's, on the demo model:
# tests/openai/anthropic_client_test.py (and the committed fixtures of both
# APIs' answers still as those clients check them); agent loops with forced
# tool calls through both clients on a tiny synthetic model of each chat
# family (and the demo model): tests/openai/agent_loop_test.py; then its chat page in headless Chromium, typed into and read back over the
# DevTools protocol: tests/openai/chat_page_test.py; and tools/serve_bench's
# measurements on small sizes, their counts checked: tests/openai/serve_bench_test.py.
# scripts/test.sh runs it after the plain suite; it needs the plain build.
# The client lives in a venv of its own under the build directory: the
# product itself needs no Python.
set -euo pipefail
cd "$(dirname "$0")/.."
build=${WASTE_BUILD_DIR:-build}
venv=$build/openai-venv
[ -x "$venv/bin/python" ] || python3 -m venv "$venv"
"$venv/bin/pip" install -q --disable-pip-version-check openai==3.57.0 anthropic==2.17.0 \
  websocket-client==1.9.2 jsonschema==4.26.0
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
"$build/bin/waste" convert models/demo-moe "$work/demo" --expert-format bf16 >/dev/null
"$build/bin/waste" synth --preset tiny-kimi "$work/tiny" >/dev/null
for preset in tiny-qwen3 tiny-deepseek tiny-glm tiny-gpt-oss tiny-k3; do
  "$build/bin/waste" synth --preset $preset "$work/$preset" >/dev/null
done
for model in demo tiny; do
  echo "openai_check: $model"
  "$venv/bin/python" tests/openai/serve_client_test.py "$build/bin/waste" "$work/$model"
done
echo "openai_check: agent loops (forced tool calls) with the openai and anthropic clients, per family"
"$venv/bin/python" tests/openai/agent_loop_test.py "$build/bin/waste" "$work"
echo "openai_check: the Messages and Responses fixtures, as the pinned clients check them"
"$venv/bin/python" tools/agent_apis/make_fixtures.py --check
echo "openai_check: the anthropic client, and openai's responses, on demo"
"$venv/bin/python" tests/openai/anthropic_client_test.py "$build/bin/waste" "$work/demo"
echo "openai_check: tools/serve_bench against waste serve (counts, not times)"
"$venv/bin/python" tests/openai/serve_bench_test.py "$build/bin/waste" "$work/tiny"
echo "openai_check: the chat page in headless Chromium"
"$venv/bin/python" tests/openai/chat_page_test.py "$build/bin/waste" "$work/demo"
