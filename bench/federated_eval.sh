#!/usr/bin/env bash
# Federated evaluation against the server's, and what it costs a round: fedlgc-sim on
# Fashion-MNIST, CLIENTS (8) C++ clients, Dirichlet(ALPHA=0.5) shards of TRAIN (20000)
# examples, ROUNDS (10) rounds of STEPS (40) local steps, seed SEED (1):
#   server  --eval server (the test set, as before; nothing held out)
#   both    --eval both --eval-fraction FRACTION (0.1): every client evaluates each round's
#           model on its held-out tenth, the coordinator on the test set
# Prints, per round of `both`, the clients' weighted accuracy, the server's, their
# difference and how many answered; the median difference; and the median round seconds of
# both runs (rounds 2..), with the wait for the answers (federated_eval_seconds).
#   bench/federated_eval.sh [OUT] [extra fedlgc-sim flags...]
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-build/bench-federated-eval}
shift || true
mkdir -p "$out"
common=(--clients "${CLIENTS:-8}" --rounds "${ROUNDS:-10}" --local-steps "${STEPS:-40}"
        --partition "dirichlet(${ALPHA:-0.5})" --train-limit "${TRAIN:-20000}" --seed "${SEED:-1}"
        --codec 'qsgd(bits=8)' --downlink-codec fp32 --quiet --insecure)
for run in ${RUNS:-server both}; do
  case $run in
    server) flags=(--eval server) ;;
    both) flags=(--eval both --eval-fraction "${FRACTION:-0.1}") ;;
    *) echo "unknown run $run" >&2; exit 2 ;;
  esac
  rm -rf "$out/$run"
  build/bin/fedlgc-sim "${common[@]}" "${flags[@]}" --run-dir "$out/$run" \
    --report "$out/$run.json" "$@" >"$out/$run.log"
done
/usr/bin/python3 - "$out" <<'PY'
import json, statistics, sys
out = sys.argv[1]
runs = {name: json.load(open(f"{out}/{name}.json"))["rounds"] for name in ("server", "both")}
print("| round | clients' accuracy | server's | clients - server | answered | wait s |")
print("|---|---|---|---|---|---|")
diffs = []
for r in runs["both"]:
    f = r["federated_eval"]
    d = 100 * (f["accuracy"] - r["accuracy"])
    diffs.append(d)
    print(f"| {r['round']} | {100 * f['accuracy']:.2f}% | {100 * r['accuracy']:.2f}% | "
          f"{d:+.2f} pt | {f['clients']}/{f['asked']} ({f['examples']} examples) | "
          f"{r['federated_eval_seconds']:.3f} |")
print(f"\nmedian |clients - server|: {statistics.median(abs(d) for d in diffs):.2f} points, "
      f"largest {max(abs(d) for d in diffs):.2f}")
med = {name: statistics.median(r["seconds"] for r in rows[1:]) for name, rows in runs.items()}
print(f"median round seconds (rounds 2..): server {med['server']:.2f}, both {med['both']:.2f} "
      f"(x{med['both'] / med['server']:.3f}); final accuracy server-only run "
      f"{100 * runs['server'][-1]['accuracy']:.2f}%, both {100 * runs['both'][-1]['accuracy']:.2f}%")
PY
