#!/usr/bin/python3
"""Writes the TorchScript modules and NumPy files the C++ tests load, as a user would make
them: modules defined in Python, scripted or traced, saved with torch.jit.save; arrays
saved with numpy.savez. Beside each module, <name>.layout.txt holds its flat layout as the
Python package computes it (one "name shape..." line per tensor, buffers averaged) and
<name>.flat.f32 its flat weights, so the tests can check that C++ lays modules out
exactly as Python does.

    make_test_models.py OUT_DIR
"""

import importlib.util
import os
import sys

import numpy as np
import torch
from torch import nn

# The package's layout code from its sources (the package itself needs the build).
_spec = importlib.util.spec_from_file_location(
    "fedlgc_flat", os.path.join(os.path.dirname(__file__), "..", "..", "python", "fedlgc",
                                "_flat.py"))
_flat = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_flat)


class BnNet(nn.Module):
    """Conv + BatchNorm + Linear for [b, 1, 8, 8] inputs, 4 classes, with its own loss."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(1, 4, 3, padding=1)
        self.bn = nn.BatchNorm2d(4)
        self.fc = nn.Linear(4 * 8 * 8, 4)

    def forward(self, x):
        return self.fc(torch.relu(self.bn(self.conv(x))).flatten(1))

    @torch.jit.export
    def loss(self, out, y):
        # label smoothing: a loss the built-in choices do not have
        return nn.functional.cross_entropy(out, y, label_smoothing=0.1)


class Whiten(nn.Module):
    """Buffers named as BatchNorm's that its forward reads and never updates."""

    def __init__(self, c):
        super().__init__()
        self.register_buffer("running_mean", torch.zeros(c))
        self.register_buffer("running_var", torch.ones(c))

    def forward(self, x):
        m = self.running_mean[None, :, None, None]
        v = self.running_var[None, :, None, None]
        return (x - m) / torch.sqrt(v + 1e-5)


class BnStats(nn.Module):
    """Conv + BatchNorm with momentum None + Whiten + Linear, [b, 1, 8, 8] in, 4 classes:
    a cumulative BatchNorm and a statistics pair that is not BatchNorm's."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(1, 4, 3, padding=1)
        self.bn = nn.BatchNorm2d(4, momentum=None)
        self.whiten = Whiten(4)
        self.fc = nn.Linear(4 * 8 * 8, 4)

    def forward(self, x):
        return self.fc(self.whiten(torch.relu(self.bn(self.conv(x)))).flatten(1))


class Mlp(nn.Module):
    def __init__(self, inputs=784, hidden=32, outputs=10):
        super().__init__()
        self.fc1 = nn.Linear(inputs, hidden)
        self.fc2 = nn.Linear(hidden, outputs)

    def forward(self, x):
        return self.fc2(torch.relu(self.fc1(x.flatten(1))))


class Gru(nn.Module):
    """A sequence classifier: [b, T, 1] in, 3 classes out."""

    def __init__(self):
        super().__init__()
        self.gru = nn.GRU(1, 16, batch_first=True)
        self.head = nn.Linear(16, 3)

    def forward(self, x):
        out, _ = self.gru(x)
        return self.head(out[:, -1])


class Embed(nn.Module):
    """A token classifier: [b, T] int64 ids below 50 in, 3 classes out (an embedding
    first, as a text model has)."""

    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(50, 8)
        self.head = nn.Linear(8, 3)

    def forward(self, x):
        return self.head(self.emb(x).mean(1))


class TupleOut(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(6, 2)

    def forward(self, x):
        return self.fc(x), x.sum(1)


class Tied(nn.Module):
    """Two layers sharing one weight (tied weights): it is one tensor of the flat vector."""

    def __init__(self):
        super().__init__()
        self.a = nn.Linear(6, 6)
        self.b = nn.Linear(6, 6)
        self.b.weight = self.a.weight
        self.head = nn.Linear(6, 2)

    def forward(self, x):
        return self.head(torch.relu(self.b(torch.relu(self.a(x)))))


def save(module, out, name, scripted=True, example=None):
    torch.manual_seed(7)
    for p in module.parameters():
        nn.init.normal_(p, std=0.1)
    m = torch.jit.script(module) if scripted else torch.jit.trace(module, example)
    path = os.path.join(out, name + ".pt")
    torch.jit.save(m, path)
    loaded = torch.jit.load(path)
    with open(os.path.join(out, name + ".layout.txt"), "w") as f:
        for n, shape in _flat.layout_of(loaded, "average"):
            f.write(n + " " + " ".join(str(d) for d in shape) + "\n")
    tensors = _flat.flat_tensors(loaded, "average")
    flat = np.zeros(sum(t.numel() for _, t in tensors), np.float32)
    _flat.store(tensors, flat)
    flat.tofile(os.path.join(out, name + ".flat.f32"))


def main():
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    torch.manual_seed(0)
    bn = BnNet()
    with torch.no_grad():  # running statistics that are not the defaults
        bn.bn.running_mean.uniform_(-1, 1)
        bn.bn.running_var.uniform_(0.5, 2)
    save(bn, out, "bn_loss")
    frozen = BnNet()  # a pretrained feature extractor: its convolution does not train
    for p in frozen.conv.parameters():
        p.requires_grad_(False)
    save(frozen, out, "bn_frozen")
    stats = BnStats()
    with torch.no_grad():
        stats.whiten.running_mean.uniform_(-1, 1)
        stats.whiten.running_var.uniform_(0.5, 2)
    save(stats, out, "bn_stats")
    save(Mlp(), out, "mlp_traced", scripted=False, example=torch.zeros(2, 1, 28, 28))
    save(Gru(), out, "gru")
    save(Embed(), out, "embed")
    save(Mlp(4, 8, 1), out, "regress")
    save(TupleOut(), out, "tuple_out")
    save(Tied(), out, "tied")
    # A state dict saved with torch.save: a common mistake, and not TorchScript.
    torch.save(Mlp().state_dict(), os.path.join(out, "state_dict.pt"))

    rng = np.random.default_rng(3)
    # numpy's own writers, plain and deflated, for the npz reader.
    x = rng.integers(0, 256, size=(50, 8, 8), dtype=np.uint8)
    y = rng.integers(0, 4, size=50).astype(np.int64)
    np.savez(os.path.join(out, "numpy_plain.npz"), x=x, y=y)
    np.savez_compressed(os.path.join(out, "numpy_deflated.npz"),
                        x_train=x.astype(np.float32) / 255, y_train=y.astype(np.int32),
                        x_test=x[:10].astype(np.float64) / 255, y_test=y[:10].astype(np.uint8))
    np.save(os.path.join(out, "x.npy"), x)
    big = np.arange(12, dtype=">f4").reshape(3, 4)
    np.savez(os.path.join(out, "big_endian.npz"), x=big, y=np.array([0.5, 1.5, 2.5], ">f8"))
    np.savez(os.path.join(out, "fortran.npz"), x=np.asfortranarray(rng.random((4, 3))),
             y=np.zeros(4, np.int64))
    with open(os.path.join(out, "done"), "w") as f:
        f.write("ok\n")


if __name__ == "__main__":
    main()
