#!/usr/bin/python3
"""Accuracy against uplink bytes for the rows of the FedAvg-by-codec table.

Reads the table under "## FedAvg on Fashion-MNIST, by codec" in docs/results.md (the
measured numbers, so the plot and the table cannot disagree) and draws final accuracy
against total uplink bytes on a log axis.

  bench/plot_fedavg_codecs.py [docs/results.md] [docs/fedavg_codecs.png]

Run it with Debian's python3 (/usr/bin/python3), where scripts/setup.sh installs matplotlib.
"""
import re
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def rows(path):
    text = open(path, encoding="utf-8").read()
    section = text.split("## FedAvg on Fashion-MNIST, by codec", 1)[1].split("\n## ", 1)[0]
    out = []
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) != 6 or not cells[1].endswith("%"):
            continue
        label = re.sub(r"\s*\((?:[^()]*;\s*)?\d{4}-\d\d-\d\d\)", "", cells[0]).replace("`", "")
        out.append((label, float(cells[1].rstrip("%")), int(cells[3].replace(",", ""))))
    if not out:
        sys.exit(f"{path}: no rows in the FedAvg-by-codec table")
    return out


def main():
    src = sys.argv[1] if len(sys.argv) > 1 else "docs/results.md"
    dst = sys.argv[2] if len(sys.argv) > 2 else "docs/fedavg_codecs.png"
    data = rows(src)
    fp32 = next(acc for label, acc, _ in data if label == "fp32")
    floor = fp32 - 3.0  # rows below it are drawn on the floor, marked as off the scale
    fig, ax = plt.subplots(figsize=(11, 5.5))
    markers = "osD^v<>pP*Xh"
    for i, (label, acc, nbytes) in enumerate(data):
        shown = max(acc, floor + 0.1)
        text = f"{label}: {acc:.2f}%, {nbytes / 1e6:,.2f} MB"
        if acc < floor:
            text += " (below the axis)"
        ax.scatter(nbytes, shown, s=45, marker=markers[i % len(markers)], zorder=3, label=text)
        if acc < floor:
            ax.annotate("", (nbytes, floor), xytext=(nbytes, floor + 0.5),
                        arrowprops={"arrowstyle": "->", "color": "grey"})
    ax.axhline(fp32, color="grey", lw=0.8, ls="--")
    ax.axhline(fp32 - 1, color="grey", lw=0.8, ls=":")
    ax.set_xscale("log")
    ax.set_xlabel("uplink bytes over 20 rounds, 8 clients (log)")
    ax.set_ylabel("test accuracy after round 20 (%)")
    ax.set_ylim(floor, fp32 + 0.6)
    ax.set_title("FedAvg on Fashion-MNIST by codec (dashed: fp32; dotted: fp32 - 1 point)")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=7, loc="center left", bbox_to_anchor=(1.01, 0.5), frameon=False)
    fig.subplots_adjust(left=0.07, right=0.56, bottom=0.11, top=0.92)
    fig.savefig(dst, dpi=110)
    print(f"plot: {dst} ({len(data)} rows)")


if __name__ == "__main__":
    main()
