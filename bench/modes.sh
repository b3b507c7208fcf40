#!/usr/bin/env bash
# Aggregation modes on Fashion-MNIST under one seed: 8 clients IID, 20 rounds of one local
# epoch each (235 steps of batch 32), the full training set; fedavg, lsgd and sgp, each
# uncompressed and with 4-bit QSGD. FedAvg's rows reuse bench/fedavg_codecs.sh's reports
# (same settings) when they exist. LSGD runs two groups of four with a global pull every
# second round (c = 0.1 for both pulls, as in Teng et al.). Prints a markdown table and
# the SGP mass checks, and writes one JSON report per run into OUT (default
# build/bench-modes). About 9-10 minutes per run on the 2-core build machine; ONLY=<name>
# runs one (e.g. ONLY=sgp_qsgd4).
#   bench/modes.sh [OUT] [extra fedlgc-sim flags...]
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-build/bench-modes}
shift || true
mkdir -p "$out"
fedavg=build/bench-fedavg
groups="client-0,client-1,client-2,client-3;client-4,client-5,client-6,client-7"
common=(--clients 8 --rounds 20 --local-steps 235 --train-limit 0 --seed 1 --quiet --downlink-codec fp32)
run() {  # name, then fedlgc-sim flags
  local name=$1
  shift
  if [ -n "${ONLY:-}" ] && [ "$ONLY" != "$name" ]; then return; fi
  ./build/bin/fedlgc-sim "${common[@]}" --report "$out/$name.json" "$@" | grep -v '^report:'
}
for codec in fp32 "qsgd(bits=4)"; do
  tag=$([ "$codec" = fp32 ] && echo fp32 || echo qsgd4)
  if [ -f "$fedavg/$tag.json" ] && [ -z "${ONLY:-}" ]; then
    cp "$fedavg/$tag.json" "$out/fedavg_$tag.json"
  else
    run "fedavg_$tag" --mode fedavg --codec "$codec" "$@"
  fi
  run "lsgd_$tag" --mode lsgd --codec "$codec" --lsgd-groups "$groups" \
    --lsgd-period 235 --lsgd-global-period 470 "$@"
  run "sgp_$tag" --mode sgp --codec "$codec" "$@"
done
# Two references for LSGD, whose run model is one client's SGD chain: LSGD with the
# period of Teng et al. (64 steps, global 128) over the same local steps (73 x 64), and
# a single client on the whole training set for the same 20 x 235 steps.
run lsgd_fp32_p64 --mode lsgd --codec fp32 --lsgd-groups "$groups" --rounds 73 \
  --local-steps 64 --lsgd-period 64 --lsgd-global-period 128 "$@"
run single_fp32 --mode fedavg --codec fp32 --clients 1 "$@"
python3 - "$out" <<'PY'
import json, os, sys
out = sys.argv[1]
names = ["fedavg_fp32", "lsgd_fp32", "sgp_fp32", "fedavg_qsgd4", "lsgd_qsgd4", "sgp_qsgd4",
         "lsgd_fp32_p64", "single_fp32"]
runs = {n: json.load(open(f"{out}/{n}.json")) for n in names if os.path.exists(f"{out}/{n}.json")}
if not runs:
    sys.exit(0)
base = runs.get("fedavg_fp32", next(iter(runs.values())))["summary"]["final_accuracy"]
print("| run | mode | codec | final accuracy | vs fedavg fp32 | best | uplink bytes | downlink bytes | wall s |")
print("|---|---|---|---|---|---|---|---|---|")
for n in names:
    if n not in runs:
        continue
    s, c, rs = runs[n]["summary"], runs[n]["config"], runs[n]["rounds"]
    best = max(r["accuracy"] for r in rs)
    print(f"| {n} | {c['mode']} | `{c['codec']}` | {100*s['final_accuracy']:.2f}% | "
          f"{100*(s['final_accuracy']-base):+.2f} pt | {100*best:.2f}% | {s['uplink_bytes']:,} | "
          f"{s['downlink_bytes']:,} | {s['wall_seconds']:.0f} |")
print()
print("accuracy per round (the 20-round runs):")
per_round = [n for n in names if n in runs and len(runs[n]["rounds"]) <= 20]
print("| round | " + " | ".join(per_round) + " |")
print("|---|" + "---|" * len(per_round))
for i in range(max(len(runs[n]["rounds"]) for n in per_round)):
    cells = [f"{100*runs[n]['rounds'][i]['accuracy']:.2f}" if i < len(runs[n]["rounds"]) else ""
             for n in per_round]
    print(f"| {i+1} | " + " | ".join(cells) + " |")
for n in ("sgp_fp32", "sgp_qsgd4"):
    if n in runs:
        rs = runs[n]["rounds"]
        print(f"{n} consensus distance per round: " +
              " ".join(f"{r['sgp_consensus_distance']:.3f}" for r in rs))
        m = runs[n].get("sgp_mass")
        if m:
            print(f"{n} mass: |sum x| {m['sum_x_norm']:.4f} = |start {m['start_norm']:.4f} + "
                  f"applied steps {m['steps_norm']:.4f}|, largest coordinate gap "
                  f"{m['max_gap']:.3g}, sum w {m['sum_w']}: "
                  f"{'conserved' if m['conserved'] else 'NOT CONSERVED'}")
PY
