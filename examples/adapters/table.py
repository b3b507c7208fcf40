#!/usr/bin/env python3
"""The adapters example's table: for each fedlgc-sim report, the trained values, the best
and final test accuracy, whole-run uplink and downlink bytes, how many times fewer than
the first run's (the baseline's) both ways, and the round and bytes at which the run first
came within 1 point of the baseline's best.

    table.py NAME=REPORT.json [NAME=REPORT.json ...]
"""

import json
import sys


def main():
    runs = []
    for arg in sys.argv[1:]:
        name, path = arg.split("=", 1)
        report = json.load(open(path))
        runs.append((name, report["parameters"]["travel"], report["rounds"]))
    target = 100 * max(r["accuracy"] for r in runs[0][2]) - 1
    base_bytes = None
    print(f"target: {target:.2f}% (within 1 point of {runs[0][0]}'s best)")
    print("| run | trained values | best (round) | final | uplink bytes | downlink bytes | "
          "up + down, fewer than the first | reaches the target | bytes to the target |")
    print("|---|---|---|---|---|---|---|---|---|")
    for name, travel, rounds in runs:
        acc = [100 * r["accuracy"] for r in rounds]
        best = max(range(len(acc)), key=lambda i: acc[i])
        up = sum(r["uplink_bytes"] for r in rounds)
        down = sum(r["downlink_bytes"] for r in rounds)
        base_bytes = base_bytes or up + down
        hit = next((i for i, a in enumerate(acc) if a >= target), None)
        if hit is None:
            reach, to_target = "no", "-"
        else:
            spent = sum(r["uplink_bytes"] + r["downlink_bytes"] for r in rounds[:hit + 1])
            reach, to_target = f"round {rounds[hit]['round']}", f"{spent:,}"
        print(f"| {name} | {travel:,} | {acc[best]:.2f}% ({rounds[best]['round']}) | "
              f"{acc[-1]:.2f}% | {up:,} | {down:,} | {up + down:,} "
              f"({base_bytes / (up + down):,.0f}x) | {reach} | {to_target} |")


if __name__ == "__main__":
    main()
