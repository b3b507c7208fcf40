#!/usr/bin/python3
"""Draws docs/your_model_resnet.png from bench/your_model.sh's ResNet reports: test accuracy
per round, and against the uplink bytes sent so far, one line per codec.

    plot_your_model.py [REPORT_DIR] [OUT.png]
"""

import json
import os
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

RUNS = [("fp32", "float32"), ("qsgd4", "qsgd(bits=4)"),
        ("top1_warm", "top-1% + EF, warm-up"), ("psgd4", "powersgd(rank=4)"), ("lgc", "lgc()")]


def main():
    src = sys.argv[1] if len(sys.argv) > 1 else "build/bench-your-model"
    out = sys.argv[2] if len(sys.argv) > 2 else "docs/your_model_resnet.png"
    fig, (by_round, by_bytes) = plt.subplots(1, 2, figsize=(11, 4.2))
    for name, label in RUNS:
        path = os.path.join(src, f"resnet_{name}.json")
        if not os.path.exists(path):
            continue
        rounds = json.load(open(path))["rounds"]
        acc = [100 * r["accuracy"] for r in rounds]
        sent, total = [], 0
        for r in rounds:
            total += r["uplink_bytes"]
            sent.append(total / 1e6)
        by_round.plot([r["round"] for r in rounds], acc, marker=".", label=label)
        by_bytes.plot(sent, acc, marker=".", label=label)
    by_round.set(xlabel="round", ylabel="test accuracy (%)",
                 title="ResNet (1.2M parameters), 8 clients, Fashion-MNIST")
    by_bytes.set(xlabel="uplink MB so far (log)", ylabel="test accuracy (%)", xscale="log",
                 title="accuracy against the bytes sent")
    for ax in (by_round, by_bytes):
        ax.grid(alpha=0.3)
        ax.set_ylim(bottom=60)
    by_bytes.legend(loc="lower right", fontsize=8)
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    print(out)


if __name__ == "__main__":
    main()
