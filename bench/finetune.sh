#!/usr/bin/env bash
# Only what trains travels (docs/results.md#only-what-trains-travels):
#   personal  a personal head against plain FedAvg on two classes a client: the built-in
#             CNN, 10 clients, ROUNDS (20) rounds of 2 local epochs with SGD lr 0.01 and
#             momentum 0.9 over all of Fashion-MNIST split labels(2,assign=random), float32
#             both ways; each client holds out 20% of its shard and the job is evaluated
#             there (--eval clients: each client evaluates the global model, with its own
#             head under --local-params '^fc2\.', on its own held-out examples; the figure
#             is their example-weighted mean, the mean per-client accuracy)
# SEEDS (default "1"). Each run prints its summary line and writes OUT/<run>_s<seed>.json
# (OUT default build/bench-finetune); bench/runs_table.py fedavg=OUT/fedavg_s1.json
# personal=OUT/personal_s1.json prints them side by side.
#   bench/finetune.sh [personal ...]   (default: personal)
set -euo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-build/bench-finetune}
bin=${BIN:-build/bin}
mkdir -p "$out"
parts=("$@")
[ ${#parts[@]} -gt 0 ] || parts=(personal)
sim() { "$bin/fedlgc-sim" --quiet "$@" | grep -v '^report:'; }

for part in "${parts[@]}"; do
  case "$part" in
  personal)
    for seed in ${SEEDS:-1}; do
      for run in fedavg personal; do
        if [ -n "${ONLY:-}" ] && [ "$ONLY" != "$run" ]; then continue; fi
        local_params=()
        [ "$run" = fedavg ] || local_params=(--local-params '^fc2\.')
        echo "== $run, seed $seed"
        sim --clients 10 --rounds "${ROUNDS:-20}" --seed "$seed" --model cnn \
          --partition 'labels(2,assign=random)' --train-limit 0 --local-epochs 2 \
          --optimizer 'sgd(lr=0.01,momentum=0.9)' --codec fp32 --downlink-codec fp32 \
          --eval clients --eval-fraction 0.2 --max-client-weight 1 --clip-multiplier 0 \
          --guard=false "${local_params[@]}" --run-dir "$out/${run}_s$seed.run" \
          --report "$out/${run}_s$seed.json"
      done
    done
    ;;
  *)
    echo "unknown part $part (personal)" >&2
    exit 2
    ;;
  esac
done
