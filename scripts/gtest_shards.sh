#!/usr/bin/env bash
# Runs GoogleTest binaries the way a developer does (every test of a binary in one process),
# split into JOBS shards that run at once (GTEST_TOTAL_SHARDS / GTEST_SHARD_INDEX), one binary
# after another. ctest runs each test in a process of its own: for a binary that links libtorch
# that is 0.7 s of start-up a test, and under ASan 0.2 s, most of the time of a unit test.
#
#   scripts/gtest_shards.sh JOBS BINARY...
# Each shard has a temporary folder of its own (TEST_TMPDIR, which testing::TempDir() returns,
# and TMPDIR): tests that name a fixed folder there would otherwise meet in it when two shards
# of one binary run them at once.
# Exits non-zero when a shard fails, crashes or runs past SHARD_TIMEOUT seconds (1200); prints
# that shard's failures. Each binary's line says how many tests ran and how long it took.
set -uo pipefail
jobs=$1
shift
if [ $# = 0 ]; then
  echo "gtest_shards.sh: no test binaries given (is the build's ctest -L unit empty?)" >&2
  exit 2
fi
timeout_s=${SHARD_TIMEOUT:-1200}
logs=$(mktemp -d)
trap 'rm -rf "$logs"' EXIT
status=0
for binary in "$@"; do
  name=$(basename "$binary")
  start=$SECONDS
  pids=()
  for ((i = 0; i < jobs; i++)); do
    tmp="$logs/tmp.$name.$i"
    mkdir -p "$tmp"
    TEST_TMPDIR=$tmp TMPDIR=$tmp GTEST_TOTAL_SHARDS=$jobs GTEST_SHARD_INDEX=$i \
      timeout "$timeout_s" "$binary" --gtest_brief=1 >"$logs/$name.$i" 2>&1 &
    pids+=($!)
  done
  ran=0
  failed=0
  for ((i = 0; i < jobs; i++)); do
    rc=0
    wait "${pids[$i]}" || rc=$?
    log="$logs/$name.$i"
    n=$(sed -n 's/^\[  PASSED  \] \([0-9]*\) tests\?\..*/\1/p' "$log" | tail -1)
    ran=$((ran + ${n:-0}))
    if [ "$rc" != 0 ]; then
      failed=1
      status=1
      echo "---- $name shard $i/$jobs exited $rc$([ "$rc" = 124 ] && echo " (past ${timeout_s} s)")"
      tail -80 "$log"
    fi
  done
  printf '%-22s %5d tests passed in %4d s%s\n' "$name" "$ran" $((SECONDS - start)) \
    "$([ "$failed" = 1 ] && echo ", FAILED")"
done
exit "$status"
