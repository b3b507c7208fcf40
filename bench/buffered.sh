#!/usr/bin/env bash
# Synchronous against buffered rounds on a population that looks like the edge: fedlgc-sim
# with CLIENTS clients (default 200) hosted PER to a process, each with a 60-example shard of
# Fashion-MNIST split Dirichlet(0.3), each behind a link drawn from
# rate=lognormal(median=RATE,sigma=1),delay=uniform(20ms,200ms) (RATE 5mbit unless given)
# and offline a fifth of the time in stretches of 60 s. Every run has the same seed (SEED,
# 1 unless given: the same population, shards and initial model) and sees about the same
# number of updates:
#   sync      --fraction 0.1 for ROUNDS rounds (a tenth of the connected: about 16 a round)
#   buffered  --rounds-mode buffered(k=K,concurrency=C) for ROUNDS x (C / K) commits
#   kc        buffered(k=C, concurrency=C, refill=commit): every update fresh (a client's
#             place frees only when a commit takes its update), like synchronous rounds
#             but a client gone or past its deadline is replaced rather than waited for
#   kca       buffered with k = concurrency = C, refilled on arrival as FedBuff does (the
#             clients asked after the first ones finish train from a superseded version)
#   ladder    sync, with --codec-ladder LADDER instead of CODEC for all
#   bladder   buffered, with --codec-ladder LADDER
# Every run has a round deadline of TIMEOUT (60) seconds; the ladder picks each client's
# codec to fit it (LADDER_TIMEOUT, default TIMEOUT, for the two ladder runs).
# Each client trains EPOCHS (5) local epochs at LR (0.05) per update; evaluation takes the
# first EVAL_LIMIT (2000) test examples, so that evaluating every commit stays cheap.
# Each run's accuracy after each commit against the seconds since the job started
# (job_seconds) goes into OUT/curves.tsv, and the summary (seconds to each of TARGETS
# accuracy, best and final accuracy and the mean of the last five, staleness quantiles,
# updates by ladder rung) is printed.
#   bench/buffered.sh [OUT] [extra fedlgc-sim flags...]
#   ROUNDS=20 MODEL=mlp TARGETS=0.7 bench/buffered.sh
#   RUNS='sync kc' C=16 SEED=2 bench/buffered.sh   (k = C = the synchronous rounds' 16)
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-build/bench-buffered}
shift || true
mkdir -p "$out"
clients=${CLIENTS:-200}
per=${PER:-50}
rounds=${ROUNDS:-30}
model=${MODEL:-cnn}
k=${K:-10}
c=${C:-20}
targets=${TARGETS:-0.7 0.75 0.8}
codec=${CODEC:-qsgd(bits=8)}
runs=${RUNS:-sync buffered kc}
ladder=${LADDER:-fp32;qsgd(bits=8);qsgd(bits=4);topk(ratio=0.01,values=qsgd(bits=8))}
timeout=${TIMEOUT:-60}
ladder_timeout=${LADDER_TIMEOUT:-$timeout}
link="rate=lognormal(median=${RATE:-5mbit},sigma=1),delay=uniform(20ms,200ms),offline=0.2,offline_mean=60s"
buffered=(--rounds-mode "buffered(k=$k,concurrency=$c,staleness=poly(0.5))"
          --rounds $((rounds * c / k)))
for name in $runs; do
  codecs=(--codec "$codec" --round-timeout "$timeout")
  case $name in
    sync) flags=(--fraction 0.1 --rounds "$rounds") ;;
    buffered) flags=("${buffered[@]}") ;;
    kc) flags=(--rounds-mode "buffered(k=$c,concurrency=$c,staleness=poly(0.5),refill=commit)"
               --rounds "$rounds") ;;
    kca) flags=(--rounds-mode "buffered(k=$c,concurrency=$c,staleness=poly(0.5))"
                --rounds "$rounds") ;;
    ladder) flags=(--fraction 0.1 --rounds "$rounds") ;;
    bladder) flags=("${buffered[@]}") ;;
    *) echo "unknown run $name" >&2; exit 2 ;;
  esac
  case $name in
    ladder | bladder) codecs=(--codec-ladder "$ladder" --round-timeout "$ladder_timeout") ;;
  esac
  rm -rf "$out/$name"
  start=$(date +%s)
  ./build/bin/fedlgc-sim --clients "$clients" --clients-per-process "$per" --model "$model" \
    --data fashion-mnist --train-limit $((clients * 60)) --partition 'dirichlet(0.3)' \
    --local-epochs "${EPOCHS:-5}" --lr "${LR:-0.05}" --eval-limit "${EVAL_LIMIT:-2000}" \
    "${codecs[@]}" --seed "${SEED:-1}" --min-clients $((clients / 2)) \
    --link "$link" --quiet --run-dir "$out/$name" \
    --report "$out/$name.json" "${flags[@]}" "$@" | tail -2
  echo "$name: $(( $(date +%s) - start )) s"
done
/usr/bin/python3 - "$out" "$targets" $runs <<'PY'
import json, sys
out, targets, runs = sys.argv[1], [float(t) for t in sys.argv[2].split()], sys.argv[3:]
with open(f"{out}/curves.tsv", "w") as tsv:
    tsv.write("run\tcommit\tjob_seconds\taccuracy\tstaleness_mean\n")
    print(f"{'run':9} {'commits':>7} {'updates':>7} "
          + " ".join(f"{'s to ' + format(t, '.0%'):>8}" for t in targets)
          + f" {'best':>7} {'final':>7} {'last 5':>7} {'job s':>7} {'staleness p50':>13} {'p90':>5}"
          + "  updates by ladder rung")
    for name in runs:
        rows = [r for r in json.load(open(f"{out}/{name}.json"))["rounds"]]
        evaluated = [r for r in rows if r["accuracy"] >= 0]
        reach, taus, rungs = {}, [], {}
        for r in rows:
            f = r  # the report writes figures flat
            t = f.get("job_seconds", 0.0)
            tsv.write(f"{name}\t{r['round']}\t{t:.2f}\t{r['accuracy']:.4f}\t"
                      f"{f.get('staleness_mean', 0):.3f}\n")
            for target in targets:
                if target not in reach and r["accuracy"] >= target:
                    reach[target] = t
            taus += list(r.get("staleness", {}).values())
            for rung in r.get("codec_rung", {}).values():
                rungs[int(rung)] = rungs.get(int(rung), 0) + 1
        taus.sort()
        p = lambda q: taus[min(len(taus) - 1, int(q * len(taus)))] if taus else 0
        updates = sum(r["participants"] for r in rows)
        print(f"{name:9} {len(rows):7} {updates:7} "
              + " ".join(f"{(f'{reach[t]:.0f}' if t in reach else '-'):>8}" for t in targets)
              + " "
              f"{max(r['accuracy'] for r in evaluated):7.4f} {evaluated[-1]['accuracy']:7.4f} "
              f"{sum(r['accuracy'] for r in evaluated[-5:]) / len(evaluated[-5:]):7.4f} "
              f"{rows[-1].get('job_seconds', 0):7.0f} {p(0.5):13.0f} {p(0.9):5.0f}  "
              + " ".join(f"{i}:{rungs[i]}" for i in sorted(rungs)))
PY
