#!/usr/bin/env bash
# BatchNorm models under sparse codecs, their first two rounds as handed over and with
# their statistics re-estimated by fedlgc.reestimate_statistics (docs/your-model.md,
# Buffers); float32 down, seed 1. Prints a table per part (bench/bn_reestimate.py).
#   net     examples/python_loop's Net (two convolutions with BatchNorm): 4 clients, IID,
#           1 local epoch over the first 20,000 training examples; fp32, lgc(), top-1% + EF
#           up (about 6 minutes on 2 cores)
#   resnet  examples/resnet's 1.2M-parameter ResNet as bench/your_model.sh runs it: 8
#           clients, 40 local steps of 32, lr 0.05; fp32, lgc(), top-1% + EF with its
#           warm-up (about 20 minutes)
#   bench/bn_reestimate.sh [net|resnet ...]   (default: net; OUT default build/bench-bn)
set -euo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-build/bench-bn}
bin=${BIN:-build/bin}
py=${PYTHON:-/usr/bin/python3}
mkdir -p "$out"
parts=("$@")
[ ${#parts[@]} -gt 0 ] || parts=(net)
top="topk(ratio=0.01,values=qsgd(bits=8))"
warm="topk(ratio=0.1,values=qsgd(bits=8));topk(ratio=0.05,values=qsgd(bits=8));topk(ratio=0.02,values=qsgd(bits=8))"

# two_rounds PART RUN CODEC WARMUP [fedlgc-sim flags...]: the run and its rounds' models
two_rounds() {
  local part=$1 run=$2 codec=$3 warmup=$4
  shift 4
  "$bin/fedlgc-sim" --quiet --rounds 2 --codec "$codec" --codec-warmup "$warmup" \
    --downlink-codec fp32 --seed 1 --keep-models 2 --run-dir "$out/$part/$run.run" \
    --report "$out/$part/$run.json" "$@" | grep '^final'
  for r in 1 2; do
    "$bin/fedlgc-export" --state-dir "$out/$part/$run.run/coordinator" --round "$r" \
      -o "$out/$part/$run-r$r.pt" > /dev/null
  done
}

for part in "${parts[@]}"; do
  mkdir -p "$out/$part"
  case "$part" in
  net)
    (cd examples/python_loop && "$py" export.py "$OLDPWD/$out/net/model.pt")
    flags=(--clients 4 --local-epochs 1 --train-limit 20000 --model "$out/net/model.pt")
    two_rounds net fp32 fp32 "" "${flags[@]}"
    two_rounds net lgc "lgc()" "" "${flags[@]}"
    two_rounds net top1 "$top" "" "${flags[@]}"
    ;;
  resnet)
    "$py" examples/fashion_npz.py "$out/resnet/data" > /dev/null
    "$py" examples/resnet/export.py "$out/resnet/model.pt"
    flags=(--clients 8 --local-steps 40 --batch 32 --lr 0.05 --model "$out/resnet/model.pt"
      --data "npz:$out/resnet/data/train.npz" --test-data "npz:$out/resnet/data/test.npz"
      --eval-limit 5000 --round-timeout 1800)
    two_rounds resnet fp32 fp32 "" "${flags[@]}"
    two_rounds resnet lgc "lgc()" "" "${flags[@]}"
    two_rounds resnet top1_warm "$top" "$warm" "${flags[@]}"
    ;;
  *)
    echo "unknown part $part (net, resnet)" >&2
    exit 2
    ;;
  esac
  PYTHONPATH="$bin/../python${PYTHONPATH:+:$PYTHONPATH}" "$py" bench/bn_reestimate.py "$out/$part"
done
