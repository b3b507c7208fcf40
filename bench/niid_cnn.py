#!/usr/bin/env python3
"""The CNN of Li et al. 2022's non-IID benchmark for (Fashion-)MNIST, as Flower Baselines'
niid_bench runs it: conv 5x5 1->6, ReLU, max-pool 2, conv 5x5 6->16, ReLU, max-pool 2,
fc 256->120, ReLU, fc 120->84, ReLU, fc 84->10 (44,426 parameters, no BatchNorm), PyTorch's
default initialisation drawn from SEED, exported to TorchScript for fedlgc's --model.

    niid_cnn.py OUT.pt [SEED]
"""

import sys

import torch
from torch import nn


class NiidCnn(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 6, 5)
        self.conv2 = nn.Conv2d(6, 16, 5)
        self.fc1 = nn.Linear(16 * 4 * 4, 120)
        self.fc2 = nn.Linear(120, 84)
        self.fc3 = nn.Linear(84, 10)

    def forward(self, x):
        x = x.reshape(x.shape[0], 1, 28, 28)
        x = nn.functional.max_pool2d(torch.relu(self.conv1(x)), 2)
        x = nn.functional.max_pool2d(torch.relu(self.conv2(x)), 2)
        x = torch.flatten(x, 1)
        x = torch.relu(self.fc1(x))
        x = torch.relu(self.fc2(x))
        return self.fc3(x)


if __name__ == "__main__":
    torch.manual_seed(int(sys.argv[2]) if len(sys.argv) > 2 else 1)
    m = torch.jit.script(NiidCnn())
    torch.jit.save(m, sys.argv[1])
    print(f"{sys.argv[1]}: {sum(p.numel() for p in m.parameters()):,} parameters")
