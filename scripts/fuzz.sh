#!/usr/bin/env bash
# Builds the libFuzzer targets (fuzz/) with clang, AddressSanitizer and
# UndefinedBehaviorSanitizer into build-fuzz/, and runs each for SECONDS
# (default 10) starting from the committed inputs (tests/fuzz/<target>/) and
# what earlier runs found (build-fuzz/corpus/), as many targets at once as
# there are cores (WASTE_FUZZ_JOBS). A crash fails the run and leaves its
# input in build-fuzz/crashes/<target>/: commit it under tests/fuzz/<target>/
# with the fix, and every build replays it. WASTE_FUZZ_TARGETS picks some.
# scripts/test.sh runs this briefly; docs/log/2026-11-30-issues-6-to-9.md has a long run.
# The record target reads a tiny container written by the normal build's
# `waste synth` (build/bin/waste: run scripts/build.sh first).
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${1:-10}
build=${WASTE_FUZZ_BUILD_DIR:-build-fuzz}
# http is left out of the default list: in CI's 15-second run (two targets
# at a time, 2026-12-01) one input's connection did not end within its
# 5-second deadline, and the same input alone ends in 10 ms
# (tests/fuzz/http/ci-stall-once, replayed by the suite). Run it by name
# (WASTE_FUZZ_TARGETS=http) until that stall is understood.
all=(manifest record slot_cache rpc safetensors tokenizer_json tokenizer_model chat openai reply grammar
     session uses settings trace gguf)
read -r -a targets <<<"${WASTE_FUZZ_TARGETS:-${all[*]}}"
jobs=${WASTE_FUZZ_JOBS:-$(nproc)}
# -O1: a fuzzer needs no more, and the session target builds the whole
# engine (vq_avx512.cc: 164 s at -O2, 147 s at -O1; engine/CMakeLists.txt
# says what else its kernels are spared).
CC=clang CXX=clang++ cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O1 -g1 -DNDEBUG" "-DCMAKE_C_FLAGS_RELWITHDEBINFO=-O1 -g1 -DNDEBUG" \
  -DWASTE_BUILD_TESTS=OFF -DWASTE_FUZZ=ON -DWASTE_SANITIZE=address,undefined >/dev/null
cmake --build "$build" --parallel "$(nproc)" --target "${targets[@]/%/_fuzz}"
waste=${WASTE_BUILD_DIR:-build}/bin/waste
[ -x "$waste" ] || { echo "fuzz: $waste is missing: run scripts/build.sh first" >&2; exit 1; }
"$waste" synth -q --force --preset tiny-kimi "$build/tiny-kimi"
export WASTE_FUZZ_CONTAINER=$PWD/$build/tiny-kimi
export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
# One target: its log in $build/<target>.log; fails with the log's tail.
fuzz_one() {
  local t=$1 corpus=$build/corpus/$1 crashes=$build/crashes/$1
  mkdir -p "$corpus" "$crashes"
  # -timeout: one input taking 10 s is a hang; -rss_limit_mb: a blow-up.
  if ! "$build/fuzz/${t}_fuzz" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 \
      -print_final_stats=1 -artifact_prefix="$crashes/" "$corpus" "tests/fuzz/$t" \
      >"$build/$t.log" 2>&1; then
    tail -n 60 "$build/$t.log"
    echo "fuzz: $t failed; the input is in $crashes/" >&2
    return 1
  fi
  echo "fuzz: $t: $(grep -E '^stat::number_of_executed_units' "$build/$t.log" | awk '{print $2}') runs," \
       "$(grep -oE 'cov: [0-9]+ ft: [0-9]+' "$build/$t.log" | tail -n 1)," \
       "peak $(grep -E '^stat::peak_rss_mb' "$build/$t.log" | awk '{print $2}') MB"
}
echo "fuzz: ${targets[*]} for ${seconds}s each, $jobs at a time"
failed=0
for t in "${targets[@]}"; do
  while (( $(jobs -rp | wc -l) >= jobs )); do wait -n || failed=1; done
  fuzz_one "$t" &
done
while (( $(jobs -rp | wc -l) > 0 )); do wait -n || failed=1; done
exit "$failed"
