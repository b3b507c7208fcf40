#!/usr/bin/env bash
# The whole test suite, as CI runs it:
#   1. Release build with warnings as errors, every ctest suite (GPU tests skip without a GPU).
#   2. Clang's thread-safety analysis (-Wthread-safety) over every file that holds a lock,
#      with the flags of build 1.
#   3. libFuzzer targets built with clang (ASan+UBSan), each run for a few seconds from
#      seed frames.
#   4. The codec tests again under ASan+UBSan: the sanitized build of step 3 (g++'s own
#      when clang is missing; codecs only: no gRPC or libtorch).
#   5. The compose deployment on a real Docker engine with the binaries of build 1
#      (tests/deployment/compose_engine_test.py; images cached in /var/cache/fedlgc-docker,
#      FEDLGC_DOCKER_CACHE to move it; FEDLGC_SKIP_DOCKER=1 skips the stage).
# Build folders: build/, build-fuzz/ (build-asan/ without clang). JOBS overrides the
# parallelism; FUZZ_SECONDS the seconds each fuzzer runs (8; 0 skips stage 3's runs).
# Each stage's time is printed at the end and kept in build/stage-times.txt.
#
#   scripts/test.sh quick   the quick tier: the build of stage 1 and every test that needs
#                           no whole federation (the unit binaries and ctest -LE
#                           'unit|integration|python|deployment'),
#                           a few minutes after the build. Run it before every commit; run
#                           the whole suite before you push (CONTRIBUTING.md).
set -euo pipefail
cd "$(dirname "$0")/.."
JOBS=${JOBS:-$(nproc)}
FUZZ_SECONDS=${FUZZ_SECONDS:-8}
TIER=${1:-all}
case "$TIER" in
  all | quick) ;;
  *) echo "usage: scripts/test.sh [quick]" >&2; exit 2 ;;
esac

times=()
stage_start=$SECONDS
# Records the time of the stage that just ended and starts the next one's clock.
stage_done() {
  times+=("$(printf '%-34s %5d s' "$1" $((SECONDS - stage_start)))")
  stage_start=$SECONDS
}
print_times() {
  mkdir -p build
  { printf '%s\n' "${times[@]}"; printf '%-34s %5d s\n' "total" "$SECONDS"; } | tee build/stage-times.txt
}
trap 'echo "== stage times (so far)"; print_times' ERR

echo "== 1/5 release build and tests"
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DFEDLGC_WERROR=ON >/dev/null
cmake --build build -j"$JOBS"
stage_done "1 release build"
# The unit tests (label "unit": every GoogleTest binary but integration_test) run each binary
# in one process, JOBS shards at once; ctest runs the rest, a process a test.
unit_binaries=$(ctest --test-dir build -L unit --show-only=json-v1 |
  python3 -c 'import json, sys; print(" ".join(sorted({t["command"][0] for t in json.load(sys.stdin)["tests"]})))')
# shellcheck disable=SC2086  # one word a binary
scripts/gtest_shards.sh "$JOBS" $unit_binaries
if [ "$TIER" = quick ]; then
  ctest --test-dir build -j"$JOBS" --output-on-failure -LE 'unit|integration|python|deployment'
  stage_done "1 tests without a federation"
  trap - ERR
  echo "== stage times"
  print_times
  exit 0
fi
# The federations wait on links, deadlines and child processes: one test more than the
# cores keeps them busy (the suites pass beside two busy cores: scripts/loaded.sh).
ctest --test-dir build -j"$((JOBS + 1))" --output-on-failure -LE unit
stage_done "1 tests"

echo "== 2/5 thread-safety analysis (clang -Wthread-safety)"
if command -v clang++ >/dev/null; then
  JOBS=$JOBS scripts/thread_safety.sh build
else
  echo "clang++ not found: no thread-safety analysis"
fi
stage_done "2 thread-safety analysis"

echo "== 3/5 fuzzing the decoders (libFuzzer, ${FUZZ_SECONDS}s each)"
if command -v clang++ >/dev/null; then
  CC=clang CXX=clang++ cmake -S . -B build-fuzz -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DFEDLGC_FUZZ=ON -DFEDLGC_CODECS_ONLY=ON -DFEDLGC_WITH_CUDA=OFF -DFEDLGC_BUILD_BENCH=OFF >/dev/null
  cmake --build build-fuzz -j"$JOBS"
  stage_done "3 sanitized build"
  if [ "$FUZZ_SECONDS" -gt 0 ]; then
    # JOBS fuzzers at a time: each libFuzzer run is one process on one core.
    printf '%s\n' build-fuzz/bin/fuzz_* | xargs -P "$JOBS" -n 1 scripts/fuzz_one.sh "$FUZZ_SECONDS"
  else
    echo "FUZZ_SECONDS=0: the fuzzers are built, not run"
  fi
else
  echo "clang++ not found: the seeded fuzz drivers in step 1 stand in for libFuzzer"
fi
stage_done "3 fuzzing"

echo "== 4/5 codec tests under ASan+UBSan"
# The fuzz build of stage 3 is the codec library and its tests under clang's ASan+UBSan
# already; without clang, g++ builds them with its own sanitizers.
sanitized=build-fuzz
if ! command -v clang++ >/dev/null; then
  sanitized=build-asan
  cmake -S . -B build-asan -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DFEDLGC_SANITIZE=ON \
    -DFEDLGC_CODECS_ONLY=ON -DFEDLGC_WITH_CUDA=OFF -DFEDLGC_BUILD_BENCH=OFF -DFEDLGC_WERROR=ON >/dev/null
  cmake --build build-asan -j"$JOBS"
fi
# Each test binary in one process (LeakSanitizer then checks the whole run), JOBS shards at once.
export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
scripts/gtest_shards.sh "$JOBS" "$sanitized"/bin/{codecs,base,privacy}_test
# Without clang the seeded fuzz drivers are ctest tests of that build: run them sanitized too.
[ "$sanitized" = build-fuzz ] || ctest --test-dir "$sanitized" -j"$JOBS" --output-on-failure -L fuzz
unset ASAN_OPTIONS UBSAN_OPTIONS
stage_done "4 codec tests under ASan+UBSan"

echo "== 5/5 the compose deployment on a real Docker engine"
if [ "${FEDLGC_SKIP_DOCKER:-0}" = 1 ]; then
  echo "FEDLGC_SKIP_DOCKER=1: skipped"
else
  rc=0
  python3 tests/deployment/compose_engine_test.py build/bin . || rc=$?
  [ "$rc" = 0 ] || [ "$rc" = 77 ] || exit "$rc"
fi
stage_done "5 compose deployment"
trap - ERR
echo "== stage times"
print_times
