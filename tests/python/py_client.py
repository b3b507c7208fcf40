"""A Python edge client of the tests: SmallNet trained with its own loop (SGD with the
round's lr, or Adam, plus optional flip augmentation) through fedlgc.run_client, on a shard
of an npz file. Deterministic for a round's seed, so a run can be compared with another.

    py_client.py --server H:P --id ID --state-dir DIR --data TRAIN.npz --shard I
                 --num-shards N --certs DIR [--optimizer sgd|adam] [--augment]
                 [--model-file PATH] [--wrong-model] [--save-final PATH.npz] [--prox]
                 [--scaffold]

--prox adds fedlgc.proximal_term to the loss (FedProx jobs need it); --scaffold calls
fedlgc.scaffold_step after each optimizer step (SCAFFOLD jobs need it).
--save-final writes the module's state_dict() as run_client leaves it (the job's final
global model, with this client's own buffers under --buffers local).
"""

import argparse
import os
import sys

import numpy as np
import torch
from torch import nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import fedlgc  # noqa: E402
from federation import SmallNet  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--server", required=True)
    ap.add_argument("--id", required=True)
    ap.add_argument("--state-dir", required=True)
    ap.add_argument("--data", required=True)
    ap.add_argument("--shard", type=int, default=0)
    ap.add_argument("--num-shards", type=int, default=1)
    ap.add_argument("--certs", required=True)
    ap.add_argument("--optimizer", default="sgd")
    ap.add_argument("--augment", action="store_true")
    ap.add_argument("--model-file", default="")
    ap.add_argument("--wrong-model", action="store_true")
    ap.add_argument("--save-final", default="")
    ap.add_argument("--prox", action="store_true")
    ap.add_argument("--scaffold", action="store_true")
    a = ap.parse_args()
    torch.set_num_threads(1)

    with np.load(a.data) as f:
        x = torch.from_numpy(f["x"].astype(np.float32) / 255.0).reshape(-1, 1, 28, 28)
        y = torch.from_numpy(f["y"].astype(np.int64))
    # The same iid split as the C++ clients' is not needed: a contiguous shard.
    n = len(y)
    lo, hi = a.shard * n // a.num_shards, (a.shard + 1) * n // a.num_shards
    x, y = x[lo:hi], y[lo:hi]

    module = SmallNet()
    if a.wrong_model:
        module.fc2 = nn.Linear(48, 7)

    def train(m, info):
        g = torch.Generator().manual_seed(info.seed)
        m.train()
        if a.optimizer == "adam":
            opt = torch.optim.Adam(m.parameters(), lr=1e-3)
        else:
            opt = torch.optim.SGD(m.parameters(), lr=info.lr, momentum=0.9)
        steps = info.local_steps or (info.local_epochs * len(y) // info.batch_size)
        losses = []
        for _ in range(steps):
            idx = torch.randint(0, len(y), (info.batch_size,), generator=g)
            xb, yb = x[idx], y[idx]
            if a.augment:
                flip = torch.rand(len(idx), generator=g) < 0.5
                xb = torch.where(flip[:, None, None, None], xb.flip(-1), xb)
            opt.zero_grad()
            loss = nn.functional.cross_entropy(m(xb), yb)
            if a.prox:
                loss = loss + fedlgc.proximal_term(m, info)
            loss.backward()
            opt.step()
            if a.scaffold:
                fedlgc.scaffold_step(m, info, opt)
            losses.append(loss.item())
        return {"samples": steps * info.batch_size, "loss": float(np.mean(losses[-10:]))}

    history = fedlgc.run_client(
        module, train, server=a.server, client_id=a.id, num_samples=len(y),
        tls=fedlgc.Tls(f"{a.certs}/ca.pem", f"{a.certs}/{a.id}.pem", f"{a.certs}/{a.id}.key"),
        state_dir=a.state_dir, model_file=a.model_file, linger=1.0)
    print(f"{a.id}: trained {len(history)} rounds: "
          + ", ".join(f"r{r.round} loss {r.metrics.get('loss', float('nan')):.3f}"
                      for r in history), flush=True)
    if a.save_final:
        np.savez(a.save_final, **{k: v.detach().numpy() for k, v in module.state_dict().items()})


if __name__ == "__main__":
    main()
