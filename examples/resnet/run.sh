#!/usr/bin/env bash
# Example (a): a 1.2M-parameter ResNet defined in Python (model.py), exported to TorchScript
# (export.py), federated by 8 C++ clients (fedlgc-sim starts them with the coordinator) on
# Fashion-MNIST exported to npz. Compressed both ways: 4-bit updates up, 4-bit model deltas
# down. About a minute a round on a 2-core machine; ROUNDS, CLIENTS, STEPS, TRAIN (examples
# of the training set, 0 = all), CODEC and OUT change it; extra arguments go to fedlgc-sim.
#   examples/resnet/run.sh [fedlgc-sim flags...]
set -euo pipefail
cd "$(dirname "$0")"
bin=${FEDLGC_BIN:-../../build/bin}
py=${PYTHON:-python3}
out=${OUT:-out}
mkdir -p "$out"
"$py" ../fashion_npz.py "$out" --train "${TRAIN:-0}" --test "${TEST:-2000}"
"$py" export.py "$out/resnet.pt"
"$bin/fedlgc-sim" --model "$out/resnet.pt" --data "npz:$out/train.npz" \
  --test-data "npz:$out/test.npz" --clients "${CLIENTS:-8}" --rounds "${ROUNDS:-20}" \
  --local-steps "${STEPS:-25}" --batch 32 --lr 0.05 --codec "${CODEC:-zstd(qsgd(bits=4,norm=linf))}" \
  --downlink-codec "zstd(qsgd(bits=4,norm=linf))" --report "$out/report.json" "$@"
