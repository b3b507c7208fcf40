#!/usr/bin/env bash
# A population of clients that really train, on this machine: fedlgc-sim with CLIENTS
# clients (default 1000) hosted PER to a fedlgc-edge process (default 250), a tenth of them
# asked each round, each with a 60-example shard of Fashion-MNIST (the CNN by default).
# While it runs, every second it sums the resident memory of all fedlgc processes and keeps
# the largest sum (the peak of the whole job, sampled); it also reads each process's own
# peak (VmHWM) just before it ends. Then it checks each round from the report: committed,
# the asked clients all counted, every coordinate of every update once.
#   bench/population.sh [OUT] [extra fedlgc-sim flags...]
#   CLIENTS=200 PER=50 ROUNDS=3 MODEL=mlp bench/population.sh
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-build/bench-population}
shift || true
mkdir -p "$out"
clients=${CLIENTS:-1000}
per=${PER:-250}
rounds=${ROUNDS:-5}
model=${MODEL:-cnn}
fraction=${FRACTION:-0.1}
run="$out/run"
rm -rf "$run"
mem="$out/memory.txt"
: >"$mem"
python3 - "$mem" <<'PY' &
# Every second: the sum of the resident memory of all fedlgc processes (its largest value
# is the job's sampled peak), and each process's own peak (VmHWM), the largest it said.
import os, sys, time
peak, hwm = 0, {}
while True:
    total = 0
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            fields = dict(l.split(":", 1) for l in open(f"/proc/{pid}/status"))
        except (OSError, ValueError):
            continue
        if not fields["Name"].strip().startswith("fedlgc-"):
            continue
        total += int(fields.get("VmRSS", "0 kB").split()[0])
        # An exiting process has no Vm lines left: keep what it said before.
        hwm[pid] = max(hwm.get(pid, 0), int(fields.get("VmHWM", "0 kB").split()[0]))
    peak = max(peak, total)
    with open(sys.argv[1], "w") as f:
        f.write(f"{peak} {sum(hwm.values())} {len(hwm)}\n")
    time.sleep(1)
PY
sampler=$!
trap 'kill $sampler 2>/dev/null || true' EXIT
start=$(date +%s)
./build/bin/fedlgc-sim --clients "$clients" --clients-per-process "$per" --fraction "$fraction" \
  --rounds "$rounds" --model "$model" --data fashion-mnist --train-limit $((clients * 60)) \
  --local-epochs 1 --codec 'qsgd(bits=8)' --seed 1 --quiet --run-dir "$run" \
  --report "$out/report.json" "$@" | tail -3
end=$(date +%s)
sleep 1.5
kill $sampler 2>/dev/null || true
python3 - "$out/report.json" "$mem" "$clients" "$per" "$fraction" $((end - start)) "$model" <<'PY'
import json, math, sys
report, mem, clients, per, fraction, wall, model = sys.argv[1:]
clients, per, fraction, wall = int(clients), int(per), float(fraction), int(wall)
dim = {"cnn": 215370, "mlp": 784 * 200 + 200 + 200 * 10 + 10}[model]
r = json.load(open(report))
peak_kb, hwm_kb, procs = (int(v) for v in open(mem).read().split())
rows = r["rounds"]
asked = math.ceil(fraction * clients - 1e-9)
print(f"{clients} clients, {per} per process, {len(rows)} rounds, {wall} s")
print(f"peak memory of all processes (sampled each second): {peak_kb / 1024**2:.2f} GiB; "
      f"sum of their own peaks: {hwm_kb / 1024**2:.2f} GiB over {procs} processes")
ok = len(rows) == r["config"]["rounds"]
for row in rows:
    once = row["raw_uplink_bytes"] == 4 * dim * row["participants"]
    print(f"round {row['round']}: accuracy {row['accuracy']:.4f}, participants "
          f"{row['participants']} of {asked} asked, stragglers {row['stragglers']}, "
          f"{row['seconds']:.1f} s, every coordinate of every update once: {once}")
    ok &= row["participants"] == asked and row["stragglers"] == 0 and once
print("PASS: every round committed, every asked client counted once" if ok else "FAIL")
sys.exit(0 if ok else 1)
PY
