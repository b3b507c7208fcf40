#!/usr/bin/env bash
# Example (c) in one command: the same loop (loop.py: Adam, augmentation, an evaluation on
# each client's held-out examples) for 8 Python clients simulated on this machine by
# fedlgc-sim --python-client, non-IID (Dirichlet 0.5), evaluated on the clients and on the
# test set, the trained model exported to out/sim/model.pt. CLIENTS, ROUNDS, STEPS, TRAIN
# and OUT change it; further fedlgc-sim flags pass through.
#   examples/python_loop/sim.sh [--html report.html ...]
set -euo pipefail
cd "$(dirname "$0")"
bin=${FEDLGC_BIN:-../../build/bin}
py=${PYTHON:-/usr/bin/python3}
out=${OUT:-out}
mkdir -p "$out"
"$py" ../fashion_npz.py "$out" --train "${TRAIN:-20000}" --test 2000
"$py" export.py "$out/net.pt"
exec "$bin/fedlgc-sim" --python-client loop.py --python "$py" --model "$out/net.pt" \
  --data "npz:$out/train.npz" --test-data "npz:$out/test.npz" --clients "${CLIENTS:-8}" \
  --rounds "${ROUNDS:-8}" --local-steps "${STEPS:-60}" --partition 'dirichlet(0.5)' \
  --eval both --run-dir "$out/sim" --report "$out/sim/report.json" "$@"
