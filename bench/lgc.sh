#!/usr/bin/env bash
# LGC's curve: whole-run uplink bytes against accuracy on the project's benchmark (8 clients,
# IID, the whole Fashion-MNIST training set, 20 rounds of 1 local epoch), for float32, 4-bit
# QSGD, top-1% + error feedback (8-bit values) with and without its 10/5/2% warm-up, and LGC
# (compressed from the first round, no warm-up) at each support width and correction width
# tried, with the lossless stage (the default) and with the autoencoder coding. Each run for every seed in SEEDS (default
# "1 2"); accuracy is the mean of the last five rounds, averaged over the seeds (single runs
# move by about a point). Prints a markdown table and writes OUT/lgc_curve.png (accuracy
# against whole-run uplink bytes). Reports already in OUT are kept (RERUN=1 runs again);
# ONLY=<name>[,<name>...] runs those. About 5 minutes a run alone on the 2-core build
# machine.
#   bench/lgc.sh [OUT] [extra fedlgc-sim flags...]
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-build/bench-lgc}
shift || true
mkdir -p "$out"
seeds=${SEEDS:-1 2}
names=()
run() {  # name codec warmup [flags...]
  local name=$1 codec=$2 warm=$3
  shift 3
  names+=("$name")
  if [ -n "${ONLY:-}" ] && [[ ",$ONLY," != *",$name,"* ]]; then return; fi
  for s in $seeds; do
    local report="$out/${name}_s$s.json"
    if [ -f "$report" ] && [ -z "${RERUN:-}" ]; then continue; fi
    echo "== $name seed $s" >&2
    rm -rf "$out/${name}_s$s.run"
    ./build/bin/fedlgc-sim --clients 8 --rounds 20 --local-epochs 1 --train-limit 0 --seed "$s" \
      --codec "$codec" --codec-warmup "$warm" --downlink-codec fp32 --quiet --run-dir "$out/${name}_s$s.run" \
      --report "$report" "$@" | tail -1 >&2
  done
}
q8="values=qsgd(bits=8)"
run fp32 fp32 "" "$@"
run qsgd4 "qsgd(bits=4)" "" "$@"
run top1 "topk(ratio=0.01,$q8)" "" "$@"
run top1_warm "topk(ratio=0.01,$q8)" "topk(ratio=0.1,$q8);topk(ratio=0.05,$q8);topk(ratio=0.02,$q8)" "$@"
# LGC: the leader's support set and cells, followers' miss in `bits` bits, without the
# lossless stage (entropy=0,zstd=0) so the widths compare on the codes alone.
# ramp=N widens the first N rounds' supports (2^N x, halving each round).
for w in ${WIDTHS:-0.03 0.05 0.08}; do
  for b in ${BITS:-1 2}; do
    for r in ${RAMPS:-0 2}; do
      name="lgc_${w}_b$b"
      [ "$r" = 0 ] || name="${name}_r$r"
      run "$name" "lgc(ratio=$w,bits=$b,ramp=$r,entropy=0,zstd=0)" "" "$@"
    done
  done
done
# A 3% support and the default (5%): the same codes, each body packed with zstd
# (entropy=0; the default entropy=1 is measured by bench/lgc_entropy.sh).
run lgcz_0.03_b2 "lgc(ratio=0.03,bits=2,entropy=0)" "" "$@"
run lgcz_0.05_b2 "lgc(ratio=0.05,bits=2,entropy=0)" "" "$@"
# The autoencoder codes the leader's values from round 6 (trained on rounds 1-5's
# rebuilds, 20 steps a round; ae_wait=1 keeps the switch on round 6), in place of the cells.
run lgc_ae_0.03_b2 "lgc(ratio=0.03,bits=2,entropy=0,train=5,ae_steps=20,ae_wait=1)" "" "$@"
# Debian's python3, where apt puts python3-matplotlib (scripts/setup.sh).
"${PYTHON:-/usr/bin/python3}" - "$out" "$seeds" "${names[@]}" <<'PY'
import json, os, sys
out, seeds, names = sys.argv[1], sys.argv[2].split(), sys.argv[3:]
rows = []
for n in names:
    reps = [f"{out}/{n}_s{s}.json" for s in seeds]
    reps = [json.load(open(r)) for r in reps if os.path.exists(r)]
    if not reps:
        continue
    last5 = [sum(r["accuracy"] for r in rep["rounds"][-5:]) / 5 for rep in reps]
    final = [rep["summary"]["final_accuracy"] for rep in reps]
    up = [rep["summary"]["uplink_bytes"] for rep in reps]
    raw = [rep["summary"]["raw_uplink_bytes"] for rep in reps]
    rows.append((n, reps[0]["config"]["codec"], len(reps), sum(last5) / len(last5),
                 min(last5), max(last5), sum(final) / len(final), sum(up) / len(up),
                 sum(raw) / len(raw)))
print("| run | codec | seeds | last 5, mean over seeds (min-max) | final | whole-run uplink bytes | fewer than fp32 |")
print("|---|---|---|---|---|---|---|")
for n, codec, k, l5, lo, hi, fin, up, raw in rows:
    print(f"| {n} | `{codec}` | {k} | {100 * l5:.2f}% ({100 * lo:.2f}-{100 * hi:.2f}) | "
          f"{100 * fin:.2f}% | {up:,.0f} | {raw / up:.0f}x |")
try:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
except ImportError:
    sys.exit(0)
fig, ax = plt.subplots(figsize=(7.5, 4.8))
for n, codec, k, l5, lo, hi, fin, up, raw in rows:
    lgc = n.startswith("lgc")
    ax.errorbar([up], [100 * l5], yerr=[[100 * (l5 - lo)], [100 * (hi - l5)]],
                fmt="o" if lgc else "s", color="tab:red" if lgc else "tab:blue", capsize=3)
    ax.annotate(n, (up, 100 * l5), textcoords="offset points", xytext=(5, 4), fontsize=8)
ax.set_xscale("log")
ax.set_xlabel("uplink bytes over the whole run (8 clients, 20 rounds)")
ax.set_ylabel("test accuracy, mean of the last 5 rounds (%)")
ax.set_title("LGC against top-k + EF, QSGD and fp32 (bars: seeds' range)")
ax.grid(True, which="both", alpha=0.3)
fig.tight_layout()
fig.savefig(f"{out}/lgc_curve.png", dpi=110)
PY
