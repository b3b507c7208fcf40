#!/usr/bin/env python3
"""Plots bench/dp.sh's runs: test accuracy after each round, one line per run.

  bench/plot_dp.py OUT.png LABEL=REPORT.json [LABEL=REPORT.json ...]
"""
import json
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def main(argv):
    out, runs = argv[1], argv[2:]
    fig, ax = plt.subplots(figsize=(7, 4.2))
    for run in runs:
        label, path = run.rsplit("=", 1)
        rows = json.load(open(path))["rounds"]
        ax.plot([r["round"] for r in rows], [100 * r["accuracy"] for r in rows], label=label,
                marker="." if "none" in label else None)
    ax.set_xlabel("round")
    ax.set_ylabel("test accuracy (%, first 2,000 examples)")
    ax.set_title("DP-FedAvg on 1,000 CNN clients, a tenth asked each round (delta 1e-5)")
    ax.grid(alpha=0.3)
    ax.set_ylim(40, 90)
    ax.legend(fontsize=8, loc="lower right")
    fig.tight_layout()
    fig.savefig(out, dpi=110)


if __name__ == "__main__":
    main(sys.argv)
