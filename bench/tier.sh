#!/usr/bin/env bash
# The aggregator tier against the same job run flat: 8 clients on Fashion-MNIST (IID, the
# whole training set, 1 local epoch, seed 1), under the root directly and under 2 and 4
# aggregators (fedlgc-sim --aggregators). Prints a markdown table of final accuracy, the
# bytes into the root and the bytes the clients sent, and writes one JSON report per run
# into OUT (default build/bench-tier). About 4-5 minutes per run on the 2-core machine.
#   CODEC='qsgd(bits=4)' ROUNDS=10 bench/tier.sh [OUT] [extra fedlgc-sim flags...]
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-build/bench-tier}
shift || true
mkdir -p "$out"
codec=${CODEC:-qsgd(bits=4)}
rounds=${ROUNDS:-10}
for aggregators in 0 2 4; do
  if [ -n "${ONLY:-}" ] && [ "$ONLY" != "$aggregators" ]; then continue; fi
  ./build/bin/fedlgc-sim --clients 8 --aggregators "$aggregators" --rounds "$rounds" \
    --local-epochs 1 --train-limit 0 --seed 1 --codec "$codec" --downlink-codec fp32 --quiet \
    --report "$out/tree$aggregators.json" "$@" | tail -1
done
python3 - "$out" <<'PY'
import json, os, sys
out = sys.argv[1]
runs = [(a, json.load(open(f"{out}/tree{a}.json"))) for a in (0, 2, 4)
        if os.path.exists(f"{out}/tree{a}.json")]
flat = dict(runs).get(0)
print("| tree | final accuracy | vs flat | bytes into the root | clients' uplink bytes | root bytes vs flat | wall s |")
print("|---|---|---|---|---|---|---|")
for a, r in runs:
    s = r["summary"]
    clients = s["aggregators_uplink_bytes"] if a else s["uplink_bytes"]
    rel = ""
    if flat:
        f = flat["summary"]
        rel = f"{100 * (s['final_accuracy'] - f['final_accuracy']):+.2f} pt"
        ratio = f"{f['uplink_bytes'] / s['uplink_bytes']:.2f}x fewer"
    name = "flat (8 clients under the root)" if a == 0 else f"root + {a} aggregators"
    print(f"| {name} | {100 * s['final_accuracy']:.2f}% | {rel} | {s['uplink_bytes']:,} | "
          f"{clients:,} | {ratio if flat else ''} | {s['wall_seconds']:.0f} |")
PY
