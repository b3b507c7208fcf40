#!/usr/bin/env bash
# Differential privacy at population scale: the noise/accuracy curve of DP-FedAvg
# (docs/privacy.md) on a population of CLIENTS clients (default 1000, PER to a process,
# default 250), each with a 60-example shard of Fashion-MNIST (IID), a FRACTION (0.1) of
# them asked per round (Poisson sampling in DP runs), ROUNDS (30) rounds of EPOCHS (5)
# local epochs at LR (0.05), CODEC (qsgd(bits=8)) updates, seed SEED (1).
# Each run of RUNS is one job:
#   none      FedAvg without DP (the non-private baseline: the same sampling rate, no
#             clipping, no noise)
#   clip      DP-FedAvg's rounds without noise (a multiplier of 1e-9): Poisson sampling, every update cut to norm
#             CLIP and weighed one, the fixed denominator (what clipping alone costs)
#   eps<E>    DP-FedAvg at the target epsilon E over the job (--dp-epsilon E, delta DELTA,
#             default 1e-5): the noise multiplier the accountant solves for
#   z<Z>      DP-FedAvg with noise multiplier Z (--dp-max-epsilon unset: it runs every
#             round and reports what it spent)
# Evaluation takes the first EVAL_LIMIT (2000) test examples after every round. Prints,
# per run, the noise multiplier, the epsilon spent, the best, final and mean of the last
# five accuracies, and writes OUT/curves.tsv (run, round, epsilon, accuracy).
#   bench/dp.sh [OUT] [extra fedlgc-sim flags...]
#   RUNS='none eps8' CLIP=0.5 bench/dp.sh
#   CLIENTS=200 PER=50 ROUNDS=10 RUNS='none eps8' bench/dp.sh   (a smaller population)
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-build/bench-dp}
shift || true
mkdir -p "$out"
clients=${CLIENTS:-1000}
per=${PER:-250}
rounds=${ROUNDS:-30}
fraction=${FRACTION:-0.1}
clip=${CLIP:-0.5}
delta=${DELTA:-1e-5}
runs=${RUNS:-none clip eps16 eps8 eps4 eps2}
for name in $runs; do
  case $name in
    none) dp=() ;;
    clip) dp=(--dp "gaussian(noise=1e-9,clip=$clip)") ;;
    eps*) dp=(--dp "gaussian(clip=$clip)" --dp-epsilon "${name#eps}" --dp-delta "$delta") ;;
    z*) dp=(--dp "gaussian(noise=${name#z},clip=$clip)" --dp-delta "$delta") ;;
    *) echo "unknown run $name" >&2; exit 2 ;;
  esac
  rm -rf "$out/$name"
  start=$(date +%s)
  ./build/bin/fedlgc-sim --clients "$clients" --clients-per-process "$per" \
    --model "${MODEL:-cnn}" --data fashion-mnist --train-limit $((clients * 60)) \
    --local-epochs "${EPOCHS:-5}" --lr "${LR:-0.05}" --eval-limit "${EVAL_LIMIT:-2000}" \
    --codec "${CODEC:-qsgd(bits=8)}" --fraction "$fraction" --rounds "$rounds" \
    --seed "${SEED:-1}" --min-clients "$clients" --join-timeout 600 --quiet --run-dir "$out/$name" \
    --report "$out/$name.json" "${dp[@]}" "$@" | tail -2
  echo "$name: $(( $(date +%s) - start )) s"
done
/usr/bin/python3 - "$out" $runs <<'PY'
import json, statistics, sys
out, runs = sys.argv[1], sys.argv[2:]
with open(f"{out}/curves.tsv", "w") as tsv:
    tsv.write("run\tround\tdp_epsilon\taccuracy\n")
    print(f"{'run':8} {'rounds':>6} {'noise z':>8} {'epsilon':>8} {'per round':>9} "
          f"{'best':>7} {'final':>7} {'last 5':>7} {'clipped':>8} {'median norm':>11}")
    for name in runs:
        rows = json.load(open(f"{out}/{name}.json"))["rounds"]
        acc = [r["accuracy"] for r in rows if r["accuracy"] >= 0]
        for r in rows:
            tsv.write(f"{name}\t{r['round']}\t{r.get('dp_epsilon', 0):.4f}\t{r['accuracy']:.4f}\n")
        norms = [n for r in rows for n in r.get("update_norm", {}).values()]
        clipped = sum(r.get("clipped", 0) for r in rows)
        asked = sum(r.get("dp_sampled", r["participants"]) for r in rows)
        eps = rows[-1].get("dp_epsilon", 0)
        print(f"{name:8} {len(rows):6} {rows[-1].get('dp_noise_multiplier', 0):8.3f} "
              f"{(f'{eps:.3f}' if eps < 1e6 else 'inf'):>8} {asked / len(rows):9.1f} "
              f"{max(acc):7.4f} {acc[-1]:7.4f} {sum(acc[-5:]) / len(acc[-5:]):7.4f} "
              f"{clipped:8.0f} {(f'{statistics.median(norms):.3f}' if norms else '-'):>11}")
PY
