"""fedlgc-sim's Python clients (fedlgc-sim --python-client FILE.py): each client of a
simulated federation runs your training loop through fedlgc.run_client, on its shard as
a C++ client would read and split it.

    python3 -m fedlgc.sim --file FILE.py --config client-0.json [--config client-1.json ...]

FILE.py defines

    def train(module, info):      # required: info is a fedlgc.RoundInfo; info.data is
        ...                       # this client's Shard (x, y tensors); return the samples
                                  # or {"samples": n, "loss": x}
    def evaluate(module, info):   # optional (federated evaluation, --eval clients|both):
        ...                       # info.data is the held-out Shard; return {"examples": n,
                                  # "loss": x, "accuracy": a} or None
    def statistics(module, info): # optional (--bn-stats on): info is a
        ...                       # fedlgc.StatisticsInfo, info.data this client's Shard;
                                  # return fedlgc.reestimate_statistics(module, batches)
                                  # or None
    def model():                  # optional: the module to train (by default the job's
        ...                       # TorchScript file, or the built-in model scripted)

Several clients share a process (--config given several times), each on a thread of its
own; their training runs one at a time where libtorch holds the interpreter. A client
whose loop raises ends its process with the error, which fedlgc-sim reports.
"""

import argparse
import dataclasses
import importlib.util
import json
import os
import sys
import threading
import traceback

import torch

import fedlgc
from fedlgc import _fedlgc


@dataclasses.dataclass
class Shard:
    """A client's examples: x [n, ...] (float32, or int64 token ids) and y (int64 class
    labels, or float32 targets), as torch tensors on the CPU; classes (0 for targets)."""
    x: torch.Tensor
    y: torch.Tensor
    classes: int
    source: str

    def __len__(self):
        return int(self.y.shape[0])


def load_user_file(path):
    """The user's module from FILE.py, checked for what the runner calls."""
    spec = importlib.util.spec_from_file_location("fedlgc_user_loop", path)
    if spec is None or spec.loader is None:
        raise SystemExit(f"--python-client {path}: not a Python file")
    user = importlib.util.module_from_spec(spec)
    sys.path.insert(0, os.path.dirname(os.path.abspath(path)))
    spec.loader.exec_module(user)
    if not callable(getattr(user, "train", None)):
        raise SystemExit(f"--python-client {path}: it defines no train(module, info)")
    for name in ("evaluate", "statistics", "model"):
        if hasattr(user, name) and not callable(getattr(user, name)):
            raise SystemExit(f"--python-client {path}: {name} is not a function")
    return user


def shard_of(config):
    keys = ("data", "data_dir", "label_column", "targets", "inputs", "train_limit", "shard",
            "num_shards", "partition", "partition_seed", "eval_data")
    got = _fedlgc.load_shard({k: config[k] for k in keys if k in config},
                             float(config.get("eval_fraction", 0.0)))
    train = Shard(torch.from_numpy(got["x"]), torch.from_numpy(got["y"]), int(got["classes"]),
                  got["source"])
    held = None
    if "eval_x" in got:
        held = Shard(torch.from_numpy(got["eval_x"]), torch.from_numpy(got["eval_y"]),
                     int(got["classes"]), got["source"])
    return train, held


def module_of(user, config):
    if hasattr(user, "model"):
        return user.model()
    return torch.jit.load(config["module_file"], map_location="cpu")


def run_one(user, config, errors):
    try:
        train, held = shard_of(config)
        module = module_of(user, config)
        tls = None
        if not config.get("insecure"):
            tls = fedlgc.Tls(config["tls_ca"], config["tls_cert"], config["tls_key"])
        history = fedlgc.run_client(
            module, user.train, server=config["server"], client_id=config["client_id"],
            num_samples=len(train) + (len(held) if held is not None and
                                      not config.get("eval_data") else 0),
            tls=tls, insecure=bool(config.get("insecure")), state_dir=config["state_dir"],
            model_file=config.get("model_file", ""), linger=float(config.get("linger", 0)),
            evaluate=getattr(user, "evaluate", None), data=train, eval_data=held,
            statistics=getattr(user, "statistics", None))
        print(f"{config['client_id']}: trained {len(history)} rounds", flush=True)
    except BaseException:  # noqa: BLE001 (reported, and the process fails)
        errors.append(f"{config.get('client_id', '?')}: {traceback.format_exc()}")


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python3 -m fedlgc.sim")
    ap.add_argument("--file", required=True, help="the training loop: FILE.py")
    ap.add_argument("--config", action="append", required=True,
                    help="a client's options (JSON, written by fedlgc-sim)")
    a = ap.parse_args(argv)
    user = load_user_file(a.file)
    configs = []
    for path in a.config:
        with open(path) as f:
            configs.append(json.load(f))
    torch.set_num_threads(int(configs[0].get("torch_threads", 1)))
    errors = []
    threads = [threading.Thread(target=run_one, args=(user, c, errors), daemon=True,
                                name=c["client_id"]) for c in configs]
    for t in threads:
        t.start()
    for t in threads:
        while t.is_alive():
            t.join(0.25)
            if errors:
                break
        if errors:
            break
    if errors:
        sys.stderr.write("".join(errors))
        sys.stderr.flush()
        os._exit(1)  # the other clients' threads are the C++ client's: end them all
    return 0


if __name__ == "__main__":
    sys.exit(main())
