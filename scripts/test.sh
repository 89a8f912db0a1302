#!/usr/bin/env bash
# The test command: install what is missing, build with warnings as errors,
# run every test. Then the same suite again under AddressSanitizer with
# UndefinedBehaviorSanitizer, and the concurrency tests under
# ThreadSanitizer, each in a build directory of its own. This is what CI
# runs (.ci/run). WASTE_SANITIZERS=0 skips the sanitizer builds (for a quick
# local run; CI keeps them).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/deps.sh
build=${WASTE_BUILD_DIR:-build}
jobs=$(nproc)
WASTE_BUILD_DIR=$build scripts/build.sh -DWASTE_WERROR=ON -DWASTE_BUILD_TESTS=ON
ctest --test-dir "$build" --output-on-failure --timeout 600 -j "$jobs"

[ "${WASTE_SANITIZERS:-1}" = 0 ] && exit 0

# Sanitizer reports end the test that hit them. Leaks are checked at exit.
# Cap'n Proto and libuv are not instrumented: suppressions for what they do
# that ThreadSanitizer cannot see are in scripts/tsan.supp, each with why.
export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1:detect_stack_use_after_return=0:strict_string_checks=1
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
export TSAN_OPTIONS="halt_on_error=1:second_deadlock_stack=1:suppressions=$PWD/scripts/tsan.supp"

WASTE_BUILD_DIR=$build-asan scripts/build.sh -DWASTE_WERROR=ON -DWASTE_BUILD_TESTS=ON \
  -DWASTE_SANITIZE=address,undefined
ctest --test-dir "$build-asan" --output-on-failure --timeout 900 -j "$jobs"

# The suites labelled concurrency in tests/CMakeLists.txt (shm, the slot
# cache, the shared source, the daemon, the thread pool, the expert cache),
# and only what they need built.
# -O1: ThreadSanitizer's checks cost more than the optimizer saves, and it
# builds faster.
cmake -S . -B "$build-tsan" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O1 -g1 -DNDEBUG" "-DCMAKE_C_FLAGS_RELWITHDEBINFO=-O1 -g1 -DNDEBUG" \
  -DWASTE_WERROR=ON -DWASTE_BUILD_TESTS=ON -DWASTE_SANITIZE=thread >/dev/null
cmake --build "$build-tsan" --parallel "$jobs" --target shm_test slot_cache_test \
  shared_source_test daemon_test kernels_test expert_cache_test
ctest --test-dir "$build-tsan" --output-on-failure --timeout 900 -j "$jobs" -L concurrency

# libFuzzer, briefly: the manifest and record parsers, the cache policy under
# a hostile pin page, the daemon's request handling.
scripts/fuzz.sh "${WASTE_FUZZ_SECONDS:-15}"
