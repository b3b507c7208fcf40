#!/usr/bin/env bash
# Fashion-MNIST FedAvg with each codec under the same seed: 8 clients IID, 20 rounds,
# 1 local epoch, the full training set. Prints a markdown table and writes one JSON
# report per codec into OUT (default build/bench-fedavg). About 9-10 minutes per codec
# on the 2-core build machine; ONLY=<name> runs one (e.g. ONLY=topk1_ef_q8_warm). Once the
# table in docs/results.md is updated, bench/plot_fedavg_codecs.py redraws docs/fedavg_codecs.png.
#   bench/fedavg_codecs.sh [OUT] [extra fedlgc-sim flags...]
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-build/bench-fedavg}
shift || true
mkdir -p "$out"
topk="topk(ratio=0.01,values=qsgd(bits=8))"
# DGC-style sparsity warm-up: rounds 1-3 send 10%, 5%, 2%, then 1% (residuals carry over).
warm="topk(ratio=0.1,values=qsgd(bits=8));topk(ratio=0.05,values=qsgd(bits=8))"
warm="$warm;topk(ratio=0.02,values=qsgd(bits=8))"
# PowerSGD's rank warm-up: rounds 1-3 at rank 16, 8, 4, then 2 (4 power iterations each).
pwarm="powersgd(rank=16,iters=4);powersgd(rank=8,iters=4);powersgd(rank=4,iters=4)"
codecs=("fp32" "fp16" "qsgd(bits=8)" "qsgd(bits=4)" "$topk" "$topk" "adacomp(bin=50)"
  "dgc(ratio=0.001,momentum=0.9)" "dgc(ratio=0.001)" "topk(ratio=0.01,values=natdither(s=8))"
  "powersgd(rank=1)" "powersgd(rank=2)" "powersgd(rank=4)" "alq(bits=3)" "amq(bits=3)"
  "qsgd(bits=3)" "gradiveq(dims=8,slice=64,refit=10)" "gradiveq(dims=4,slice=64,refit=20)"
  "powersgd(rank=2,iters=4)" "powersgd(rank=2,iters=4)" "randk(ratio=0.01,scale=0)"
  "randk(ratio=0.01,scale=0,seed=round)" "powersgd(rank=2,phases=2)" "powersgd(rank=4,phases=2)"
  "powersgd(rank=2,phases=2)" "terngrad" "terngrad(shared=1)")
warmups=("" "" "" "" "" "$warm" "" "" "" "" "" "" "" "" "" "" "" "" "" "$pwarm" "" "" "" ""
  "$pwarm" "" "")
names=(fp32 fp16 qsgd8 qsgd4 topk1_ef_q8 topk1_ef_q8_warm adacomp50 dgc01_m09 dgc01 topk1_ef_nd8
  psgd1 psgd2 psgd4 alq3 amq3 qsgd3 gvq8 gvq4 psgd2_i4 psgd2_i4_warm randk1_ef randk1_ef_shared
  psgd2_2p psgd4_2p psgd2_2p_warm terngrad terngrad_shared)
for i in "${!codecs[@]}"; do
  if [ -n "${ONLY:-}" ] && [ "$ONLY" != "${names[$i]}" ]; then continue; fi
  ./build/bin/fedlgc-sim --clients 8 --rounds 20 --local-epochs 1 --train-limit 0 --seed 1 \
    --codec "${codecs[$i]}" --codec-warmup "${warmups[$i]}" --downlink-codec fp32 --quiet \
    --report "$out/${names[$i]}.json" "$@" | tail -1
done
python3 - "$out" "${names[@]}" <<'PY'
import json, sys
out, names = sys.argv[1], sys.argv[2:]
import os
runs = {n: json.load(open(f"{out}/{n}.json")) for n in names if os.path.exists(f"{out}/{n}.json")}
names = [n for n in names if n in runs]
base = runs[names[0]]["summary"]
print("| codec (client adds error feedback; dgc and powersgd keep their own) | warm-up rounds | final accuracy | uplink bytes | fewer bytes than fp32 | wall s |")
print("|---|---|---|---|---|---|")
for n in names:
    s, c = runs[n]["summary"], runs[n]["config"]
    w = c.get("codec_warmup", "")
    w = ", ".join(x.split(",")[0].replace("topk(ratio=", "") for x in w.split(";")) if w else ""
    print(f"| `{c['codec']}` | {w} | {100*s['final_accuracy']:.2f}% | {s['uplink_bytes']:,} | "
          f"{base['uplink_bytes']/s['uplink_bytes']:.1f}x | {s['wall_seconds']:.0f} |")
PY
