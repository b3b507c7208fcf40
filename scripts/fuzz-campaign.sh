#!/usr/bin/env bash
# A long fuzz campaign of every frame decoder and the codec spec grammar: the libFuzzer
# targets of tests/codecs/CMakeLists.txt (clang, ASan+UBSan), each started from seed frames
# of its codec and run for an equal share of TOTAL executions (10,000,000 by default), JOBS
# targets at a time. A crash, leak, sanitizer report or timeout fails the campaign and
# leaves the input under build-fuzz/campaign/<target>/. Prints a markdown table (executions,
# executions per second, coverage edges, features, corpus size) for docs/results.md.
#   scripts/fuzz-campaign.sh            # after scripts/test.sh (or any build of build/)
#   TOTAL=20000000 JOBS=2 scripts/fuzz-campaign.sh
set -euo pipefail
cd "$(dirname "$0")/.."
TOTAL=${TOTAL:-10000000}
JOBS=${JOBS:-$(nproc)}
SEED=${SEED:-1}
command -v clang++ >/dev/null || { echo "fuzz-campaign: needs clang++ (scripts/setup.sh)" >&2; exit 1; }
[ -x build/bin/fuzz_fp32 ] || { echo "fuzz-campaign: build build/ first (the seed drivers)" >&2; exit 1; }

CC=clang CXX=clang++ cmake -S . -B build-fuzz -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DFEDLGC_FUZZ=ON -DFEDLGC_CODECS_ONLY=ON -DFEDLGC_WITH_CUDA=OFF -DFEDLGC_BUILD_BENCH=OFF >/dev/null
cmake --build build-fuzz -j"$JOBS" >/dev/null

work=build-fuzz/campaign
rm -rf "$work" && mkdir -p "$work"
targets=(build-fuzz/bin/fuzz_*)
runs=$(( (TOTAL + ${#targets[@]} - 1) / ${#targets[@]} ))
echo "fuzz-campaign: ${#targets[@]} targets x $runs executions, $JOBS at a time" >&2

one() {  # target path, runs, seed
  local fuzzer=$1 name
  name=$(basename "$fuzzer")
  mkdir -p "$work/$name/corpus" "$work/$name/artifacts"
  "build/bin/$name" --seeds "$work/$name/corpus" >/dev/null
  local t0 t1
  t0=$(date +%s.%N)
  if ! "$fuzzer" -runs="$2" -max_len=8192 -seed="$3" -timeout=10 -rss_limit_mb=2048 \
      -print_final_stats=1 -artifact_prefix="$work/$name/artifacts/" "$work/$name/corpus" \
      >"$work/$name/log" 2>&1; then
    echo "FAILED $name: see $work/$name/log" >&2
    tail -40 "$work/$name/log" >&2
    return 1
  fi
  t1=$(date +%s.%N)
  echo "$t0 $t1" >"$work/$name/time"
}
export -f one
export work
printf '%s\n' "${targets[@]}" | xargs -P "$JOBS" -I{} bash -c "one {} $runs $SEED"

python3 - "$work" <<'PY'
import os, re, sys
work = sys.argv[1]
rows, total, seconds = [], 0, 0.0
for name in sorted(os.listdir(work)):
    log = open(os.path.join(work, name, "log")).read()
    stat = lambda k: int(re.search(rf"stat::{k}:\s+(\d+)", log).group(1))
    t0, t1 = map(float, open(os.path.join(work, name, "time")).read().split())
    execs = stat("number_of_executed_units")
    done = re.findall(r"#\d+\s+DONE\s+cov: (\d+) ft: (\d+) corp: (\d+)", log)
    cov, ft, corp = done[-1] if done else ("?", "?", "?")
    rows.append((name, execs, execs / max(t1 - t0, 1e-9), cov, ft, corp))
    total += execs
    seconds += t1 - t0
print("| target | executions | per second | coverage edges | features | corpus |")
print("|---|---|---|---|---|---|")
for name, execs, rate, cov, ft, corp in rows:
    print(f"| `{name}` | {execs:,} | {rate:,.0f} | {cov} | {ft} | {corp} |")
print(f"| **all {len(rows)}** | **{total:,}** | | | | |")
print(f"\n{total:,} executions in {seconds:,.0f} target-seconds; no crash, leak, "
      "sanitizer report or timeout.")
PY
