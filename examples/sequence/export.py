#!/usr/bin/env python3
"""Example (b), a model that is not a CNN: a GRU that classifies time series, on data this
script generates as CSV tables (one column per time step, a `label` column).

Four kinds of signal, 64 steps each, with random phase, frequency, amplitude and noise:
a slow sine, a fast sine, a square wave and a sawtooth. Writes OUT/train.csv,
OUT/test.csv and OUT/gru.pt (scripted, with a loss method of its own: cross entropy with
label smoothing, which fedlgc's clients use in place of --loss).

    export.py OUT [--train N] [--test N] [--seed S]
"""

import argparse
import os

import numpy as np
import torch
from torch import nn

STEPS = 64


class SequenceClassifier(nn.Module):
    def __init__(self, hidden=48, classes=4):
        super().__init__()
        self.gru = nn.GRU(1, hidden, batch_first=True)
        self.head = nn.Linear(hidden, classes)

    def forward(self, x):
        # A CSV row is the series flat: [batch, 64] -> [batch, 64, 1].
        out, _ = self.gru(x.reshape(x.shape[0], -1, 1))
        return self.head(out[:, -1])

    @torch.jit.export
    def loss(self, out, y):
        return nn.functional.cross_entropy(out, y, label_smoothing=0.05)


def signals(n, rng):
    t = np.arange(STEPS) / STEPS
    y = rng.integers(0, 4, n)
    phase = rng.uniform(0, 2 * np.pi, (n, 1))
    amp = rng.uniform(0.5, 1.5, (n, 1))
    slow = rng.uniform(1, 2.5, (n, 1))
    fast = rng.uniform(5, 8, (n, 1))
    wave = np.where(y[:, None] == 0, np.sin(2 * np.pi * slow * t + phase),
           np.where(y[:, None] == 1, np.sin(2 * np.pi * fast * t + phase),
           np.where(y[:, None] == 2, np.sign(np.sin(2 * np.pi * slow * t + phase)),
                    2 * ((slow * t + phase / (2 * np.pi)) % 1) - 1)))
    x = amp * wave + rng.normal(0, 0.3, (n, STEPS))
    return x.astype(np.float32), y


def write_csv(path, x, y):
    header = ",".join(f"t{i}" for i in range(STEPS)) + ",label"
    np.savetxt(path, np.column_stack([x, y]), delimiter=",", header=header, comments="",
               fmt=["%.4f"] * STEPS + ["%d"])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--train", type=int, default=8000)
    ap.add_argument("--test", type=int, default=2000)
    ap.add_argument("--seed", type=int, default=1)
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    rng = np.random.default_rng(a.seed)
    for name, n in (("train", a.train), ("test", a.test)):
        x, y = signals(n, rng)
        write_csv(os.path.join(a.out, f"{name}.csv"), x, y)
    torch.manual_seed(a.seed)
    m = torch.jit.script(SequenceClassifier())
    torch.jit.save(m, os.path.join(a.out, "gru.pt"))
    print(f"{a.out}: train.csv ({a.train} series), test.csv ({a.test}), gru.pt "
          f"({sum(p.numel() for p in m.parameters()):,} parameters)")


if __name__ == "__main__":
    main()
