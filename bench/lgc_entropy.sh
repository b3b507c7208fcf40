#!/usr/bin/env bash
# LGC's learned entropy model over whole runs: the default lgc() (entropy=1: every stage-2
# body range-coded under context-adaptive probabilities) against lgc(entropy=0) (the same
# bodies packed with zstd, the default before), on the CNN benchmark (8 clients, all of
# Fashion-MNIST, 20 rounds of 1 local epoch) and on the 1.2M-parameter ResNet of
# bench/your_model.sh (8 clients, 40 local steps a round, 20 rounds), each for every seed of
# SEEDS (default 1). The coding is lossless, but the leader each round is picked by
# measured link speed, which differs from run to run; cnn_pinned runs the CNN pair with
# client-0 leading every round, so that the two runs are the same training to the bit and
# only their bytes differ. Prints a markdown table per part. About 5 minutes a CNN run and
# 10 a ResNet run on the 2-core build machine.
#   bench/lgc_entropy.sh [cnn|cnn_pinned|resnet ...]   (default: all three)
set -euo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-build/bench-lgc-entropy}
bin=${BIN:-build/bin}
py=${PYTHON:-/usr/bin/python3}
mkdir -p "$out"
parts=("$@")
[ ${#parts[@]} -gt 0 ] || parts=(cnn cnn_pinned resnet)
specs=("lgc()" "lgc(entropy=0)")
names=(entropy zstd)
for part in "${parts[@]}"; do
  args=()
  for s in ${SEEDS:-1}; do
    for i in 0 1; do
      name="${part}_${names[$i]}_s$s"
      report="$out/$name.json"
      args+=("${part} ${specs[$i]} seed $s=$report")
      [ -f "$report" ] && [ -z "${RERUN:-}" ] && continue
      rm -rf "$out/$name.run"
      common=(--clients 8 --rounds 20 --seed "$s" --codec "${specs[$i]}" --codec-warmup ""
              --downlink-codec fp32 --quiet --run-dir "$out/$name.run" --report "$report")
      case "$part" in
      cnn) "$bin/fedlgc-sim" "${common[@]}" --local-epochs 1 --train-limit 0 | grep -v "^report:" ;;
      cnn_pinned)
        "$bin/fedlgc-sim" "${common[@]}" --local-epochs 1 --train-limit 0 --lgc-leader client-0 |
          grep -v '^report:' ;;
      resnet)
        [ -f "$out/resnet.pt" ] || "$py" examples/resnet/export.py "$out/resnet.pt" >/dev/null
        [ -f "$out/data/train.npz" ] || "$py" examples/fashion_npz.py "$out/data" >/dev/null
        "$bin/fedlgc-sim" "${common[@]}" --local-steps 40 --batch 32 --lr 0.05 \
          --model "$out/resnet.pt" --data "npz:$out/data/train.npz" \
          --test-data "npz:$out/data/test.npz" --eval-limit 5000 --round-timeout 1800 | grep -v "^report:" ;;
      *) echo "unknown part $part" >&2; exit 2 ;;
      esac
    done
  done
  "$py" bench/runs_table.py "${args[@]}" | tee "$out/$part.txt"
done
