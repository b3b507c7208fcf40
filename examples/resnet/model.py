"""A small ResNet for 28x28 grayscale images: 1.2M parameters, batch normalisation,
three residual stages (14x14, 7x7, 4x4). Defined in plain PyTorch; export.py turns it into
the TorchScript file fedlgc federates."""

import torch
from torch import nn


class Block(nn.Module):
    """Two 3x3 convolutions with batch normalisation and a shortcut (a strided 1x1
    convolution where the shape changes)."""

    def __init__(self, cin, cout, stride):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.shortcut = nn.Sequential()
        if stride != 1 or cin != cout:
            self.shortcut = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False),
                                          nn.BatchNorm2d(cout))

    def forward(self, x):
        out = torch.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return torch.relu(out + self.shortcut(x))


class ResNet(nn.Module):
    def __init__(self, classes=10):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(1, 32, 3, 1, 1, bias=False), nn.BatchNorm2d(32),
                                  nn.ReLU())
        self.stage1 = Block(32, 64, 2)    # 14x14
        self.stage2 = Block(64, 128, 2)   # 7x7
        self.stage3 = Block(128, 256, 2)  # 4x4
        self.fc = nn.Linear(256, classes)

    def forward(self, x):
        x = x.reshape(x.shape[0], 1, 28, 28)  # npz images come as n x 28 x 28
        x = self.stage3(self.stage2(self.stage1(self.stem(x))))
        return self.fc(torch.flatten(nn.functional.adaptive_avg_pool2d(x, 1), 1))
