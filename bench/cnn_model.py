#!/usr/bin/env python3
"""The built-in CNN (core/model.cc: conv 5x5 1->16, pool, conv 5x5 16->32, pool, fc 1568->128,
fc 128->10, 215,370 parameters) written in Python and exported to TorchScript, to measure
a TorchScript model against the same network built in C++ (bench/your_model.sh cnn).

    cnn_model.py OUT.pt
"""

import sys

import torch
from torch import nn


class Cnn(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 16, 5, padding=2)
        self.conv2 = nn.Conv2d(16, 32, 5, padding=2)
        self.fc1 = nn.Linear(32 * 7 * 7, 128)
        self.fc2 = nn.Linear(128, 10)

    def forward(self, x):
        x = x.reshape(x.shape[0], 1, 28, 28)
        x = nn.functional.max_pool2d(torch.relu(self.conv1(x)), 2)
        x = nn.functional.max_pool2d(torch.relu(self.conv2(x)), 2)
        x = torch.relu(self.fc1(torch.flatten(x, 1)))
        return self.fc2(x)


if __name__ == "__main__":
    torch.manual_seed(1)
    m = torch.jit.script(Cnn())
    torch.jit.save(m, sys.argv[1])
    print(f"{sys.argv[1]}: {sum(p.numel() for p in m.parameters()):,} parameters")
