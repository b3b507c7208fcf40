#!/usr/bin/env bash
# How many clients one coordinator holds: fedlgc-load against a coordinator of its own on
# this machine, the CNN's 215,010-coordinate updates through 4-bit QSGD, 1 s think time in
# place of training (jitter +-50%), 5 rounds, for each count of clients in CLIENTS
# (default "100 1000 5000") and each fraction in FRACTIONS (default "1.0 0.1"). Every
# round's aggregate is checked against the updates the clients sent. Prints a markdown
# table (medians over rounds 2..5: round seconds, round overhead = round seconds minus the
# slowest participant's own start-to-uploaded time, the coordinator's peak RSS, its CPU
# seconds per round and the uplink MB it ingests per CPU second, upload p99) and draws
# clients against overhead, RSS and ingest rate into OUT/load.png. The coordinator and the
# emulated clients share this machine's cores: the figures are of the pair. JSON reports
# go to OUT (default build/bench-load); runs already there are kept and tabled.
# ONLY=<clients>x<fraction>[,...] runs those; ROUNDS (default 5); BIN=<dir> (default
# build/bin). About 15 minutes on the 2-core build machine.
#   bench/load.sh [OUT] [extra fedlgc-load flags...]
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-build/bench-load}
shift || true
mkdir -p "$out"
bin=${BIN:-build/bin}
for n in ${CLIENTS:-100 1000 5000}; do
  for f in ${FRACTIONS:-1.0 0.1}; do
    name="${n}x${f}"
    if [ -n "${ONLY:-}" ] && [[ ",$ONLY," != *",$name,"* ]]; then continue; fi
    echo "== $name" >&2
    rm -rf "$out/$name.run" "$out/$name.json"
    "$bin/fedlgc-load" --clients "$n" --fraction "$f" --rounds "${ROUNDS:-5}" --model cnn \
      --codec "qsgd(bits=4)" --think 1 --seed 1 --timeout 1800 --quiet --bin-dir "$bin" \
      --run-dir "$out/$name.run" --report "$out/$name.json" "$@" >&2 ||
      echo "   $name FAILED (its report says why)" >&2
  done
done
# Debian's python3, where apt puts python3-matplotlib (scripts/setup.sh).
"${PYTHON:-/usr/bin/python3}" - "$out" <<'PY'
import glob, json, os, statistics, sys
out = sys.argv[1]
runs = []
for path in glob.glob(f"{out}/*x*.json"):
    r = json.load(open(path))
    c = r["summary"]["config"]
    runs.append((c["clients"], c["fraction"], r))
runs.sort(key=lambda x: (x[1] != 1.0, x[0]))
if not runs:
    sys.exit(0)
def med(rows, key):
    v = [x[key] for x in rows]
    return statistics.median(v) if v else float("nan")
print("| clients | fraction | per round | rounds checked | round s | overhead s | slowest client s "
      "| upload p99 s | coordinator peak RSS MB | coordinator CPU s / round | ingest MB per CPU s "
      "| coordinator threads |")
print("|---:|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|")
table = []
for n, f, r in runs:
    rows = r["rounds"][1:] or r["rounds"]  # round 1 adds every TLS handshake
    s = r["summary"]
    per = med(rows, "participants") if rows else 0
    row = dict(clients=n, fraction=f, seconds=med(rows, "seconds"),
               overhead=med(rows, "overhead_seconds"), rss=s["coordinator_peak_rss_mb"],
               ingest=med(rows, "ingest_mb_per_cpu_second"))
    table.append(row)
    status = f'{s["rounds_checked"]}/{r["summary"]["config"]["rounds"]}' + ("" if s["ok"] else " FAILED")
    print(f'| {n} | {f} | {per:.0f} | {status} | {row["seconds"]:.2f} | {row["overhead"]:.2f} '
          f'| {med(rows, "slowest_client_seconds"):.2f} | {med(rows, "upload_p99_seconds"):.2f} '
          f'| {row["rss"]:.0f} | {med(rows, "coordinator_cpu_seconds"):.2f} | {row["ingest"]:.1f} '
          f'| {s["coordinator_max_threads"]} |')
try:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
except ImportError:
    sys.exit(0)
fig, axes = plt.subplots(1, 3, figsize=(13, 3.8))
for f in sorted({r["fraction"] for r in table}, reverse=True):
    pts = sorted((r for r in table if r["fraction"] == f), key=lambda r: r["clients"])
    x = [r["clients"] for r in pts]
    for ax, key in zip(axes, ["overhead", "rss", "ingest"]):
        ax.plot(x, [r[key] for r in pts], marker="o", label=f"fraction {f}")
for ax, title in zip(axes, ["round overhead (s)", "coordinator peak RSS (MB)",
                            "ingest (uplink MB per coordinator CPU s)"]):
    ax.set_xscale("log")
    ax.set_xlabel("connected clients")
    ax.set_title(title)
    ax.grid(alpha=0.3)
axes[0].legend()
fig.suptitle("fedlgc-load: one coordinator, 215k-dim updates, qsgd(bits=4), 1 s think, 2 cores")
fig.tight_layout()
fig.savefig(f"{out}/load.png", dpi=110)
print(f"\nplot: {out}/load.png")
PY
