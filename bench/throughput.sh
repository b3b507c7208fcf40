#!/usr/bin/env bash
# Client trainings per second in FLUTE's shape (1,000 clients, 10 asked a round, 100 rounds,
# 60 Fashion-MNIST examples a client, the small MLP, one local epoch) over the real protocol:
# fedlgc-sim with mTLS, its clients hosted CPP to a fedlgc-edge process (default 250; 1 gives
# every client a process of its own). Reports the trainings per second of wall time from
# launch to the end, and where the time goes: launch to the first commit (certificates,
# processes, joins, the first round), the time from one commit to the next, and in a round
# the time from its opening to its close (downloads, training, uploads), the slowest
# client's training and the coordinator's evaluation and export.
# Commit times are read off the coordinator's rounds.jsonl as its lines appear.
#   bench/throughput.sh [OUT] [extra fedlgc-sim flags...]
#   CODEC='qsgd(bits=4)' CPP=1 ROUNDS=20 bench/throughput.sh build/bench-throughput --insecure
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-build/bench-throughput}
shift || true
clients=${CLIENTS:-1000}
codec=${CODEC:-fp32}
mkdir -p "$out"
run="$out/run"
rm -rf "$run"
# Each line of rounds.jsonl, stamped with the seconds since launch when it appeared.
python3 - "$run/coordinator/rounds.jsonl" "$out/commits.txt" <<'PY' &
import sys, time
path, stamps = sys.argv[1:]
start, f = time.monotonic(), None
with open(stamps, "w") as out:
    while True:
        time.sleep(0.02)
        if f is None:
            try:
                f = open(path, "rb")
            except OSError:
                continue
        # Only what was appended since the last look; a line counts once it is whole.
        while (line := f.readline()).endswith(b"\n"):
            out.write(f"{time.monotonic() - start:.3f}\n")
            out.flush()
        f.seek(-len(line), 1)
PY
watcher=$!
trap 'kill $watcher 2>/dev/null || true' EXIT
start=$(date +%s.%N)
./build/bin/fedlgc-sim --clients "$clients" --clients-per-process "${CPP:-250}" \
  --fraction "${FRACTION:-0.01}" --rounds "${ROUNDS:-100}" --model "${MODEL:-mlp}" \
  --data fashion-mnist --train-limit $((clients * 60)) --local-epochs 1 --codec "$codec" \
  --downlink-codec "$codec" --seed 1 --quiet --run-dir "$run" --report "$out/report.json" "$@" |
  grep '^final accuracy' || true
end=$(date +%s.%N)
sleep 0.1
kill $watcher 2>/dev/null || true
python3 - "$out/report.json" "$out/commits.txt" "$start" "$end" "$codec" "${CPP:-250}" <<'PY'
import json, statistics, sys
report, stamps, start, end, codec, cpp = sys.argv[1:]
wall = float(end) - float(start)
rows = json.load(open(report))["rounds"]
commits = [float(line) for line in open(stamps)]
if len(commits) != len(rows):
    sys.exit(f"saw {len(commits)} commits for {len(rows)} rounds")
trainings = sum(r["participants"] for r in rows)
inside = [r["seconds"] for r in rows]
train = [r.get("train_seconds_max", 0.0) for r in rows]
evals = [r.get("eval_seconds", 0.0) + r.get("export_seconds", 0.0) for r in rows]
gaps = [b - a for a, b in zip(commits, commits[1:])]
med = statistics.median
print(f"{codec}, {cpp} clients a process: {trainings} trainings in {wall:.1f} s: "
      f"{trainings / wall:.2f} a second; from the first commit to the last "
      f"{sum(r['participants'] for r in rows[1:]) / max(commits[-1] - commits[0], 1e-9):.2f}")
print(f"  launch to the first commit {commits[0]:.1f} s; then a commit every {med(gaps):.3f} s "
      f"(median); after the last commit {wall - commits[-1]:.1f} s")
print(f"  a round's median: open to close {med(inside):.3f} s, of which the slowest client "
      f"trains {med(train):.3f} s; evaluation and export {med(evals):.3f} s")
PY
