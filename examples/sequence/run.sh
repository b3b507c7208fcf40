#!/usr/bin/env bash
# Example (b): a GRU sequence classifier (not a CNN) on time series that export.py writes as
# CSV, federated by 6 C++ clients with a non-IID split (Dirichlet 0.5 over the classes),
# Adam as the local optimizer, top-10% sparsified updates with error feedback. Under two
# minutes on a 2-core machine. ROUNDS, CLIENTS, TRAIN and OUT change it; extra arguments
# go to fedlgc-sim.
#   examples/sequence/run.sh [fedlgc-sim flags...]
set -euo pipefail
cd "$(dirname "$0")"
bin=${FEDLGC_BIN:-../../build/bin}
py=${PYTHON:-python3}
out=${OUT:-out}
"$py" export.py "$out" --train "${TRAIN:-8000}"
"$bin/fedlgc-sim" --model "$out/gru.pt" --data "csv:$out/train.csv" --test-data "csv:$out/test.csv" \
  --clients "${CLIENTS:-6}" --rounds "${ROUNDS:-10}" --partition 'dirichlet(0.5)' \
  --local-epochs 1 --batch 32 --optimizer 'adam(lr=0.01)' \
  --codec 'topk(ratio=0.1,values=qsgd(bits=8))' --downlink-codec 'zstd(qsgd(bits=4,norm=linf))' \
  --report "$out/report.json" "$@"
