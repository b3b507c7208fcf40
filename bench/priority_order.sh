#!/usr/bin/env bash
# P3's point under a deadline: 8 clients on all of Fashion-MNIST (CNN, IID, 30 local steps
# per round, seed 1), each behind its own 1 Mbit/s link with 50 ms delay, float32 updates in
# 16 KiB chunks (error feedback keeps what did not count) and 4-bit deltas down, with a round
# timeout that closes rounds while the uploads are still running, so part of every update
# is cut off. Runs the same job with the chunks leaving in coordinate order
# (--upload-order index) and by decoded energy per byte (--upload-order magnitude) and
# prints a markdown table: final accuracy, the mean of the last five rounds, the share of
# all coordinates asked for that counted, and the wall seconds. ROUNDS (default 20),
# TIMEOUT (seconds, default 9), LINK (default rate=1mbit,delay=50ms), ONLY=<order> runs one;
# JSON reports go into OUT (default build/bench-priority). About 4 minutes per order.
#   bench/priority_order.sh [OUT] [extra fedlgc-sim flags...]
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-build/bench-priority}
shift || true
mkdir -p "$out"
orders=(index magnitude)
for order in "${orders[@]}"; do
  if [ -n "${ONLY:-}" ] && [ "$ONLY" != "$order" ]; then continue; fi
  rm -rf "$out/$order.run"
  ./build/bin/fedlgc-sim --clients 8 --rounds "${ROUNDS:-20}" --model cnn --train-limit 0 \
    --local-steps 30 --seed 1 --link "${LINK:-rate=1mbit,delay=50ms}" --codec fp32 --downlink-codec fp32 \
    --chunk-bytes 16384 --downlink-codec 'qsgd(bits=4,norm=linf)' \
    --round-timeout "${TIMEOUT:-9}" --min-clients 8 --upload-order "$order" --quiet \
    --run-dir "$out/$order.run" --report "$out/$order.json" "$@" | tail -1
done
python3 - "$out" "${orders[@]}" <<'PY'
import json, os, sys
out, orders = sys.argv[1], sys.argv[2:]
print("| upload order | final accuracy | mean of last 5 | coordinates counted | "
      "updates cut | wall s |")
print("|---|---|---|---|---|---|")
for o in orders:
    path = f"{out}/{o}.json"
    if not os.path.exists(path):
        continue
    r = json.load(open(path))
    rounds, clients = r["rounds"], r["config"]["clients"]
    # Every client downloads the model's worth (fp32-equivalent) in some round.
    dim = max(x["raw_downlink_bytes"] for x in rounds) // 4 // clients
    asked = sum(4 * dim * clients for _ in rounds)
    counted = sum(x["raw_uplink_bytes"] for x in rounds)
    cut = sum(x["stragglers"] for x in rounds)
    last5 = [x["accuracy"] for x in rounds[-5:]]
    print(f"| `{o}` | {100*r['summary']['final_accuracy']:.2f}% | "
          f"{100*sum(last5)/len(last5):.2f}% | {100*counted/asked:.1f}% | "
          f"{cut} of {clients*len(rounds)} | {r['summary']['wall_seconds']:.0f} |")
PY
