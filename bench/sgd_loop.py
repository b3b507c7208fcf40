"""A Python training loop that does what a C++ client does (bench/python_sim.sh): SGD with
the round's lr and momentum 0.9, a fresh optimizer each round, info.local_steps batches of
info.batch_size drawn by the round's seed, cross entropy, FedProx's term and SCAFFOLD's
correction where the job runs them; so that fedlgc-sim --python-client and C++ clients
train the same thing and their round times differ by the client, not the loop."""

import fedlgc
import torch
from torch import nn


def train(module, info):
    x, y = info.data.x, info.data.y
    g = torch.Generator().manual_seed(info.seed)
    opt = torch.optim.SGD(module.parameters(), lr=info.lr, momentum=0.9)
    module.train()
    total = 0.0
    for _ in range(info.local_steps):
        idx = torch.randint(0, len(y), (info.batch_size,), generator=g)
        opt.zero_grad()
        loss = nn.functional.cross_entropy(module(x[idx]), y[idx])
        loss = loss + fedlgc.proximal_term(module, info)
        loss.backward()
        opt.step()
        fedlgc.scaffold_step(module, info, opt)
        total += loss.item()
    return {"samples": info.local_steps * info.batch_size, "loss": total / info.local_steps}


def evaluate(module, info):
    module.eval()
    with torch.no_grad():
        out = module(info.data.x)
    y = info.data.y
    return {"examples": len(y), "loss": nn.functional.cross_entropy(out, y).item(),
            "accuracy": (out.argmax(1) == y).double().mean().item()}
