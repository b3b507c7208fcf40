#!/usr/bin/env python3
"""The adapters example's fine-tuning as FedAvg in one Python process, without fedlgc: to try
adapter shapes, learning rates and server momentum in a few minutes before running a shape
over the real protocol (examples/adapters/run.sh). Each of --clients clients takes an equal
IID share of OUT/finetune.npz, and each round every client trains --steps batches of 32
(SGD with momentum 0.9, a fresh optimizer a round) from the global adapters; the server adds
the mean update (with --server-momentum, the momentum of the mean updates). Float32 both
ways: no codec, no error feedback. Prints the test accuracy of every round and the best.
Simpler than the real clients on purpose: batches are drawn with replacement, and the
adapters start from this process's seed, not from adapters.pt. Full fine-tuning in
run.sh's setup wants --lr 0.02.

    adapters_inprocess.py OUT [--model full|adapters] [--rank 4] [--head-rank 0] [--rank1 R]
        [--bias] [--lr 0.05] [--server-momentum 0] [--rounds 20] [--steps 50] [--clients 10]
        [--seed 1]

OUT is examples/adapters/run.sh's folder (finetune.npz, test.npz, full.pt). Measured with it
(docs/results.md, "Fine-tuning with adapters"): rank 16 on fc1, the hidden biases trained,
and one client of 500 steps a round (central fine-tuning).
"""

import argparse
import os
import sys

import numpy as np
import torch
from torch import nn

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "examples",
                                "adapters"))
from model import Adapted, LoRALinear, Mlp  # noqa: E402
from pretrain import accuracy, tensors  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--model", choices=("full", "adapters"), default="adapters")
    ap.add_argument("--rank", type=int, default=4)
    ap.add_argument("--head-rank", type=int, default=0, help="0: a dense classifier adapter")
    ap.add_argument("--rank1", type=int, default=0, help="fc1's own rank (0: --rank)")
    ap.add_argument("--bias", action="store_true", help="train fc1's and fc2's biases too")
    ap.add_argument("--lr", type=float, default=0.05)
    ap.add_argument("--server-momentum", type=float, default=0.0)
    ap.add_argument("--rounds", type=int, default=20)
    ap.add_argument("--steps", type=int, default=50)
    ap.add_argument("--clients", type=int, default=10)
    ap.add_argument("--seed", type=int, default=1)
    a = ap.parse_args()
    torch.manual_seed(a.seed)
    torch.set_num_threads(1)
    with np.load(os.path.join(a.out, "finetune.npz")) as f:
        x, y = tensors(f["x"], f["y"])
    with np.load(os.path.join(a.out, "test.npz")) as f:
        x_test, y_test = tensors(f["x"], f["y"])
    base = Mlp()
    base.load_state_dict(torch.jit.load(os.path.join(a.out, "full.pt")).state_dict())
    if a.model == "full":
        model = base
    else:
        model = Adapted(base, a.rank, a.head_rank)
        if a.rank1:
            model.fc1 = LoRALinear(base.fc1, a.rank1, 1.0)
        for layer in (model.fc1, model.fc2) if a.bias else ():
            layer.bias.requires_grad_(True)
    trained = [p for p in model.parameters() if p.requires_grad]
    print(f"{a.model}: {sum(p.numel() for p in trained):,} trained values", flush=True)
    order = torch.randperm(len(y), generator=torch.Generator().manual_seed(7))
    shards = torch.tensor_split(order, a.clients)
    g = torch.Generator().manual_seed(a.seed)
    momentum = [torch.zeros_like(p) for p in trained]
    best = 0.0
    for r in range(1, a.rounds + 1):
        start = [p.detach().clone() for p in trained]
        mean = [torch.zeros_like(p) for p in trained]
        for shard in shards:
            with torch.no_grad():
                for p, s in zip(trained, start):
                    p.copy_(s)
            opt = torch.optim.SGD(trained, lr=a.lr, momentum=0.9)
            for _ in range(a.steps):
                batch = shard[torch.randint(0, len(shard), (32,), generator=g)]
                opt.zero_grad()
                nn.functional.cross_entropy(model(x[batch]), y[batch]).backward()
                opt.step()
            with torch.no_grad():
                for m, p, s in zip(mean, trained, start):
                    m += (p - s) / len(shards)
        with torch.no_grad():
            for p, s, m, v in zip(trained, start, mean, momentum):
                v.mul_(a.server_momentum).add_(m)
                p.copy_(s + v)
        acc = 100 * accuracy(model, x_test, y_test)
        best = max(best, acc)
        print(f"round {r}: {acc:.2f}%", flush=True)
    print(f"best {best:.2f}%")


if __name__ == "__main__":
    main()
