#!/usr/bin/env bash
# Round time with LGC's autoencoder training beside the rounds (docs/lgc.md, Training off
# the round loop) against the same job with train=0: fedlgc-sim, CLIENTS (4) clients of
# the CNN on Fashion-MNIST, ROUNDS (6) rounds, seed SEED (1), one run each of
#   cells    lgc(ratio=R)                          the compact codes throughout
#   train    lgc(ratio=R,train=T,ae_steps=S)       the trainer beside rounds 1..T
#   nice0    the same with --ae-nice 0             the trainer on an equal footing
#   wait     the same with ae_wait=1               round T + 1 waits for the trainer
# (R: RATIO 0.05, T: TRAIN 3, S: STEPS 20). Prints each run's round seconds, the median
# over the training rounds and over every round against cells', and where the switch fell.
#   bench/lgc_train_time.sh [OUT]
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-build/bench-lgc-train-time}
mkdir -p "$out"
ratio=${RATIO:-0.05}
train=${TRAIN:-3}
steps=${STEPS:-20}
common=(--clients "${CLIENTS:-4}" --rounds "${ROUNDS:-6}" --seed "${SEED:-1}" --quiet
        --eval-limit "${EVAL_LIMIT:-2000}")
sim() {  # name, codec, flags...
  local name=$1 codec=$2
  shift 2
  rm -rf "${out:?}/$name"
  ./build/bin/fedlgc-sim "${common[@]}" --run-dir "$out/$name" --report "$out/$name.json" \
    --codec "$codec" "$@" | tail -1 >/dev/null
}
sim cells "lgc(ratio=$ratio)"
sim train "lgc(ratio=$ratio,train=$train,ae_steps=$steps)"
sim nice0 "lgc(ratio=$ratio,train=$train,ae_steps=$steps)" --ae-nice 0
sim wait "lgc(ratio=$ratio,train=$train,ae_steps=$steps,ae_wait=1)"

/usr/bin/python3 - "$out" "$train" <<'PY'
import json, statistics, sys
out, train = sys.argv[1], int(sys.argv[2])
def rounds(name):
    return json.load(open(f"{out}/{name}.json"))["rounds"]
base = rounds("cells")
base_train = statistics.median(r["seconds"] for r in base[:train])
base_all = statistics.median(r["seconds"] for r in base)
for name in ("cells", "train", "nice0", "wait"):
    rs = rounds(name)
    t = statistics.median(r["seconds"] for r in rs[:train])
    a = statistics.median(r["seconds"] for r in rs)
    stages = "".join(str(int(r.get("lgc_stage", 0))) for r in rs)
    secs = " ".join("%.2f" % r["seconds"] for r in rs)
    print(f"{name:6} rounds {secs}  stages {stages}"
          f"  training rounds median {t:.2f} s (x{t / base_train:.3f})"
          f"  all rounds {a:.2f} s (x{a / base_all:.3f})")
PY
