#!/usr/bin/env python3
"""Pretrains the example's MLP centrally, then writes the federated jobs' files.

The task is split in two: the pretraining part is the first half of the training set with
only its first five classes (T-shirt, trouser, pullover, dress, coat); the fine-tuning part,
which the federation trains on, is the other half with all ten classes (sandals, shirts,
sneakers, bags and ankle boots are new to the model). Writes, into OUT:

  finetune.npz  the fine-tuning part (x uint8 [n, 28, 28], y int64), the clients' data
  full.pt       the pretrained Mlp as TorchScript: full fine-tuning trains all of it
  adapters.pt   the pretrained Mlp with adapters (model.Adapted) as TorchScript: its
                pretrained weights are frozen (requires_grad=False), so only the adapters
                train and travel

--keep-new F keeps that fraction of classes 5-9's examples in pretraining (a milder shift).

    pretrain.py OUT [--keep-new 0] [--hidden 512] [--rank 4] [--head-rank 0] [--scale 1]
                [--epochs 3] [--seed 1]

It reads OUT/train.npz and OUT/test.npz (../fashion_npz.py writes them).
"""

import argparse
import os

import numpy as np
import torch
from torch import nn

from model import Adapted, Mlp


def tensors(x, y):
    """uint8 images and labels as float32 [n, 784] in [0, 1] and int64 tensors."""
    return torch.from_numpy(x.astype(np.float32) / 255).reshape(-1, 784), torch.from_numpy(y)


def accuracy(module, x, y):
    with torch.no_grad():
        return (module(x).argmax(1) == y).float().mean().item()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--hidden", type=int, default=512)
    ap.add_argument("--rank", type=int, default=4)
    ap.add_argument("--head-rank", type=int, default=0,
                    help="the classifier's adapter rank (0: a dense adapter)")
    ap.add_argument("--b-only", action="store_true", help="freeze A at its random start")
    ap.add_argument("--scale", type=float, default=1.0, help="the adapters' scale")
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--keep-new", type=float, default=0.0,
                    help="fraction of classes 5-9's examples kept in pretraining (0: new)")
    a = ap.parse_args()
    torch.manual_seed(a.seed)

    with np.load(os.path.join(a.out, "train.npz")) as f:
        x_all, y_all = f["x"], f["y"]
    half = len(y_all) // 2
    np.savez(os.path.join(a.out, "finetune.npz"), x=x_all[half:], y=y_all[half:])
    x, y = tensors(x_all[:half], y_all[:half])
    pick = torch.Generator().manual_seed(a.seed + 1)
    known = (y < 5) | (torch.rand(len(y), generator=pick) < a.keep_new)
    x, y = x[known], y[known]
    with np.load(os.path.join(a.out, "test.npz")) as f:
        x_test, y_test = tensors(f["x"], f["y"])

    base = Mlp(a.hidden)
    opt = torch.optim.SGD(base.parameters(), lr=0.05, momentum=0.9)
    g = torch.Generator().manual_seed(a.seed)
    for epoch in range(a.epochs):
        order = torch.randperm(len(y), generator=g)
        for i in range(0, len(y), 64):
            batch = order[i:i + 64]
            opt.zero_grad()
            nn.functional.cross_entropy(base(x[batch]), y[batch]).backward()
            opt.step()
    old = y_test < 5
    print(f"pretrained on {len(y):,} examples, {int((y >= 5).sum()):,} of classes 5-9 "
          f"({a.epochs} epochs): test accuracy "
          f"{accuracy(base, x_test[old], y_test[old]):.4f} on those classes, "
          f"{accuracy(base, x_test, y_test):.4f} on all ten; "
          f"fine-tuning part: {len(y_all) - half:,} examples of all ten classes")

    base.eval()
    full = torch.jit.script(base)
    torch.jit.save(full, os.path.join(a.out, "full.pt"))
    adapted = Adapted(base, a.rank, a.head_rank, a.scale, not a.b_only).eval()
    torch.jit.save(torch.jit.script(adapted), os.path.join(a.out, "adapters.pt"))
    trained = sum(p.numel() for p in adapted.parameters() if p.requires_grad)
    head = f"rank {a.head_rank}" if a.head_rank else "a dense one"
    total = sum(p.numel() for p in base.parameters())
    print(f"{a.out}/full.pt: {total:,} parameters, all trained; {a.out}/adapters.pt: "
          f"rank-{a.rank} adapters ({head} on the classifier), {trained:,} trained "
          f"parameters ({total / trained:.1f}x fewer), the {total:,} pretrained ones frozen")


if __name__ == "__main__":
    main()
