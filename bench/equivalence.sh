#!/usr/bin/env bash
# Fixed-seed runs of every mode, for checking that a refactoring changes no numbers: 4
# clients, 4000 training examples, seed 1; FedAvg, LSGD and SGP with fp32 and 4-bit QSGD,
# and LGC (client-0 leading): the compact codes alone, and one warm-up, two rounds of the
# compact codes and two of the autoencoder's latent. SIM names another fedlgc-sim (e.g. an older build's, copied with its
# fedlgc-coordinator and fedlgc-edge). ONLY=<glob> runs the runs it matches (ONLY="lgc*").
# Writes one fedlgc-sim report per run into OUT and prints, per run, each round's
# accuracy, loss (to 5 decimals: older reports kept 6 digits) and uplink bytes. Compare
# two builds with diff <(bench/equivalence.sh A) <(SIM=other/fedlgc-sim bench/equivalence.sh B).
# About 12 minutes on the 2-core build machine. --dp's noise and sample come from OpenSSL's
# generator, so DP runs differ from run to run and are not here.
#   bench/equivalence.sh [OUT] [extra fedlgc-sim flags...]
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-build/equivalence}
shift || true
mkdir -p "$out"
common=(--clients 4 --train-limit 4000 --seed 1 --quiet --downlink-codec fp32)
run() {  # name, then fedlgc-sim flags
  local name=$1
  shift
  if [ -n "${ONLY:-}" ] && [[ "$name" != $ONLY ]]; then return; fi
  "${SIM:-./build/bin/fedlgc-sim}" "${common[@]}" --report "$out/$name.json" "$@" >"$out/$name.log" 2>&1 ||
    { echo "$name failed: see $out/$name.log"; return 1; }
}
for codec in fp32 "qsgd(bits=4)"; do
  tag=$([ "$codec" = fp32 ] && echo fp32 || echo qsgd4)
  run "fedavg_$tag" --mode fedavg --rounds 3 --codec "$codec" "$@"
  run "lsgd_$tag" --mode lsgd --rounds 3 --codec "$codec" --lsgd-period 40 --lsgd-global-period 40 "$@"
  run "sgp_$tag" --mode sgp --rounds 3 --local-steps 40 --codec "$codec" "$@"
done
warm="topk(ratio=0.1,values=qsgd(bits=8))"
# A fixed leader: the best measured link would make the runs depend on timing.
run lgc_cells --rounds 5 --local-steps 40 --lgc-leader client-0 --codec "lgc(ratio=0.03)" "$@"
run lgc_ae --rounds 5 --local-steps 40 --codec-warmup "$warm" --lgc-leader client-0 \
  --codec "lgc(ratio=0.01,train=2,ae_steps=5,innovation=0.1,ae_wait=1)" "$@"
# FedAvg's round protocols (modes/fedavg/round_protocol.h): each alone, and the pairs that
# run together, with the same 4 clients. Buffered rounds take every update each commit
# (k = concurrency) so that no arrival order decides what counts.
seeded="randk(ratio=0.1,values=qsgd(bits=4),seed=round)"
run fedavg_round_seed --rounds 3 --codec "$seeded" "$@"
run fedavg_basis --rounds 4 --codec "gradiveq(dims=4,slice=64,refit=2)" "$@"
run fedavg_shared_scale --rounds 3 --codec "terngrad(shared=1)" "$@"
run fedavg_two_phase --rounds 3 --codec "powersgd(rank=2,phases=2)" "$@"
run fedavg_two_phase_seeded_warmup --rounds 3 --codec-warmup "$seeded" \
  --codec "powersgd(rank=2,phases=2)" "$@"
run fedavg_shared_scale_seeded_warmup --rounds 3 --codec-warmup "$seeded" \
  --codec "terngrad(shared=1)" "$@"
run fedavg_secagg --rounds 3 --codec "qsgd(bits=4)" --secagg "secagg(clip=1)" "$@"
run fedavg_secagg_seeded --rounds 3 --codec "$seeded" --secagg "secagg(clip=1)" "$@"
run fedavg_buffered --rounds 3 --codec "qsgd(bits=4)" --rounds-mode "buffered(k=4,concurrency=4)" "$@"
python3 - "$out" <<'PY'
import json, os, sys
out = sys.argv[1]
for name in sorted(f[:-5] for f in os.listdir(out) if f.endswith(".json")):
    rep = json.load(open(f"{out}/{name}.json"))
    for r in rep["rounds"]:
        print(f"{name} round {r['round']}: accuracy {r['accuracy']:.6f} loss {r['loss']:.5f} "
              f"uplink {r['uplink_bytes']} raw {r['raw_uplink_bytes']}")
PY
