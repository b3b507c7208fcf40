#!/usr/bin/env bash
# scripts/fuzz_one.sh SECONDS build-fuzz/bin/fuzz_NAME: one libFuzzer target for SECONDS from
# the seed frames its seeded driver of the Release build writes (build/bin/fuzz_NAME --seeds).
# Prints the inputs it ran; on a crash, the end of its log, and exits non-zero.
set -euo pipefail
seconds=$1
fuzzer=$2
name=$(basename "$fuzzer")
corpus=build-fuzz/corpus/$name
rm -rf "$corpus" && mkdir -p "$corpus"
"build/bin/$name" --seeds "$corpus" >/dev/null
if ! "$fuzzer" -max_total_time="$seconds" -max_len=8192 -seed=1 -print_final_stats=1 \
  "$corpus" 2>"build-fuzz/$name.log"; then
  tail -50 "build-fuzz/$name.log"
  exit 1
fi
echo "$name: $(grep -m1 'stat::number_of_executed_units' "build-fuzz/$name.log" | awk '{print $2}') inputs, no crash"
