"""Helpers of the Python tests: a real coordinator (fedlgc-coordinator), C++ clients
(fedlgc-edge) and Python clients (py_client.py, which calls fedlgc.run_client) as processes
on 127.0.0.1 over mTLS, a small job model exported to TorchScript, and a Fashion-MNIST
slice as npz files."""

import gzip
import json
import os
import re
import signal
import subprocess
import sys
import time
import urllib.request

import numpy as np
import torch
from torch import nn

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.abspath(os.path.join(HERE, "..", ".."))
BUILD = os.environ.get("FEDLGC_BUILD_DIR", os.path.join(REPO, "build"))
BIN = os.path.join(BUILD, "bin")
FASHION = "/usr/share/datasets/fashion-mnist"


class SmallNet(nn.Module):
    """The job's model in the Python tests: an MLP with batch normalisation (buffers)."""

    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(784, 48)
        self.bn = nn.BatchNorm1d(48)
        self.fc2 = nn.Linear(48, 10)

    def forward(self, x):
        return self.fc2(torch.relu(self.bn(self.fc1(x.flatten(1)))))


def export_model(path, seed=0):
    torch.manual_seed(seed)
    m = torch.jit.script(SmallNet())
    torch.jit.save(m, path)
    return path


def fashion_npz(out_dir, train=2000, test=1000):
    """Fashion-MNIST slices from Debian's files as train.npz and test.npz (uint8 images)."""
    def read(kind, n):
        with gzip.open(f"{FASHION}/{kind}-images-idx3-ubyte.gz") as f:
            x = np.frombuffer(f.read(), np.uint8, offset=16).reshape(-1, 28, 28)[:n]
        with gzip.open(f"{FASHION}/{kind}-labels-idx1-ubyte.gz") as f:
            y = np.frombuffer(f.read(), np.uint8, offset=8)[:n].astype(np.int64)
        return x, y
    paths = {}
    for name, kind, n in (("train", "train", train), ("test", "t10k", test)):
        x, y = read(kind, n)
        paths[name] = os.path.join(out_dir, f"{name}.npz")
        np.savez(paths[name], x=x, y=y)
    return paths


def make_certs(out_dir, names):
    subprocess.run([os.path.join(REPO, "scripts", "gen-certs.sh"), out_dir, *names],
                   check=True, stdout=subprocess.DEVNULL)
    return out_dir


class Proc:
    """A child process with its output in a log file; killed when the test ends."""

    def __init__(self, argv, log, env=None):
        self.log = log
        self.argv = argv
        with open(log, "ab") as f:
            self.p = subprocess.Popen(argv, stdout=f, stderr=subprocess.STDOUT,
                                      env=env, start_new_session=True)

    def wait(self, timeout):
        try:
            return self.p.wait(timeout)
        except subprocess.TimeoutExpired:
            return None

    def kill(self, sig=signal.SIGKILL):
        if self.p.poll() is None:
            os.killpg(self.p.pid, sig)
            self.p.wait(10)

    def tail(self, n=15):
        try:
            with open(self.log, errors="replace") as f:
                return "".join(f.readlines()[-n:])
        except OSError:
            return ""


class Federation:
    """A coordinator and its clients in `work`; stop() ends them all."""

    def __init__(self, work, clients, job_flags, model=None, test_npz=None,
                 coordinator_env=None):
        self.work = work
        self.clients = clients
        self.certs = make_certs(os.path.join(work, "certs"), clients)
        self.state = os.path.join(work, "coordinator")
        # The coordinator picks its ports and writes them down once listening: no port
        # picked here can be taken by another test before it binds.
        port_file = os.path.join(work, "coordinator.port")
        argv = [os.path.join(BIN, "fedlgc-coordinator"), "--listen=127.0.0.1:0",
                "--metrics-listen=127.0.0.1:0", f"--port-file={port_file}",
                f"--state-dir={self.state}",
                f"--tls-ca={self.certs}/ca.pem", f"--tls-cert={self.certs}/server.pem",
                f"--tls-key={self.certs}/server.key", "--torch-threads=1", "--linger=3"]
        if model:
            argv.append(f"--model={model}")
        if test_npz:
            argv.append(f"--test-data=npz:{test_npz}")
        self.port_file = port_file
        # The tests' jobs are float32 both ways unless they name a codec (the coordinator's
        # default compresses both).
        for flag in ("--codec", "--downlink-codec"):
            if not any(f.split("=")[0] == flag for f in job_flags):
                argv.append(f"{flag}=fp32")
        self.coordinator = Proc(argv + job_flags, os.path.join(work, "coordinator.log"),
                                env=None if coordinator_env is None
                                else dict(os.environ, **coordinator_env))
        self.procs = [self.coordinator]
        self.port, self.metrics_port = self._ports(port_file, 120)

    def restart_coordinator(self):
        """A coordinator on the same state folder and port as the one that ended (killed,
        or gone at a failpoint), without that one's extra environment."""
        assert self.coordinator.p.poll() is not None, "the coordinator still runs"
        argv = [f"--listen=127.0.0.1:{self.port}" if a == "--listen=127.0.0.1:0" else a
                for a in self.coordinator.argv]
        os.remove(self.port_file)
        self.coordinator = Proc(argv, self.coordinator.log)
        self.procs.append(self.coordinator)
        self.port, self.metrics_port = self._ports(self.port_file, 120)

    def _ports(self, port_file, timeout):
        until = time.monotonic() + timeout
        while time.monotonic() < until:
            try:
                with open(port_file) as f:
                    ports = f.read().split()
                if len(ports) == 2:
                    return int(ports[0]), int(ports[1])
            except OSError:
                pass
            if self.coordinator.p.poll() is not None:
                break
            time.sleep(0.05)
        self.stop()
        raise RuntimeError("the coordinator never listened:\n" + self.coordinator.tail(30))

    def server(self):
        return f"127.0.0.1:{self.port}"

    def tls_args(self, client_id):
        return [f"--tls-ca={self.certs}/ca.pem", f"--tls-cert={self.certs}/{client_id}.pem",
                f"--tls-key={self.certs}/{client_id}.key"]

    def cpp_client(self, client_id, shard, shards, data_npz, server=None, extra=()):
        argv = [os.path.join(BIN, "fedlgc-edge"), f"--server={server or self.server()}",
                f"--id={client_id}", f"--state-dir={self.work}/clients",
                f"--data=npz:{data_npz}", f"--shard={shard}", f"--num-shards={shards}",
                "--device=cpu", "--linger=1", *self.tls_args(client_id), *extra]
        p = Proc(argv, os.path.join(self.work, f"{client_id}.log"))
        self.procs.append(p)
        return p

    def py_client(self, client_id, shard, shards, data_npz, server=None, extra=(), env=None):
        argv = [sys.executable, os.path.join(HERE, "py_client.py"),
                f"--server={server or self.server()}", f"--id={client_id}",
                f"--state-dir={self.work}/clients", f"--data={data_npz}", f"--shard={shard}",
                f"--num-shards={shards}", f"--certs={self.certs}", *extra]
        e = dict(os.environ)
        e["PYTHONPATH"] = os.path.join(BUILD, "python") + os.pathsep + e.get("PYTHONPATH", "")
        e.update(env or {})
        p = Proc(argv, os.path.join(self.work, f"{client_id}.log"), env=e)
        self.procs.append(p)
        return p

    def rounds(self):
        path = os.path.join(self.state, "rounds.jsonl")
        if not os.path.exists(path):
            return []
        with open(path) as f:
            return [json.loads(line) for line in f if line.strip()]

    def metric(self, name, **labels):
        """The sum of a metric's series whose labels include `labels`; 0 when absent."""
        try:
            text = urllib.request.urlopen(
                f"http://127.0.0.1:{self.metrics_port}/metrics", timeout=5).read().decode()
        except OSError:
            return 0.0
        total = 0.0
        for line in text.splitlines():
            m = re.match(r"^([a-z_]+)(\{[^}]*\})?\s+(\S+)$", line)
            if not m or m.group(1) != name:
                continue
            got = dict(re.findall(r'(\w+)="([^"]*)"', m.group(2) or ""))
            if all(got.get(k) == v for k, v in labels.items()):
                total += float(m.group(3))
        return total

    def wait(self, timeout):
        """Waits for the coordinator to finish; its exit code, or None."""
        return self.coordinator.wait(timeout)

    def stop(self):
        for p in self.procs:
            p.kill()

    def logs(self):
        return "\n".join(f"--- {os.path.basename(p.log)}\n{p.tail()}" for p in self.procs)


def wait_for(predicate, timeout, step=0.05):
    until = time.monotonic() + timeout
    while time.monotonic() < until:
        if predicate():
            return True
        time.sleep(step)
    return False
