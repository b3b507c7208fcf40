#!/usr/bin/python3
"""Draws docs/lgc_designs.png, the frontier of LGC's learned designs: for each model and
support, the bytes of the 20 replayed rounds against the followers' rebuild error
(fedlgc-bench-lgc-probe's tables: the cells with zstd, with the learned entropy model,
and the learned follower predictor), and whole-run uplink bytes against accuracy
(bench/lgc_entropy.sh's reports: entropy=1 against entropy=0).

    plot_lgc_designs.py CNN_PROBE.txt RESNET_PROBE.txt ENTROPY_BENCH_DIR [OUT.png]
"""

import glob
import json
import os
import re
import statistics
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def cells(line):
    return [c.strip() for c in line.strip().strip("|").split("|")]


def number(text):
    return float(re.match(r"[-+0-9.]+", text).group(0))


def probe(path):
    """{support %: {"zstd": bytes, "entropy": bytes, "err_cells": e, "err_net": e}}."""
    out, cur = {}, None
    for line in open(path):
        m = re.match(r"## support ([0-9.]+)%", line)
        if m:
            cur = out.setdefault(float(m.group(1)), {})
            continue
        if cur is None or not line.startswith("|"):
            continue
        c = cells(line)
        if c[0].startswith("as LGC sends them"):
            cur["zstd"], cur["entropy"] = number(c[1]), number(c[2])
        elif c[0].startswith("leader's cells, least-squares gain"):
            cur["err_cells"] = number(c[2])
        elif c[0] == "learned predictor":
            cur["err_net"] = number(c[2])
    return out


def main():
    cnn, resnet, bench = sys.argv[1:4]
    out = sys.argv[4] if len(sys.argv) > 4 else "docs/lgc_designs.png"
    fig, (left, right) = plt.subplots(1, 2, figsize=(11.5, 4.4))
    for (name, path), colour in zip([("CNN", cnn), ("ResNet", resnet)], ["tab:blue", "tab:red"]):
        for support, d in sorted(probe(path).items()):
            label = f"{name} {support:g}%"
            mark = "o" if support < 4 else "s"
            kb = lambda b: b / 1e3  # noqa: E731
            left.plot([kb(d["zstd"]), kb(d["entropy"])], [d["err_cells"]] * 2, color=colour,
                      marker=mark, linestyle="-", label=f"{label}: cells, zstd -> entropy model")
            left.plot([kb(d["zstd"])], [d["err_net"]], color=colour, marker="x", markersize=9,
                      linestyle="none", label=f"{label}: learned predictor")
    left.set(xlabel="bytes of 20 replayed rounds, 8 clients (KB, log)", xscale="log",
             ylabel="followers' rebuild error |v - sent| / |v|",
             title="the designs at equal bytes (bench/lgc_probe)")
    left.legend(fontsize=6.5)
    for model, colour in [("cnn", "tab:blue"), ("cnn_pinned", "tab:green"),
                          ("resnet", "tab:red")]:
        pair = {}
        for design, mark in [("zstd", "o"), ("entropy", "*")]:
            xs, ys = [], []
            for path in sorted(glob.glob(os.path.join(bench, f"{model}_{design}_s*.json"))):
                rounds = json.load(open(path))["rounds"]
                xs.append(sum(r["uplink_bytes"] for r in rounds) / 1e6)
                ys.append(statistics.mean(100 * r["accuracy"] for r in rounds[-5:]))
            if xs:
                pair[design] = (statistics.mean(xs), statistics.mean(ys))
                right.plot(xs, ys, color=colour, marker=mark, markersize=10, linestyle="none",
                           label=f"{model}: lgc({'' if design == 'entropy' else 'entropy=0'})")
        if len(pair) == 2:
            right.annotate("", xy=pair["entropy"], xytext=pair["zstd"],
                           arrowprops=dict(arrowstyle="->", color=colour))
    right.set(xlabel="whole-run uplink MB (log)", xscale="log",
              ylabel="test accuracy, last-5 mean (%)",
              title="whole runs (bench/lgc_entropy.sh)")
    right.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    print(out)


if __name__ == "__main__":
    main()
