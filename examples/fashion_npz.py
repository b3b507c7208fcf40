#!/usr/bin/env python3
"""Writes Fashion-MNIST (Debian's dataset-fashion-mnist) as the npz files fedlgc reads:
OUT/train.npz and OUT/test.npz, each with x (uint8 images, n x 28 x 28) and y (int64
labels). Any data of yours goes the same way: numpy.savez(path, x=..., y=...).

    fashion_npz.py OUT_DIR [--train N] [--test N]
"""

import argparse
import gzip
import os

import numpy as np

SRC = "/usr/share/datasets/fashion-mnist"


def read(kind, n):
    with gzip.open(f"{SRC}/{kind}-images-idx3-ubyte.gz") as f:
        x = np.frombuffer(f.read(), np.uint8, offset=16).reshape(-1, 28, 28)
    with gzip.open(f"{SRC}/{kind}-labels-idx1-ubyte.gz") as f:
        y = np.frombuffer(f.read(), np.uint8, offset=8).astype(np.int64)
    return (x[:n], y[:n]) if n else (x, y)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--train", type=int, default=0, help="first N training examples (0: all)")
    ap.add_argument("--test", type=int, default=0, help="first N test examples (0: all)")
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    for name, kind, n in (("train", "train", a.train), ("test", "t10k", a.test)):
        x, y = read(kind, n)
        np.savez(os.path.join(a.out, f"{name}.npz"), x=x, y=y)
        print(f"{a.out}/{name}.npz: x {x.shape} {x.dtype}, y {y.shape}")


if __name__ == "__main__":
    main()
