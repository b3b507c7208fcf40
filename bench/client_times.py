#!/usr/bin/python3
"""Per-run figures of a fedlgc-sim run folder and its report, side by side: final and
last-5 mean accuracy, and the clients' median local training and round seconds (over every
client and every round but the first). The last run is compared with the first.

    client_times.py NAME=RUN_DIR:REPORT.json [NAME=RUN_DIR:REPORT.json ...]
"""

import glob
import json
import os
import statistics
import sys


def figures(run_dir, report):
    rounds = json.load(open(report))["rounds"]
    acc = [r["accuracy"] for r in rounds]
    train, total = [], []
    for path in glob.glob(os.path.join(run_dir, "clients", "*.rounds.jsonl")):
        per = {}
        for line in open(path):
            r = json.loads(line)
            per.setdefault(r["round"], {}).update(r)
        for n, r in per.items():
            if n >= 2 and "train_seconds" in r:
                train.append(r["train_seconds"])
            if n >= 2 and "round_seconds" in r:
                total.append(r["round_seconds"])
    return {"final": acc[-1], "last5": statistics.mean(acc[-5:]),
            "train_s": statistics.median(train), "round_s": statistics.median(total)}


def main():
    runs = []
    for arg in sys.argv[1:]:
        name, paths = arg.split("=", 1)
        run_dir, report = paths.split(":", 1)
        runs.append((name, figures(run_dir, report)))
    print(f"{'run':<12} {'final':>7} {'last-5':>7} {'train s':>8} {'round s':>8}")
    for name, f in runs:
        print(f"{name:<12} {100 * f['final']:>6.2f}% {100 * f['last5']:>6.2f}% "
              f"{f['train_s']:>8.2f} {f['round_s']:>8.2f}")
    if len(runs) > 1:
        (a, fa), (b, fb) = runs[0], runs[-1]
        print(f"{b} against {a}: final {100 * (fb['final'] - fa['final']):+.2f} points, "
              f"last-5 {100 * (fb['last5'] - fa['last5']):+.2f} points, training time "
              f"{fb['train_s'] / fa['train_s']:.3f}x, round time "
              f"{fb['round_s'] / fa['round_s']:.3f}x")


if __name__ == "__main__":
    main()
