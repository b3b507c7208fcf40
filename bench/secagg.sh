#!/usr/bin/env bash
# Secure aggregation (--secagg, docs/privacy.md) against the same codes unmasked and against
# plain qsgd(bits=B) (B: BITS, default 4), with fedlgc-sim on Fashion-MNIST, seed SEED (1):
#   bytes     CLIENTS_SMALL (default "4 10") clients, ROUNDS_SMALL (3) rounds of the MLP, one
#             run each of plain, masks=0 and masked: uplink bytes a round, and their ratios
#   overhead  CLIENTS (100) clients hosted in one process, ROUNDS (5) rounds of the MLP with
#             one local step each (so that training does not hide the protocol's cost):
#             median round seconds of plain, masks=0 and masked, and the masked round's
#             phases
#   accuracy  ACC_CLIENTS (10) clients, ACC_ROUNDS (20) rounds of the CNN, plain against
#             masked with quantile=0.5: accuracy each round
# RUNS picks among them (default: all three). Each job's report goes to OUT/<name>.json.
#   bench/secagg.sh [OUT]
#   RUNS=overhead CLIENTS=200 bench/secagg.sh
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-build/bench-secagg}
mkdir -p "$out"
bits=${BITS:-4}
codec="qsgd(bits=$bits)"
clip=${CLIP:-5}
seed=${SEED:-1}
runs=${RUNS:-bytes overhead accuracy}

sim() {  # name, flags...
  local name=$1
  shift
  rm -rf "${out:?}/$name"
  ./build/bin/fedlgc-sim --seed "$seed" --quiet --run-dir "$out/$name" \
    --report "$out/$name.json" "$@" | tail -1 >/dev/null
}

for run in $runs; do
  case $run in
    bytes)
      for n in ${CLIENTS_SMALL:-4 10}; do
        common=(--clients "$n" --rounds "${ROUNDS_SMALL:-3}" --model mlp --local-steps 20
                --codec "$codec")
        sim "bytes-$n-plain" "${common[@]}"
        sim "bytes-$n-codes" "${common[@]}" --secagg "secagg(clip=$clip,masks=0)"
        sim "bytes-$n-masked" "${common[@]}" --secagg "secagg(clip=$clip)"
      done
      ;;
    overhead)
      n=${CLIENTS:-100}
      common=(--clients "$n" --rounds "${ROUNDS:-5}" --model mlp --local-steps 1
              --codec "$codec" --round-timeout 600 --eval-limit "${EVAL_LIMIT:-1000}")
      sim "overhead-plain" "${common[@]}"
      sim "overhead-codes" "${common[@]}" --secagg "secagg(clip=$clip,masks=0)"
      sim "overhead-masked" "${common[@]}" --secagg "secagg(clip=$clip)"
      ;;
    accuracy)
      common=(--clients "${ACC_CLIENTS:-10}" --rounds "${ACC_ROUNDS:-20}" --model cnn
              --codec "$codec" --eval-limit 2000)
      sim "accuracy-plain" "${common[@]}"
      sim "accuracy-masked" "${common[@]}" --secagg "secagg(clip=1,quantile=0.5)"
      ;;
    *) echo "unknown run $run" >&2; exit 2 ;;
  esac
done

/usr/bin/python3 - "$out" $runs <<'PY'
import glob, json, os, statistics, sys
out, runs = sys.argv[1], sys.argv[2:]
def rounds(name):
    return json.load(open(f"{out}/{name}.json"))["rounds"]
if "bytes" in runs:
    print("uplink bytes a round (median), and against plain qsgd")
    for path in sorted(glob.glob(f"{out}/bytes-*-plain.json")):
        n = os.path.basename(path).split("-")[1]
        plain = statistics.median(r["uplink_bytes"] for r in rounds(f"bytes-{n}-plain"))
        for kind in ("codes", "masked"):
            rs = rounds(f"bytes-{n}-{kind}")
            b = statistics.median(r["uplink_bytes"] for r in rs)
            width = rs[0].get("secagg_width_bits", 0)
            print(f"  {n:>4} clients  {kind:6}  {width:2.0f}-bit words  {b:>10.0f} B"
                  f"  plain {plain:>10.0f} B  ratio {b / plain:.3f}")
if "overhead" in runs:
    print("median round seconds (rounds 2 on: the first waits for everyone to join)")
    base = None
    for kind in ("plain", "codes", "masked"):
        rs = rounds(f"overhead-{kind}")
        s = statistics.median(r["seconds"] for r in rs[1:] or rs)
        base = base or s
        extra = ""
        if kind == "masked":
            unmask = statistics.median(r.get("secagg_unmask_s", 0) for r in rs)
            extra = (f"  unmask {unmask:.3f} s, degree {rs[-1].get('secagg_degree', 0):.0f},"
                     f" counted {statistics.median(r['participants'] for r in rs):.0f}")
        print(f"  {kind:6}  {s:7.2f} s  x{s / base:.2f}{extra}")
if "accuracy" in runs:
    print("accuracy by round")
    for kind in ("plain", "masked"):
        rs = rounds(f"accuracy-{kind}")
        acc = [r["accuracy"] for r in rs]
        print(f"  {kind:6}  " + " ".join(f"{a:.3f}" for a in acc)
              + f"  | last 5 {sum(acc[-5:]) / len(acc[-5:]):.4f}")
PY
