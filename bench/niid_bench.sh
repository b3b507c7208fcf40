#!/usr/bin/env bash
# Li et al. 2022's non-IID benchmark on Fashion-MNIST, as Flower Baselines' niid_bench runs
# it, reproduced with fedlgc (docs/results.md#non-iid-fashion-mnist-against-a-published-table):
# the CNN of bench/niid_cnn.py through --model (its weights drawn from the run's seed), 10
# clients all in every round, ROUNDS (50) rounds of 10 local epochs, batch 64, SGD lr 0.01,
# momentum 0.9, weight decay 1e-5 (a fresh optimizer each round), the coordinator's
# weighted mean of the clients' models (no weight cap, no clipping, no model guard), all of
# Fashion-MNIST, the whole test set after every round; a run's figure is its best round's
# accuracy.
#   fp32        float32 both ways on the three splits: iid, dirichlet(0.5) with the
#               reference's minimum of 10 and balance cap, two classes a client (#C=2)
#   algorithms  FedProx (mu=MU, default 0.01) and SCAFFOLD on dirichlet(0.5), float32
#   codecs      lgc() and top-1% + EF (its warm-up), float32 down and top-5% deltas down, on
#               dirichlet(0.5) and #C=2; and the targets' budgets: top-1.5% + EF up (about
#               100x fewer bytes than float32), float32 down (top1_5), and top-3% + EF up
#               with top-7% deltas down (each direction above 30x; top3_down7)
# SEEDS (default "1") lists the seeds: each seeds the model's weights, the partition and the
# clients. Each run prints its summary line and writes OUT/<split>_<run>_s<seed>.json
# (OUT default build/bench-niid); bench/niid_table.py prints the table against the
# reference. A run of 50 rounds takes about 50 minutes on 2 cores.
#   bench/niid_bench.sh [fp32|algorithms|codecs ...]   (default: fp32)
set -euo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-build/bench-niid}
bin=${BIN:-build/bin}
py=${PYTHON:-/usr/bin/python3}
mkdir -p "$out"
parts=("$@")
[ ${#parts[@]} -gt 0 ] || parts=(fp32)
declare -A split=(
  [iid]="iid"
  [dir05]="dirichlet(alpha=0.5,min=10,balance=1)"
  [c2]="labels(2,assign=random)"
)
top="topk(ratio=0.01,values=qsgd(bits=8))"
# The compressed downlink: the model's deltas as top-5% with 8-bit values (error feedback
# at the coordinator), which cost nothing on Dirichlet(0.5) where 1-bit signs and 2-bit QSGD
# did (docs/results.md, the screening runs). Those runs give each client the model file
# (--clients-have-model, as an app ships its model): its weights are version 0, so no
# client downloads the model whole and the downlink ratio is the deltas'.
down="topk(ratio=0.05,values=qsgd(bits=8))"
warm="topk(ratio=0.1,values=qsgd(bits=8));topk(ratio=0.05,values=qsgd(bits=8));topk(ratio=0.02,values=qsgd(bits=8))"
# The budgets of the targets: about 100x up, float32 down; each direction above 30x.
top1_5="topk(ratio=0.015,values=qsgd(bits=8))"
top3="topk(ratio=0.03,values=qsgd(bits=8))"
warm3="topk(ratio=0.1,values=qsgd(bits=8));topk(ratio=0.05,values=qsgd(bits=8))"
down7="topk(ratio=0.07,values=qsgd(bits=8))"

# run SPLIT NAME SEED [fedlgc-sim flags...]
run() {
  local s=$1 name=$2 seed=$3
  shift 3
  local tag="${s}_${name}_s${seed}"
  if [ -n "${ONLY:-}" ] && [[ "$tag" != *"$ONLY"* ]]; then return; fi
  [ -f "$out/niid_cnn_$seed.pt" ] || "$py" bench/niid_cnn.py "$out/niid_cnn_$seed.pt" "$seed"
  echo "== $tag"
  "$bin/fedlgc-sim" --quiet --clients 10 --rounds "${ROUNDS:-50}" --local-epochs 10 --batch 64 \
    --lr 0.01 --optimizer 'sgd(momentum=0.9,weight_decay=0.00001)' --train-limit 0 \
    --max-client-weight 1 --clip-multiplier 0 --guard=false --round-timeout 7200 \
    --model "$out/niid_cnn_$seed.pt" \
    --partition "${split[$s]}" --seed "$seed" --run-dir "$out/$tag.run" \
    --report "$out/$tag.json" "$@" | grep -E '^final accuracy'
}

for part in "${parts[@]}"; do
  for seed in ${SEEDS:-1}; do
    case "$part" in
    fp32)
      for s in iid dir05 c2; do run "$s" fp32 "$seed" --codec fp32 --downlink-codec fp32; done
      ;;
    algorithms)
      run dir05 fedprox "$seed" --codec fp32 --downlink-codec fp32 \
        --algorithm "fedprox(mu=${MU:-0.01})"
      run dir05 scaffold "$seed" --codec fp32 --downlink-codec fp32 --algorithm scaffold
      ;;
    codecs)
      for s in dir05 c2; do
        run "$s" lgc "$seed" --codec 'lgc()' --downlink-codec fp32
        run "$s" top1 "$seed" --codec "$top" --codec-warmup "$warm" --downlink-codec fp32
        run "$s" lgc_down "$seed" --codec 'lgc()' --downlink-codec "$down" --clients-have-model
        run "$s" top1_down "$seed" --codec "$top" --codec-warmup "$warm" --downlink-codec "$down" \
          --clients-have-model
        run "$s" top1_5 "$seed" --codec "$top1_5" --codec-warmup "$warm" --downlink-codec fp32
        run "$s" top3_down7 "$seed" --codec "$top3" --codec-warmup "$warm3" \
          --downlink-codec "$down7" --clients-have-model
      done
      ;;
    *)
      echo "unknown part $part (fp32, algorithms, codecs)" >&2
      exit 2
      ;;
    esac
  done
done
