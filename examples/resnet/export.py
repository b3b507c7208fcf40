#!/usr/bin/env python3
"""Exports model.py's ResNet to TorchScript: the file the coordinator serves to every
client (its initial weights are the file's).

    export.py OUT.pt [--seed N]
"""

import argparse

import torch

from model import ResNet


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--seed", type=int, default=1)
    a = ap.parse_args()
    torch.manual_seed(a.seed)
    module = torch.jit.script(ResNet())
    torch.jit.save(module, a.out)
    params = sum(p.numel() for p in module.parameters())
    print(f"{a.out}: ResNet, {params:,} parameters")


if __name__ == "__main__":
    main()
