#!/usr/bin/env python3
"""Exports model.py's Net to TorchScript (OUT.pt), the job's model at the coordinator."""

import sys

import torch

from model import Net

torch.manual_seed(1)
module = torch.jit.script(Net())
torch.jit.save(module, sys.argv[1])
print(f"{sys.argv[1]}: Net, {sum(p.numel() for p in module.parameters()):,} parameters")
