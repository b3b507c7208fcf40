#!/usr/bin/env python3
"""Example (c): your own PyTorch training loop as a fedlgc edge client. Adam, random
shifts and flips as augmentation, any device; fedlgc.run_client does the rest (joins,
downloads the global model into the module, uploads the compressed update, keeps the
residual and the update in flight in STATE_DIR, reconnects, resumes).

    client.py --server HOST:PORT --id ID --certs DIR --data train.npz --shard I --shards N
              [--state-dir DIR] [--device cpu|cuda]
"""

import argparse
from types import SimpleNamespace

import numpy as np
import torch

import fedlgc
import loop  # the training loop (loop.py), which fedlgc-sim --python-client runs too


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
    module = loop.model().to(a.device)

    history = fedlgc.run_client(
        module, loop.train, server=a.server, client_id=a.id, num_samples=len(y),
        tls=fedlgc.Tls(f"{a.certs}/ca.pem", f"{a.certs}/{a.id}.pem", f"{a.certs}/{a.id}.key"),
        state_dir=a.state_dir, data=SimpleNamespace(x=x, y=y), statistics=loop.statistics)
    for r in history:
        print(f"{a.id}: round {r.round}: {r.samples} samples, loss {r.metrics['loss']:.3f}, "
              f"{r.seconds:.1f} s")


if __name__ == "__main__":
    main()
