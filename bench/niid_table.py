#!/usr/bin/python3
"""The table of bench/niid_bench.sh's runs beside Li et al. 2022's (Flower Baselines'
niid_bench, Fashion-MNIST): per split and run, the best round's test accuracy (mean and
standard deviation over the seeds found), the round it came in, the mean of the last five,
uplink and downlink bytes and how many times fewer than float32's, and whether the best lies
within the reference's mean +- 2 std.

    niid_table.py [OUT]   (default build/bench-niid)
"""

import glob
import json
import os
import re
import statistics
import sys

# (split, run) -> (mean, std) in percent, the reference's table.
REFERENCE = {
    ("iid", "fp32"): (89.23, 0.45),
    ("dir05", "fp32"): (88.09, 0.29),
    ("c2", "fp32"): (78.10, 2.51),
    ("dir05", "fedprox"): (88.15, 0.42),
    ("dir05", "scaffold"): (88.44, 0.25),
}
SPLITS = {"iid": "IID", "dir05": "Dirichlet(0.5)", "c2": "#C=2"}


def load_rounds(path):
    """The rounds of a run's report; of a run whose simulator was stopped and whose
    coordinator and clients were started again on its state folder (they go on from the
    checkpoint), the coordinator's rounds.jsonl, its last line for each round."""
    if os.path.exists(path):
        return json.load(open(path))["rounds"]
    log = path[:-5] + ".run/coordinator/rounds.jsonl"
    if not os.path.exists(log):
        return []
    by_round = {}
    for line in open(log):
        r = json.loads(line)
        by_round[r["round"]] = r
    return [by_round[k] for k in sorted(by_round) if by_round[k].get("accuracy") is not None]


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else "build/bench-niid"
    runs = {}
    for path in sorted(set(glob.glob(os.path.join(out, "*_s*.json")) +
                           [d[:-4] + ".json" for d in glob.glob(os.path.join(out, "*_s*.run"))])):
        m = re.match(r"(\w+?)_(\w+)_s(\d+)\.json$", os.path.basename(path))
        if not m:
            continue
        rounds = load_rounds(path)
        if not rounds:
            continue
        acc = [100 * r["accuracy"] for r in rounds]
        best = max(acc)
        runs.setdefault((m[1], m[2]), []).append({
            "seed": int(m[3]), "rounds": len(rounds), "best": best,
            "best_round": rounds[acc.index(best)]["round"],
            "last5": statistics.mean(acc[-5:]),
            "up": sum(r["uplink_bytes"] for r in rounds),
            "down": sum(r["downlink_bytes"] for r in rounds)})
    print("| split | run | seeds | rounds | best (mean +- std) | reference | within 2 std | "
          "best round | last-5 mean | uplink bytes | fewer than fp32 | downlink bytes | "
          "fewer than fp32 |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for (split, name), rs in sorted(runs.items(), key=lambda kv: (list(SPLITS).index(kv[0][0])
                                                                   if kv[0][0] in SPLITS else 9,
                                                                   kv[0][1] != "fp32", kv[0][1])):
        best = [r["best"] for r in rs]
        mean = statistics.mean(best)
        std = statistics.stdev(best) if len(best) > 1 else 0.0
        ref = REFERENCE.get((split, name))
        ref_text = f"{ref[0]:.2f} +- {ref[1]:.2f}" if ref else "-"
        within = ("yes" if abs(mean - ref[0]) <= 2 * ref[1] else "NO") if ref else "-"
        base = runs.get((split, "fp32"))
        up, down = statistics.mean(r["up"] for r in rs), statistics.mean(r["down"] for r in rs)
        up_x = f"{statistics.mean(r['up'] for r in base) / up:.1f}x" if base else "-"
        down_x = f"{statistics.mean(r['down'] for r in base) / down:.1f}x" if base else "-"
        print(f"| {SPLITS.get(split, split)} | {name} | {','.join(str(r['seed']) for r in rs)} | "
              f"{max(r['rounds'] for r in rs)} | {mean:.2f} +- {std:.2f} | {ref_text} | {within} | "
              f"{','.join(str(r['best_round']) for r in rs)} | "
              f"{statistics.mean(r['last5'] for r in rs):.2f} | {up:,.0f} | {up_x} | "
              f"{down:,.0f} | {down_x} |")


if __name__ == "__main__":
    main()
