#!/usr/bin/env bash
# LGC on Fashion-MNIST against fp32 and top-k + EF at the same k: 8 clients IID, 20 rounds,
# 1 local epoch, the full training set, seed 1 (the setup of bench/fedavg_codecs.sh, whose
# fp32 and top-k reports it reuses when they exist). LGC runs warm up one round with
# top-10% (8-bit values), train the autoencoder for 6 rounds, then compress; one run with
# 8-bit and one with 4-bit latents, both with echo=1 (each client measures how well the
# coordinator rebuilt its update), and the same two with predict=1. Prints a markdown
# table; ~9-10 minutes per run on the 2-core build machine.
#   bench/lgc.sh [OUT] [extra fedlgc-sim flags...]
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-build/bench-fedavg}
shift || true
mkdir -p "$out"
run() {  # name codec warmup
  if [ -f "$out/$1.json" ] && [ -z "${RERUN:-}" ]; then return; fi
  ./build/bin/fedlgc-sim --clients 8 --rounds 20 --local-epochs 1 --train-limit 0 --seed 1 \
    --codec "$2" --codec-warmup "$3" --quiet --report "$out/$1.json" "${@:4}" | tail -1
}
warm="topk(ratio=0.1,values=qsgd(bits=8))"
run fp32 fp32 "" "$@"
run topk1_ef_q8 "topk(ratio=0.01,values=qsgd(bits=8))" "" "$@"
run lgc_q8 "lgc(ratio=0.01,train=6,ae_steps=20,latent=qsgd(bits=8,bucket=64),echo=1)" "$warm" "$@"
run lgc_q4 "lgc(ratio=0.01,train=6,ae_steps=20,latent=qsgd(bits=4,bucket=64),echo=1)" "$warm" "$@"
# predict=1: two-phase rounds on the leader's fresh top-k, predictive coding, exact EF.
pred="lgc(ratio=0.01,train=6,ae_steps=20,innovation=0.1,predict=1"
run lgc_predict_q8 "$pred,latent=qsgd(bits=8,bucket=64))" "$warm" "$@"
run lgc_predict_q4 "$pred,latent=qsgd(bits=4,bucket=64))" "$warm" "$@"
python3 - "$out" <<'PY'
import json, os, sys
out = sys.argv[1]
names = ["fp32", "topk1_ef_q8", "lgc_q8", "lgc_q4", "lgc_predict_q8", "lgc_predict_q4"]
base = json.load(open(f"{out}/fp32.json"))["summary"]["uplink_bytes"]
print("| run | final accuracy | uplink bytes | fewer than fp32 | compressed rounds | AE training s | "
      "reconstruction error, leader / followers | wall s |")
print("|---|---|---|---|---|---|---|---|")
for n in names:
    if not os.path.exists(f"{out}/{n}.json"):
        continue
    s = json.load(open(f"{out}/{n}.json"))["summary"]
    per_round, ae = "", ""
    rs = json.load(open(f"{out}/{n}.json"))["rounds"]
    s3 = [r for r in rs if r.get("lgc_stage") == 3]
    if s3:
        per_round = f"{sum(r['raw_uplink_bytes'] for r in s3) / sum(r['uplink_bytes'] for r in s3):.0f}x"
        ae = f"{sum(r.get('ae_seconds', 0) for r in rs):.0f}"
    err = ""
    if s.get("lgc_leader_error_median", -1) >= 0:
        err = f"{s['lgc_leader_error_median']:.3f} / {s['lgc_follower_error_median']:.3f}"
    print(f"| {n} | {100 * s['final_accuracy']:.2f}% | {s['uplink_bytes']:,} | "
          f"{base / s['uplink_bytes']:.0f}x | {per_round} | {ae} | {err} | "
          f"{s['wall_seconds']:.0f} |")
PY
