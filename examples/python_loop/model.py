"""The model of example (c): a compact CNN with batch normalisation for 28x28 grayscale
images. The Python clients train this class itself; the coordinator and the C++ clients
train the TorchScript file export.py makes of it (the same names and shapes)."""

import torch
from torch import nn


class Net(nn.Module):
    def __init__(self, classes=10):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 24, 3, padding=1)
        self.bn1 = nn.BatchNorm2d(24)
        self.conv2 = nn.Conv2d(24, 48, 3, padding=1)
        self.bn2 = nn.BatchNorm2d(48)
        self.fc1 = nn.Linear(48 * 7 * 7, 96)
        self.fc2 = nn.Linear(96, classes)

    def forward(self, x):
        x = x.reshape(x.shape[0], 1, 28, 28)
        x = nn.functional.max_pool2d(torch.relu(self.bn1(self.conv1(x))), 2)
        x = nn.functional.max_pool2d(torch.relu(self.bn2(self.conv2(x))), 2)
        return self.fc2(torch.relu(self.fc1(torch.flatten(x, 1))))
