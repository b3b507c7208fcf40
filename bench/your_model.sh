#!/usr/bin/env bash
# The your-model measurements behind docs/results.md#your-model, each part on its own:
#   cnn       the built-in CNN against the same architecture written in Python and
#             exported to TorchScript (bench/cnn_model.py), 8 clients, all of Fashion-MNIST,
#             20 rounds, seed 1, float32 both ways: accuracy and per-round client time
#   resnet    examples/resnet's 1.2M-parameter ResNet on Fashion-MNIST as npz, 8 clients,
#             ROUNDS rounds of STEPS local steps: fp32, qsgd(bits=4), top-1% + EF with its
#             warm-up, powersgd(rank=4) and lgc() (uplink; float32 downlink), the fp32 run's
#             updates dumped for bench/lgc_probe
#   probe     bench/lgc_probe over those updates at supports of 3 and 5% (RATIOS; each
#             support's autoencoder takes about 30 min of one core)
#   python    the Python client's overhead: 2 C++ and 2 Python clients on one job, the same
#             model and local step, per client the median over rounds of its round time
#             less its training
#   downlink  4 clients, 6 rounds, 8-bit QSGD up: float32 down, qsgd(bits=4) as a new user
#             types it (which runs as norm=linf now), and norm=l2 as it ran before
# Prints a line per run and writes reports into OUT (default build/bench-your-model).
#   bench/your_model.sh [cnn|resnet|probe|python|downlink ...]   (default: all)
set -euo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-build/bench-your-model}
bin=${BIN:-build/bin}
py=${PYTHON:-/usr/bin/python3}
mkdir -p "$out"
parts=("$@")
[ ${#parts[@]} -gt 0 ] || parts=(cnn resnet probe python downlink)
sim() { "$bin/fedlgc-sim" --quiet "$@" | grep -v '^report:'; }

for part in "${parts[@]}"; do
  case "$part" in
  cnn)
    "$py" bench/cnn_model.py "$out/cnn.pt"
    for model in cnn "$out/cnn.pt"; do
      name=$(basename "$model" .pt)
      [ "$model" = cnn ] || name=cnn_pt
      sim --clients 8 --rounds 20 --local-epochs 1 --train-limit 0 --seed 1 --codec fp32 \
        --downlink-codec fp32 --model "$model" --run-dir "$out/$name.run" \
        --report "$out/$name.json"
    done
    "$py" bench/client_times.py "cnn=$out/cnn.run:$out/cnn.json" \
      "cnn.pt=$out/cnn_pt.run:$out/cnn_pt.json" | tee "$out/cnn.txt"
    ;;
  resnet)
    "$py" examples/fashion_npz.py "$out/data" >/dev/null
    "$py" examples/resnet/export.py "$out/resnet.pt"
    top="topk(ratio=0.01,values=qsgd(bits=8))"
    warm="topk(ratio=0.1,values=qsgd(bits=8));topk(ratio=0.05,values=qsgd(bits=8));topk(ratio=0.02,values=qsgd(bits=8))"
    codecs=(fp32 "qsgd(bits=4)" "$top" "powersgd(rank=4)" "lgc()")
    warmups=("" "" "$warm" "" "")
    names=(fp32 qsgd4 top1_warm psgd4 lgc)
    for i in "${!codecs[@]}"; do
      if [ -n "${ONLY:-}" ] && [ "$ONLY" != "${names[$i]}" ]; then continue; fi
      dump=()
      [ "${names[$i]}" != fp32 ] || dump=(--dump-updates "$out/updates")
      sim --clients 8 --rounds "${ROUNDS:-20}" --local-steps "${STEPS:-40}" --batch 32 --lr 0.05 \
        --seed 1 --model "$out/resnet.pt" --data "npz:$out/data/train.npz" \
        --test-data "npz:$out/data/test.npz" --eval-limit "${EVAL_LIMIT:-5000}" \
        --codec "${codecs[$i]}" --codec-warmup "${warmups[$i]}" --downlink-codec fp32 \
        --round-timeout 1800 --run-dir "$out/resnet_${names[$i]}.run" \
        --report "$out/resnet_${names[$i]}.json" "${dump[@]}"
    done
    ;;
  probe)
    "$bin/fedlgc-bench-lgc-probe" "$out/updates" --ratios "${RATIOS:-0.03,0.05}" \
      | tee "$out/probe.txt"
    ;;
  python)
    "$py" examples/fashion_npz.py "$out/data" >/dev/null
    "$py" bench/python_overhead.py --bin "$bin" --out "$out/python" --data "$out/data" \
      --rounds "${ROUNDS_PY:-12}"
    "$py" bench/python_overhead.py --bin "$bin" --out "$out/python_resnet" --data "$out/data" \
      --rounds "${ROUNDS_PY:-12}" --model resnet --steps 10
    ;;
  downlink)
    for dl in fp32 "qsgd(bits=4)" "qsgd(bits=4,norm=l2)"; do
      name=$(echo "downlink_$dl" | tr -c 'a-z0-9\n' '_')
      sim --clients 4 --rounds 6 --seed 1 --codec "qsgd(bits=8)" --downlink-codec "$dl" \
        --run-dir "$out/$name.run" --report "$out/$name.json"
    done
    ;;
  *)
    echo "unknown part $part" >&2
    exit 2
    ;;
  esac
done
