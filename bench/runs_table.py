#!/usr/bin/python3
"""A markdown table of fedlgc-sim reports: final and last-5 mean test accuracy, whole-run
uplink bytes, and how many times fewer than the first run's (the baseline's).

    runs_table.py NAME=REPORT.json [NAME=REPORT.json ...]   (NAME may hold "=": the last one splits)
"""

import json
import statistics
import sys


def main():
    rows = []
    for arg in sys.argv[1:]:
        name, path = arg.rsplit("=", 1)
        rounds = json.load(open(path))["rounds"]
        acc = [100 * r["accuracy"] for r in rounds]
        up = sum(r["uplink_bytes"] for r in rounds)
        rows.append((name, len(rounds), acc[-1], statistics.mean(acc[-5:]), up))
    base = rows[0]
    print("| run | rounds | final | last-5 mean | vs first (last-5) | uplink bytes | fewer than first |")
    print("|---|---|---|---|---|---|---|")
    for name, n, final, last5, up in rows:
        print(f"| {name} | {n} | {final:.2f}% | {last5:.2f}% | {last5 - base[3]:+.2f} pt | "
              f"{up:,} | {base[4] / up:.1f}x |")


if __name__ == "__main__":
    main()
