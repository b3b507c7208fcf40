#!/usr/bin/env python3
"""Example (c): your own PyTorch training loop as a fedlgc edge client. Adam, random
shifts and flips as augmentation, any device; fedlgc.run_client does the rest (joins,
downloads the global model into the module, uploads the compressed update, keeps the
residual and the update in flight in STATE_DIR, reconnects, resumes).

    client.py --server HOST:PORT --id ID --certs DIR --data train.npz --shard I --shards N
              [--state-dir DIR] [--device cpu|cuda]
"""

import argparse

import numpy as np
import torch
from torch import nn

import fedlgc
from model import Net


def augment(x, g):
    """Random shifts of up to 2 pixels and horizontal flips, on the batch's device."""
    n = x.shape[0]
    padded = nn.functional.pad(x, (2, 2, 2, 2))
    dx, dy = torch.randint(0, 5, (2,), generator=g).tolist()
    x = padded[:, :, dy:dy + 28, dx:dx + 28]
    flip = (torch.rand(n, generator=g) < 0.5).to(x.device)
    return torch.where(flip[:, None, None, None], x.flip(-1), x)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--server", required=True)
    ap.add_argument("--id", required=True)
    ap.add_argument("--certs", required=True)
    ap.add_argument("--data", required=True)
    ap.add_argument("--shard", type=int, default=0)
    ap.add_argument("--shards", type=int, default=1)
    ap.add_argument("--state-dir", default="state")
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    a = ap.parse_args()

    with np.load(a.data) as f:
        order = np.random.default_rng(0).permutation(len(f["y"]))
        mine = order[a.shard::a.shards]
        x = torch.from_numpy(f["x"][mine].astype(np.float32) / 255).reshape(-1, 1, 28, 28)
        y = torch.from_numpy(f["y"][mine].astype(np.int64))
    module = Net().to(a.device)

    def train(m, info):
        # The round's seed makes the run repeatable; the loop is ours.
        g = torch.Generator().manual_seed(info.seed)
        opt = torch.optim.Adam(m.parameters(), lr=1e-3)
        m.train()
        steps = info.local_steps or info.local_epochs * len(y) // info.batch_size
        losses = []
        for _ in range(steps):
            idx = torch.randint(0, len(y), (info.batch_size,), generator=g)
            xb = augment(x[idx], g).to(a.device)
            yb = y[idx].to(a.device)
            opt.zero_grad()
            loss = nn.functional.cross_entropy(m(xb), yb)
            loss.backward()
            opt.step()
            losses.append(loss.item())
        return {"samples": steps * info.batch_size, "loss": float(np.mean(losses[-10:]))}

    history = fedlgc.run_client(
        module, train, server=a.server, client_id=a.id, num_samples=len(y),
        tls=fedlgc.Tls(f"{a.certs}/ca.pem", f"{a.certs}/{a.id}.pem", f"{a.certs}/{a.id}.key"),
        state_dir=a.state_dir)
    for r in history:
        print(f"{a.id}: round {r.round}: {r.samples} samples, loss {r.metrics['loss']:.3f}, "
              f"{r.seconds:.1f} s")


if __name__ == "__main__":
    main()
