"""Example (c)'s training loop, as fedlgc-sim --python-client runs it: Adam, random shifts
and flips as augmentation, and an evaluation of the global model on each client's own
held-out examples. One command runs it for a whole simulated federation:

    fedlgc-sim --python-client examples/python_loop/loop.py --model net.pt \\
               --data npz:train.npz --clients 8 --eval both

info.data is the client's shard (x, y tensors) as the C++ clients read and split it;
client.py runs the same loop against a coordinator of your own.
"""

import numpy as np
import torch
from torch import nn

import fedlgc
from model import Net


def model():
    """The module each client trains: model.py's Net (export.py makes the job's file)."""
    return Net()


def images(x):
    """Examples as [n, 1, 28, 28] float32 (an npz's uint8 images come divided by 255)."""
    return x.float().reshape(-1, 1, 28, 28)


def augment(x, g):
    """Random shifts of up to 2 pixels and horizontal flips, on the batch's device."""
    n = x.shape[0]
    padded = nn.functional.pad(x, (2, 2, 2, 2))
    dx, dy = torch.randint(0, 5, (2,), generator=g).tolist()
    x = padded[:, :, dy:dy + 28, dx:dx + 28]
    flip = (torch.rand(n, generator=g) < 0.5).to(x.device)
    return torch.where(flip[:, None, None, None], x.flip(-1), x)


def train(module, info):
    """The round's local steps on info.data; the round's seed makes the run repeatable."""
    x, y = images(info.data.x), info.data.y
    device = next(module.parameters()).device
    g = torch.Generator().manual_seed(info.seed)
    opt = torch.optim.Adam(module.parameters(), lr=1e-3)
    module.train()
    steps = info.local_steps or info.local_epochs * len(y) // info.batch_size
    losses = []
    for _ in range(steps):
        idx = torch.randint(0, len(y), (info.batch_size,), generator=g)
        xb = augment(x[idx], g).to(device)
        yb = y[idx].to(device)
        opt.zero_grad()
        loss = nn.functional.cross_entropy(module(xb), yb)
        # FedProx's term when the job runs --algorithm fedprox(...); 0 otherwise.
        loss = loss + fedlgc.proximal_term(module, info)
        loss.backward()
        opt.step()
        # SCAFFOLD's correction when the job runs --algorithm scaffold; nothing otherwise.
        fedlgc.scaffold_step(module, info, opt)
        losses.append(loss.item())
    return {"samples": steps * info.batch_size, "loss": float(np.mean(losses[-10:]))}


def statistics(module, info):
    """BatchNorm statistics for the committed model (the coordinator's --bn-stats on): up
    to info.batches batches of the client's training examples, shuffled by the phase's
    seed, as train() sees them but without augmentation."""
    x = images(info.data.x)
    device = next(module.parameters()).device
    g = torch.Generator().manual_seed(info.seed)
    order = torch.randperm(len(x), generator=g)[:info.batches * info.batch_size]
    batches = (x[order[i:i + info.batch_size]].to(device)
               for i in range(0, len(order), info.batch_size))
    return fedlgc.reestimate_statistics(module, batches)


def evaluate(module, info):
    """The global model on the client's held-out examples: loss and per-class counts."""
    held = info.data
    if held is None or len(held.y) == 0:
        return None
    device = next(module.parameters()).device
    module.eval()
    with torch.no_grad():
        out = module(images(held.x).to(device)).cpu()
    y = held.y
    hit = out.argmax(1) == y
    classes = max(int(y.max()) + 1, out.shape[1])
    return {"examples": len(y),
            "loss": nn.functional.cross_entropy(out, y).item(),
            "class_examples": torch.bincount(y, minlength=classes).tolist(),
            "class_correct": torch.bincount(y[hit], minlength=classes).tolist()}
