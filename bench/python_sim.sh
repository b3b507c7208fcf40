#!/usr/bin/env bash
# What fedlgc-sim --python-client costs over C++ clients: the same job (the built-in CNN,
# CLIENTS (8) clients on TRAIN (20000) Fashion-MNIST examples, ROUNDS (8) rounds of STEPS
# (40) SGD steps, 4-bit updates both ways, seed 1) run twice on this machine:
#   cpp     fedlgc-edge clients (one process each)
#   python  --python-client bench/sgd_loop.py (the same SGD loop in Python, four clients a
#           process)
# Prints the median round seconds (rounds 2..) of each and their ratio, the median over
# clients and rounds of a client's round time less its training (download, encode,
# upload, and for Python the weights' moves in and out of the module), and the final
# accuracy of each.
#   bench/python_sim.sh [OUT] [extra fedlgc-sim flags...]
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-build/bench-python-sim}
shift || true
mkdir -p "$out"
common=(--clients "${CLIENTS:-8}" --rounds "${ROUNDS:-8}" --local-steps "${STEPS:-40}"
        --train-limit "${TRAIN:-20000}" --seed 1 --model cnn --quiet --insecure)
for run in ${RUNS:-cpp python}; do
  flags=()
  [ "$run" = python ] && flags=(--python-client bench/sgd_loop.py)
  rm -rf "$out/$run"
  build/bin/fedlgc-sim "${common[@]}" "${flags[@]}" --run-dir "$out/$run" \
    --report "$out/$run.json" "$@" >"$out/$run.log"
done
/usr/bin/python3 - "$out" "${CLIENTS:-8}" <<'PY'
import json, statistics, sys
out, clients = sys.argv[1], int(sys.argv[2])
res = {}
for run in ("cpp", "python"):
    rounds = json.load(open(f"{out}/{run}.json"))["rounds"]
    over = []
    for i in range(clients):
        for line in open(f"{out}/{run}/clients/client-{i}.rounds.jsonl"):
            r = json.loads(line)
            if r.get("round", 0) >= 2 and "round_seconds" in r:
                over.append(r["round_seconds"])
    train = {}
    for i in range(clients):
        for line in open(f"{out}/{run}/clients/client-{i}.rounds.jsonl"):
            r = json.loads(line)
            if r.get("round", 0) >= 2 and "train_seconds" in r:
                train.setdefault((i, r["round"]), r["train_seconds"])
    rs = {}
    for i in range(clients):
        for line in open(f"{out}/{run}/clients/client-{i}.rounds.jsonl"):
            r = json.loads(line)
            if r.get("round", 0) >= 2 and "round_seconds" in r and (i, r["round"]) in train:
                rs[(i, r["round"])] = r["round_seconds"] - train[(i, r["round"])]
    res[run] = (statistics.median(r["seconds"] for r in rounds[1:]),
                statistics.median(rs.values()), rounds[-1]["accuracy"])
    print(f"{run:7s} median round {res[run][0]:.2f} s, client's round less training "
          f"{1000 * res[run][1]:.0f} ms (median of {len(rs)}), final accuracy "
          f"{100 * res[run][2]:.2f}%")
print(f"python / cpp: rounds x{res['python'][0] / res['cpp'][0]:.3f}, "
      f"+{1000 * (res['python'][1] - res['cpp'][1]):.0f} ms a client's round beside training")
PY
