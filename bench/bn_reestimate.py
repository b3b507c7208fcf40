#!/usr/bin/python3
"""BatchNorm models under sparse codecs, the statistics re-estimated (bench/bn_reestimate.sh):
for each model a round committed and fedlgc-export wrote, its test accuracy on all of
Fashion-MNIST's test set as handed over, and again after fedlgc.reestimate_statistics on
100 batches of 64 training examples (of the first 20,000, drawn with seed 0, no
augmentation), the statistics then belonging to the weights they sit beside.

    bn_reestimate.py DIR   (reads DIR/<run>-r<round>.pt, prints a Markdown table)
"""

import glob
import gzip
import os
import re
import sys

import numpy as np
import torch

import fedlgc

SRC = "/usr/share/datasets/fashion-mnist"


def read(kind):
    with gzip.open(f"{SRC}/{kind}-images-idx3-ubyte.gz") as f:
        x = np.frombuffer(f.read(), np.uint8, offset=16).reshape(-1, 1, 28, 28)
    with gzip.open(f"{SRC}/{kind}-labels-idx1-ubyte.gz") as f:
        y = np.frombuffer(f.read(), np.uint8, offset=8).astype(np.int64)
    return torch.from_numpy(x.astype(np.float32) / 255), torch.from_numpy(y)


def accuracy(m, x, y):
    m.eval()
    with torch.no_grad():
        return 100 * float(sum((m(x[i:i + 1000]).argmax(1) == y[i:i + 1000]).sum()
                               for i in range(0, len(y), 1000)) / len(y))


def main():
    out = sys.argv[1]
    torch.set_num_threads(1)
    xt, yt = read("t10k")
    xs, _ = read("train")
    xs = xs[:20000]
    g = torch.Generator().manual_seed(0)
    batches = [xs[torch.randint(0, len(xs), (64,), generator=g)] for _ in range(100)]
    print("| run | round | as committed | statistics re-estimated |")
    print("|---|---|---|---|")
    for path in sorted(glob.glob(os.path.join(out, "*-r*.pt"))):
        m = re.match(r"(.+)-r(\d+)\.pt$", os.path.basename(path))
        module = torch.jit.load(path)
        before = accuracy(module, xt, yt)
        fedlgc.reestimate_statistics(module, batches)
        print(f"| {m[1]} | {m[2]} | {before:.2f}% | {accuracy(module, xt, yt):.2f}% |")


if __name__ == "__main__":
    main()
