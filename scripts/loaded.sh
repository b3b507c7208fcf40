#!/usr/bin/env bash
# The suites that start whole federations, run RUNS times (3) beside a competing load of
# LOAD busy cores (2): every run must pass. What a loaded CI machine would break shows here
# first. Writes each run's ctest log and a summary (one line a run: passed, failed, the
# failures' names, seconds) to OUT (build/loaded), and prints the summary.
#   scripts/loaded.sh [OUT]        (after a build: cmake --build build)
# RUNS, LOAD and LABELS ('integration|python') change what it runs; JOBS ctest's parallelism
# (one more than the cores, as scripts/test.sh runs these suites).
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-build/loaded}
runs=${RUNS:-3}
load=${LOAD:-2}
labels=${LABELS:-integration|python}
jobs=${JOBS:-$(($(nproc) + 1))}
mkdir -p "$out"
pids=()
stop_load() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; }
trap stop_load EXIT
for _ in $(seq "$load"); do
  (while :; do :; done) &
  pids+=($!)
done
summary=$out/summary.txt
: >"$summary"
failed_runs=0
for run in $(seq "$runs"); do
  start=$SECONDS
  log=$out/run-$run.log
  rc=0
  ctest --test-dir build -j"$jobs" -L "$labels" --output-on-failure >"$log" 2>&1 || rc=$?
  passed=$(grep -oE '[0-9]+% tests passed, [0-9]+ tests failed out of [0-9]+' "$log" || echo "no result")
  names=$(sed -n '/The following tests FAILED:/,$p' "$log" | grep -E '^\s+[0-9]+ - ' | sed 's/^\s*//' |
          tr '\n' ';' || true)
  line="run $run: $passed in $((SECONDS - start)) s (load: $load busy cores, ctest -j$jobs)${names:+; failed: $names}"
  echo "$line" | tee -a "$summary"
  [ "$rc" = 0 ] || failed_runs=$((failed_runs + 1))
done
echo "$failed_runs of $runs runs failed" | tee -a "$summary"
[ "$failed_runs" = 0 ]
