#!/usr/bin/env bash
# Example (d): federated fine-tuning of a pretrained model with adapters. pretrain.py
# trains an MLP centrally on half of Fashion-MNIST's training set, classes 0-4 only, and
# writes it twice: whole (full.pt) and with adapters (rank-4 LoRA on its hidden layers, a
# dense one on its classifier), its pretrained weights frozen (adapters.pt). Then 10 clients
# fine-tune it on the other half, all ten classes, over the real protocol (fedlgc-sim, each
# client given the pretrained file as an app ships its model):
#   full        every parameter trained, float32 both ways (the baseline)
#   adapters    only the adapters trained, float32 both ways
#   compressed  only the adapters, compressed both ways (UP, DOWN)
#   python      as compressed, by Python clients (loop.py through fedlgc-sim --python-client)
# and table.py prints each run's accuracy and whole-run bytes against the baseline; merge.py
# folds the last adapter run's trained adapters into a plain MLP (out/merged.pt) to serve.
# ROUNDS (30), STEPS (50 local steps of 32 examples), CLIENTS (10), UP, DOWN, TRAIN
# (examples of the training set, 0 = all), EPOCHS (of pretraining, 3) and OUT change it;
# arguments after -- go to every fedlgc-sim. About 5 to 8 minutes a run on 2 cores.
#   examples/adapters/run.sh [full adapters compressed python] [-- fedlgc-sim flags...]
set -euo pipefail
cd "$(dirname "$0")"
bin=${FEDLGC_BIN:-../../build/bin}
py=${PYTHON:-/usr/bin/python3}
out=${OUT:-out}
up=${UP:-topk(ratio=0.05,values=qsgd(bits=8))}
down=${DOWN:-topk(ratio=0.05,values=qsgd(bits=8))}
runs=()
while [ $# -gt 0 ] && [ "$1" != -- ]; do runs+=("$1"); shift; done
[ "${1:-}" != -- ] || shift
[ ${#runs[@]} -gt 0 ] || runs=(full adapters compressed python)
mkdir -p "$out"
[ -f "$out/test.npz" ] || "$py" ../fashion_npz.py "$out" --train "${TRAIN:-0}"
[ -f "$out/adapters.pt" ] || "$py" pretrain.py "$out" --epochs "${EPOCHS:-3}"
for run in "${runs[@]}"; do
  case "$run" in
  full) args=(--model "$out/full.pt" --lr 0.02 --codec fp32 --downlink-codec fp32) ;;
  adapters) args=(--model "$out/adapters.pt" --lr 0.05 --codec fp32 --downlink-codec fp32) ;;
  compressed) args=(--model "$out/adapters.pt" --lr 0.05 --codec "$up" --downlink-codec "$down") ;;
  python)
    args=(--model "$out/adapters.pt" --lr 0.05 --codec "$up" --downlink-codec "$down"
      --python-client loop.py --python "$py")
    ;;
  *)
    echo "unknown run $run (full, adapters, compressed, python)" >&2
    exit 2
    ;;
  esac
  echo "== $run"
  "$bin/fedlgc-sim" --quiet "${args[@]}" --data "npz:$out/finetune.npz" \
    --test-data "npz:$out/test.npz" --clients "${CLIENTS:-10}" --rounds "${ROUNDS:-30}" \
    --local-steps "${STEPS:-50}" --batch 32 --clients-have-model \
    --run-dir "$out/$run" --report "$out/$run.json" "$@" | grep -v '^report:'
done
reports=()
last=
for run in full adapters compressed python; do
  [ -f "$out/$run.json" ] || continue
  reports+=("$run=$out/$run.json")
  [ "$run" = full ] || last=$run
done
"$py" table.py "${reports[@]}"
[ -z "$last" ] || "$py" merge.py "$out/$last/model.pt" "$out/test.npz" "$out/merged.pt"
