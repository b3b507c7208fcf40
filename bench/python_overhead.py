#!/usr/bin/python3
"""What a Python client costs over a C++ one, training excluded: one job of 2 C++ clients
(fedlgc-edge) and 2 Python clients (fedlgc.run_client) on the built-in CNN's architecture
exported to TorchScript, the same local step count, batch and data, 4-bit updates both
ways, over mTLS on 127.0.0.1. Each client's round log has its round time (download,
training, encoding, upload) and its training time (the Python client's: the user's
train() alone, so that moving the weights into and out of the module counts as
overhead). Per client, the median over rounds 2..R of round time less training; then
Python over C++.

    python_overhead.py --bin build/bin --out DIR --data DIR_WITH_TRAIN_AND_TEST_NPZ [--rounds R]
"""

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)

CLIENT = r'''
import sys, numpy as np, torch
from torch import nn
sys.path.insert(0, sys.argv[1])
sys.path.insert(0, sys.argv[8])
import fedlgc
from cnn_model import Cnn
from model import ResNet
server, cid, certs, data, shard, state, _, which = sys.argv[2:10]
Net = Cnn if which == "cnn" else ResNet
torch.set_num_threads(1)
with np.load(data) as f:
    x = torch.from_numpy(f["x"][int(shard)::4].astype(np.float32) / 255).reshape(-1, 1, 28, 28)
    y = torch.from_numpy(f["y"][int(shard)::4].astype(np.int64))
def train(m, info):
    g = torch.Generator().manual_seed(info.seed)
    opt = torch.optim.SGD(m.parameters(), lr=info.lr, momentum=0.9)
    m.train()
    for _ in range(info.local_steps):
        idx = torch.randint(0, len(y), (info.batch_size,), generator=g)
        opt.zero_grad()
        loss = nn.functional.cross_entropy(m(x[idx]), y[idx]) + fedlgc.proximal_term(m, info)
        loss.backward()
        opt.step()
        fedlgc.scaffold_step(m, info, opt)
    return {"samples": info.local_steps * info.batch_size, "loss": loss.item()}
fedlgc.run_client(Net(), train, server=server, client_id=cid, num_samples=len(y),
                  tls=fedlgc.Tls(f"{certs}/ca.pem", f"{certs}/{cid}.pem", f"{certs}/{cid}.key"),
                  state_dir=state)
'''


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--data", required=True)
    ap.add_argument("--rounds", type=int, default=12)
    ap.add_argument("--steps", type=int, default=50)
    ap.add_argument("--model", choices=["cnn", "resnet"], default="cnn",
                    help="the built-in CNN's architecture, or examples/resnet's ResNet")
    a = ap.parse_args()
    a.out, a.data, a.bin = map(os.path.abspath, (a.out, a.data, a.bin))
    subprocess.run(["rm", "-rf", a.out], check=True)
    os.makedirs(a.out)
    resnet_dir = os.path.join(REPO, "examples", "resnet")
    model = os.path.join(a.out, f"{a.model}.pt")
    export = [os.path.join(HERE, "cnn_model.py")] if a.model == "cnn" else \
        [os.path.join(resnet_dir, "export.py")]
    subprocess.run([sys.executable, *export, model], check=True, stdout=subprocess.DEVNULL,
                   cwd=resnet_dir)
    ids = ["cpp-0", "cpp-1", "py-2", "py-3"]
    certs = os.path.join(a.out, "certs")
    subprocess.run([os.path.join(REPO, "scripts", "gen-certs.sh"), certs, *ids], check=True,
                   stdout=subprocess.DEVNULL)
    port = free_port()
    codec = "zstd(qsgd(bits=4,norm=linf))"
    tls = lambda cid: [f"--tls-ca={certs}/ca.pem", f"--tls-cert={certs}/{cid}.pem",
                       f"--tls-key={certs}/{cid}.key"]
    log = lambda name: open(os.path.join(a.out, name + ".log"), "w")
    procs = [subprocess.Popen(
        [f"{a.bin}/fedlgc-coordinator", f"--listen=127.0.0.1:{port}", "--metrics-listen=",
         f"--state-dir={a.out}/coordinator", f"--model={model}",
         f"--test-data=npz:{a.data}/test.npz", "--eval-limit=2000", f"--rounds={a.rounds}",
         "--min-clients=4", f"--local-steps={a.steps}", "--batch=32", f"--codec={codec}",
         f"--downlink-codec={codec}", f"--tls-ca={certs}/ca.pem",
         f"--tls-cert={certs}/server.pem", f"--tls-key={certs}/server.key"],
        stdout=log("coordinator"), stderr=subprocess.STDOUT)]
    clients = os.path.join(a.out, "clients")
    for i, cid in enumerate(ids[:2]):
        procs.append(subprocess.Popen(
            [f"{a.bin}/fedlgc-edge", f"--server=127.0.0.1:{port}", f"--id={cid}",
             f"--state-dir={clients}", f"--data=npz:{a.data}/train.npz", f"--shard={i}",
             "--num-shards=4", "--device=cpu", *tls(cid)], stdout=log(cid),
            stderr=subprocess.STDOUT))
    env = dict(os.environ, PYTHONPATH=os.path.join(os.path.dirname(a.bin), "python"))
    for i, cid in enumerate(ids[2:], start=2):
        procs.append(subprocess.Popen(
            [sys.executable, "-c", CLIENT, HERE, f"127.0.0.1:{port}", cid, certs,
             f"{a.data}/train.npz", str(i), clients, resnet_dir, a.model], stdout=log(cid),
            stderr=subprocess.STDOUT, env=env))
    start = time.time()
    if procs[0].wait(3600) != 0:
        sys.exit(f"the coordinator failed: {a.out}/coordinator.log")
    for p in procs[1:]:
        p.wait(120)
    overhead = {}
    for cid in ids:
        rounds = {}
        with open(os.path.join(clients, f"{cid}.rounds.jsonl")) as f:
            for line in f:
                r = json.loads(line)
                rounds.setdefault(r["round"], {}).update(r)
        per = [r["round_seconds"] - r["train_seconds"] for n, r in sorted(rounds.items())
               if n >= 2 and "round_seconds" in r and "train_seconds" in r]
        train = [r["train_seconds"] for n, r in rounds.items() if n >= 2 and "train_seconds" in r]
        overhead[cid] = (statistics.median(per), statistics.median(train), len(per))
        print(f"{cid}: round less training, median of {len(per)} rounds: {overhead[cid][0]:.3f} s "
              f"(training {overhead[cid][1]:.3f} s)")
    cpp = statistics.mean(overhead[c][0] for c in ids[:2])
    pyc = statistics.mean(overhead[c][0] for c in ids[2:])
    print(f"{a.model}: python client overhead: {pyc:.3f} s a round against {cpp:.3f} s for the C++ client: "
          f"{pyc / cpp:.3f}x ({100 * (pyc / cpp - 1):+.1f}%); {time.time() - start:.0f} s in all")
    json.dump({"overhead": overhead, "ratio": pyc / cpp}, open(os.path.join(a.out, "summary.json"), "w"))


if __name__ == "__main__":
    main()
