#!/usr/bin/env bash
# A BatchNorm model (examples/python_loop's Net: two convolutions with BatchNorm) under
# sparse codecs, its first two rounds as handed over and with its statistics re-estimated
# by fedlgc.reestimate_statistics (docs/your-model.md, Buffers): 4 clients, IID, 1 local
# epoch over the first 20,000 training examples, float32 down; float32, lgc() and top-1%
# + EF up. Prints the table (bench/bn_reestimate.py). About 6 minutes on 2 cores.
#   bench/bn_reestimate.sh   (OUT default build/bench-bn, BIN default build/bin)
set -euo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-build/bench-bn}
bin=${BIN:-build/bin}
py=${PYTHON:-/usr/bin/python3}
mkdir -p "$out"
(cd examples/python_loop && "$py" export.py "$OLDPWD/$out/net.pt")
declare -A codec=([fp32]="fp32" [lgc]="lgc()" [top1]="topk(ratio=0.01,values=qsgd(bits=8))")
for run in fp32 lgc top1; do
  "$bin/fedlgc-sim" --quiet --clients 4 --rounds 2 --local-epochs 1 --train-limit 20000 \
    --model "$out/net.pt" --codec "${codec[$run]}" --downlink-codec fp32 --seed 1 \
    --keep-models 2 --state-dir "$out/$run.run" --report "$out/$run.json" | grep '^final'
  for r in 1 2; do
    "$bin/fedlgc-export" --state-dir "$out/$run.run/coordinator" --round "$r" \
      -o "$out/$run-r$r.pt" > /dev/null
  done
done
PYTHONPATH="$bin/../python${PYTHONPATH:+:$PYTHONPATH}" "$py" bench/bn_reestimate.py "$out"
