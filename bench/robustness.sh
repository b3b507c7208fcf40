#!/usr/bin/env bash
# One lying client of eight on Fashion-MNIST (CNN, IID, 20,000 training examples, one local
# epoch per round, 8-bit QSGD), over the real protocol: the liar (client-7) sends its update
# x100, sign-flipped, or replaced by Gaussian noise (std 1 per coordinate). Each attack runs
# with the default defences (clipping at 3x the lower median norm, the model guard) and
# with none (--clip-multiplier 0 --guard=false); the honest run is the reference. With
# ROBUST=1 it adds the sign-flip run under each robust aggregator. Prints a markdown table
# (final accuracy, its distance from the honest run, clipped updates, guard refusals,
# quarantined clients) and writes one JSON report per run into OUT (default
# build/bench-robustness). About 3-4 minutes per run on the 2-core build machine; ONLY=<name>
# runs one; BIN=<dir> takes the binaries from elsewhere (default build/bin).
#   bench/robustness.sh [OUT] [extra fedlgc-sim flags...]
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-build/bench-robustness}
shift || true
mkdir -p "$out"
bin=${BIN:-build/bin}
rounds=${ROUNDS:-15}
common=(--clients 8 --rounds "$rounds" --model cnn --train-limit 20000 --local-epochs 1
        --seed 1 --quiet --bin-dir "$bin" --downlink-codec fp32)
run() {  # name, then fedlgc-sim flags (each run starts from a fresh folder)
  local name=$1
  shift
  if [ -n "${ONLY:-}" ] && [ "$ONLY" != "$name" ]; then return; fi
  echo "== $name" >&2
  rm -rf "$out/$name.run" "$out/$name.json"
  "$bin/fedlgc-sim" "${common[@]}" --run-dir "$out/$name.run" --report "$out/$name.json" "$@" \
    | grep -v '^report:' >&2
}
none=(--clip-multiplier 0 --guard=false)
run honest "$@"
for attack in "scale(factor=100)" "signflip(factor=1)" "noise(std=1)"; do
  tag=${attack%%(*}
  run "${tag}_defended" --byzantine 1 --attack "$attack" "$@"
  run "${tag}_undefended" --byzantine 1 --attack "$attack" "${none[@]}" "$@"
done
if [ "${ROBUST:-0}" = 1 ]; then
  for agg in median "trimmed_mean(trim=0.125)" "krum(f=1,select=4)" "bulyan(f=1)"; do
    run "signflip_${agg%%(*}" --byzantine 1 --attack "signflip(factor=1)" --aggregator "$agg" "$@"
  done
fi
python3 - "$out" <<'PY'
import json, os, sys
out = sys.argv[1]
names = ["honest"] + [f"{a}_{d}" for a in ("scale", "signflip", "noise")
                      for d in ("defended", "undefended")] + \
        [f"signflip_{a}" for a in ("median", "trimmed_mean", "krum", "bulyan")]
runs = {n: json.load(open(f"{out}/{n}.json")) for n in names if os.path.exists(f"{out}/{n}.json")}
if not runs:
    sys.exit(0)
base = runs["honest"]["summary"]["final_accuracy"] if "honest" in runs else None
print("| run | attack | aggregator | defences | final accuracy | vs honest | best | clipped updates | guard refusals | quarantined |")
print("|---|---|---|---|---|---|---|---|---|---|")
for n in names:
    if n not in runs:
        continue
    s, c, rs = runs[n]["summary"], runs[n]["config"], runs[n]["rounds"]
    acc = s["final_accuracy"]
    best = max(r["accuracy"] for r in rs)
    clipped = sum(int(r.get("clipped", 0) or 0) for r in rs)
    refused = sum(1 for r in rs if str(r.get("guard", "passed")).startswith("refused"))
    quarantined = sum(int(r.get("guard_excluded", 0) or 0) for r in rs)
    defences = "none" if c["clip_multiplier"] == 0 and not c["guard"] else \
        f"clip {c['clip_multiplier']:g}x, guard {'on' if c['guard'] else 'off'}"
    vs = f"{100*(acc-base):+.2f} pt" if base is not None else ""
    print(f"| {n} | `{c['attack']}` | `{c['aggregator']}` | {defences} | {100*acc:.2f}% | {vs} | "
          f"{100*best:.2f}% | {clipped} | {refused} | {quarantined} |")
PY
