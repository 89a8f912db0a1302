#!/usr/bin/env bash
# The test command: install what is missing, build with warnings as errors,
# run every test. Then the same suite again under AddressSanitizer with
# UndefinedBehaviorSanitizer, the concurrency tests under ThreadSanitizer,
# each in a build directory of its own, and fuzz briefly (scripts/fuzz.sh:
# the parsers, the cache policy under a hostile pin page, the daemon's
# request handling). This is what CI runs (.ci/run); each stage prints its
# wall and CPU time. WASTE_SANITIZERS=0 stops after the plain suite (a quick
# local run; CI keeps everything). docs/DESIGN.md "Sanitizers" says what runs
# where. It works from any clone, as root (in /root too) or as a user.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/deps.sh
# Which kernel paths this machine can test (the suites run every one it has).
echo "test.sh: $(grep -m1 'model name' /proc/cpuinfo | sed 's/.*: //'), $(nproc) cores," \
  "AVX-512: $(grep -q -m1 avx512vbmi /proc/cpuinfo && echo yes || echo no)"
build=${WASTE_BUILD_DIR:-build}
jobs=$(nproc)
# CPU seconds (user+sys) of this shell's children that have ended: each
# stage's share says what it costs on a machine shared with other work,
# where its wall time does not.
children_cpu() { awk -v hz="$(getconf CLK_TCK)" '{ print int(($16 + $17) / hz) }' /proc/$$/stat; }
stage_start=$SECONDS
stage_cpu=$(children_cpu)
stage() {  # stage NAME: the wall and CPU time since the last stage ended
  local cpu; cpu=$(children_cpu)
  echo "test.sh: $1 took $((SECONDS - stage_start)) s, $((cpu - stage_cpu)) CPU s"
  stage_start=$SECONDS
  stage_cpu=$cpu
}

# The tests whose children change uid (grep tests/ for setuid and setpriv
# --reuid), again with the clone's root at mode 0700, as a checkout under
# /root is: whatever such a child reads (programs, sanitizer suppressions,
# sockets, state directories) must come from a place its uid can reach, not
# from the clone. Root only (the tests skip otherwise); the mode is put back,
# also when the script exits early.
uid_tests='^(Daemon\.(BadRequestsAreRefusedWithMessages|AllowedGroupsAndUidsMayAttach'
uid_tests+='|MetricsPeersThatMisbehaveCannotKeepThePageFromOthers)'
uid_tests+='|DaemonClient\.AnotherUsersSocketIsAPermissionFailure'
uid_tests+='|Service\.(AsTheUnitRunsItUnprivilegedTheTrunkIsWired'
uid_tests+='|UnderAReadOnlySystemItWritesOnlyItsOwnDirectories|ReloadChangesWhoMayAttach))$'
uid_tests_closed() {  # uid_tests_closed BUILD COUNT [CTEST ARGS]: COUNT of them are in BUILD
  [ "$(id -u)" = 0 ] || return 0
  local found mode rc=0
  found=$(ctest --test-dir "$1" -N -R "$uid_tests" "${@:3}" | sed -n 's/^Total Tests: //p')
  if [ "$found" != "$2" ]; then
    echo "test.sh: $1 has ${found:-no} tests matching uid_tests, not $2: is the list up to date?" >&2
    return 1
  fi
  mode=$(stat -c %a .)
  trap 'chmod "$mode" "$PWD"' EXIT
  chmod 0700 .
  ctest --test-dir "$1" --output-on-failure --timeout 900 -R "$uid_tests" "${@:3}" || rc=$?
  chmod "$mode" .
  trap - EXIT
  return "$rc"
}

# Line tables only (-g1), and the test programs' own files at -O1 (the code
# they test stays at -O2): full debug info and -O2 on the test files were
# half this stage's CPU time, and a CI log needs no more than lines. The
# programs' own files (command lines, CLI11) at -O1 too (compute_cmds.cc:
# 12.4 CPU s at -O2, 10.1 at -O1); their work is the libraries'.
WASTE_BUILD_DIR=$build scripts/build.sh -DWASTE_WERROR=ON -DWASTE_BUILD_TESTS=ON \
  "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O2 -g1 -DNDEBUG" "-DCMAKE_C_FLAGS_RELWITHDEBINFO=-O2 -g1 -DNDEBUG" \
  -DWASTE_TEST_CXX_FLAGS=-O1 -DWASTE_PROGRAM_CXX_FLAGS=-O1
stage "plain build"
ctest --test-dir "$build" --output-on-failure --timeout 600 -j "$jobs"
uid_tests_closed "$build" 7
stage "plain tests"
WASTE_BUILD_DIR=$build scripts/openai_check.sh
stage "openai client against waste serve"

[ "${WASTE_SANITIZERS:-1}" = 0 ] && exit 0

# A sanitizer report aborts the process that hit it, which fails its test
# (a child process's abort is seen by the test that waits for it). Leaks are
# checked at exit. detect_stack_use_after_return stays off: its fake stacks
# cost memory and time on every call, and the suite keeps no pointers to
# dead frames across calls that it would catch. Cap'n Proto and libuv are
# not instrumented by ThreadSanitizer: scripts/tsan.supp says what it cannot
# see there, entry by entry; the TSan build compiles it in
# (cmake/tsan_suppressions.cmake), so that no option names a file in the
# clone, which a child of another uid may not reach.
export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1:detect_stack_use_after_return=0:strict_string_checks=1
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
export TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1

# The whole suite (benchmarks and libFuzzer programs are not built: nothing
# here runs them; the fuzz inputs are replayed by the suite's *_replay tests).
# -O1, as for ThreadSanitizer below: at -O2 this build was the longest stage
# (22 minutes on a cold 2-core machine), and -O1 compiles the largest files
# in 60% of the CPU time. The test programs' own files at -O0: under the
# sanitizers they took half the CPU time at -O1 (daemon_test.cc: 74 s at
# -O1, 36 s at -O0), and their arithmetic is the libraries', which stay -O1.
# So are the programs' own files (clients/ and the mains), which CLI11 makes
# costly (compute_cmds.cc: 22.6 s at -O1, 15.2 s at -O0). The loop-heavy
# cases run fewer rounds under a sanitizer (#ifdef WASTE_SANITIZE;
# docs/DESIGN.md "Sanitizers" names them).
o1=("-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O1 -g1 -DNDEBUG" "-DCMAKE_C_FLAGS_RELWITHDEBINFO=-O1 -g1 -DNDEBUG")
WASTE_BUILD_DIR=$build-asan scripts/build.sh -DWASTE_WERROR=ON -DWASTE_BUILD_TESTS=ON \
  "${o1[@]}" -DWASTE_TEST_CXX_FLAGS=-O0 -DWASTE_PROGRAM_CXX_FLAGS=-O0 -DWASTE_SANITIZE=address,undefined
stage "asan+ubsan build"
ctest --test-dir "$build-asan" --output-on-failure --timeout 900 -j "$jobs"
uid_tests_closed "$build-asan" 7
stage "asan+ubsan tests"

# The suites labelled concurrency in tests/CMakeLists.txt (shm, the slot
# cache, the shared source, the daemon, the thread pool, the expert cache,
# the scheduler and waste serve's API; of some suites only the threaded
# cases: that file names them, and the others it leaves to the builds
# above), and only what they need built (the target concurrency_tests).
# -O1: ThreadSanitizer's checks cost more than the optimizer saves, and it
# builds faster. The test programs' and the programs' own files at -O0, as
# in the ASan+UBSan build above, for the same reason.
cmake -S . -B "$build-tsan" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo "${o1[@]}" \
  -DWASTE_WERROR=ON -DWASTE_BUILD_TESTS=ON -DWASTE_TEST_CXX_FLAGS=-O0 \
  -DWASTE_PROGRAM_CXX_FLAGS=-O0 -DWASTE_SANITIZE=thread >/dev/null
cmake --build "$build-tsan" --parallel "$jobs" --target concurrency_tests
stage "tsan build"
ctest --test-dir "$build-tsan" --output-on-failure --timeout 900 -j "$jobs" -L concurrency
uid_tests_closed "$build-tsan" 3 -L concurrency
stage "tsan tests"

scripts/fuzz.sh "${WASTE_FUZZ_SECONDS:-15}"
stage "fuzz (build and run)"
