#!/usr/bin/env bash
# The exported model scores what the run's report says: three fedlgc-sim jobs on a
# Fashion-MNIST slice (TRAIN 4000 / TEST 2000 examples as npz, 4 clients, ROUNDS 4 of
# STEPS 30 local steps, float32 both ways), each exporting with --export: the built-in
# cnn; examples/python_loop's Net (BatchNorm, averaged statistics) as a TorchScript file;
# and that Net trained by Python clients (--python-client examples/python_loop/loop.py).
# Each model.pt is then loaded with torch.jit.load in a Python without fedlgc on its path
# and run on test.npz; printed: the report's last-round accuracy, the file's, and the
# difference in points.
#   bench/export_check.sh [OUT]
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-build/bench-export}
mkdir -p "$out"
py=/usr/bin/python3
"$py" examples/fashion_npz.py "$out" --train "${TRAIN:-4000}" --test "${TEST:-2000}" >/dev/null
(cd examples/python_loop && "$py" export.py "../../$out/net.pt" >/dev/null)
common=(--clients 4 --rounds "${ROUNDS:-4}" --local-steps "${STEPS:-30}" --codec fp32
        --downlink-codec fp32 --data "npz:$out/train.npz" --test-data "npz:$out/test.npz"
        --quiet --insecure)
declare -A flags=([cnn]="--model cnn" [module]="--model $out/net.pt"
                  [python]="--model $out/net.pt --python-client examples/python_loop/loop.py")
for run in cnn module python; do
  rm -rf "$out/$run"
  # shellcheck disable=SC2086
  build/bin/fedlgc-sim "${common[@]}" ${flags[$run]} --run-dir "$out/$run" \
    --report "$out/$run/report.json" >"$out/$run.log"
done
env -u PYTHONPATH "$py" - "$out" <<'PY'
import json, sys
import numpy as np, torch
assert "fedlgc" not in sys.modules
out = sys.argv[1]
d = np.load(f"{out}/test.npz")
x = torch.from_numpy(d["x"].astype(np.float32) / 255.0)
y = torch.from_numpy(d["y"].astype(np.int64))
print("| job | report's accuracy (last round) | exported file in plain PyTorch | difference |")
print("|---|---|---|---|")
for run in ("cnn", "module", "python"):
    report = json.load(open(f"{out}/{run}/report.json"))["rounds"][-1]["accuracy"]
    m = torch.jit.load(f"{out}/{run}/model.pt")
    with torch.no_grad():
        got = (m(x).argmax(1) == y).double().mean().item()
    print(f"| {run} | {100 * report:.2f}% | {100 * got:.2f}% | {100 * (got - report):+.2f} pt |")
PY
