#!/usr/bin/env bash
# The test command: install what is missing, build with warnings as errors,
# run every test, then fuzz briefly (scripts/fuzz.sh: the parsers, the cache
# policy under a hostile pin page, the daemon's request handling). This is
# what CI runs (.ci/run).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/deps.sh
scripts/build.sh -DWASTE_WERROR=ON -DWASTE_BUILD_TESTS=ON
ctest --test-dir "${WASTE_BUILD_DIR:-build}" --output-on-failure --timeout 600 -j "$(nproc)"
scripts/fuzz.sh "${WASTE_FUZZ_SECONDS:-15}"
