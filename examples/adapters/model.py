"""The models of the adapters example: a plain MLP for 28x28 images (the model pretrained
centrally and, whole, the full fine-tuning baseline) and the same MLP with LoRA adapters
on each linear layer (Hu et al. 2021): the layer's pretrained weight and bias frozen
(requires_grad=False, so fedlgc never sends them) and two small trained matrices beside
them, A (rank x in) and B (out x rank), the layer computing W x + b + scale B A x (the
paper's alpha / rank).
B starts at zero, so the adapted model starts as the pretrained one."""

import math

import torch
from torch import nn


class Mlp(nn.Module):
    def __init__(self, hidden=512, classes=10):
        super().__init__()
        self.fc1 = nn.Linear(784, hidden)
        self.fc2 = nn.Linear(hidden, hidden)
        self.fc3 = nn.Linear(hidden, classes)

    def forward(self, x):
        x = x.reshape(x.shape[0], 784)
        return self.fc3(torch.relu(self.fc2(torch.relu(self.fc1(x)))))


class LoRALinear(nn.Module):
    """A frozen linear layer and its low-rank adapter (lora_a, lora_b)."""

    def __init__(self, layer: nn.Linear, rank: int, scale: float, train_a: bool = True):
        super().__init__()
        self.weight = nn.Parameter(layer.weight.detach().clone(), requires_grad=False)
        self.bias = nn.Parameter(layer.bias.detach().clone(), requires_grad=False)
        self.lora_a = nn.Parameter(torch.empty(rank, layer.in_features), requires_grad=train_a)
        with torch.no_grad():
            nn.init.kaiming_uniform_(self.lora_a, a=math.sqrt(5))  # as nn.Linear's weight
        self.lora_b = nn.Parameter(torch.zeros(layer.out_features, rank))
        self.scale = scale

    def forward(self, x):
        low = nn.functional.linear(nn.functional.linear(x, self.lora_a), self.lora_b)
        return nn.functional.linear(x, self.weight, self.bias) + self.scale * low

    def merged(self) -> nn.Linear:
        """The adapter folded into a plain layer: W + scale B A."""
        out, inp = self.weight.shape
        layer = nn.Linear(inp, out)
        with torch.no_grad():
            layer.weight.copy_(self.weight + self.scale * self.lora_b @ self.lora_a)
            layer.bias.copy_(self.bias)
        return layer


class Adapted(nn.Module):
    """Mlp with an adapter on each linear layer (the same parameter names, plus
    fcN.lora_a and fcN.lora_b); only the adapters train. The classifier's adapter has a
    rank of its own: a rank-r change of the last layer can move at most r class directions,
    and a fine-tuning task with five new classes needs five."""

    def __init__(self, base: Mlp, rank: int = 4, head_rank: int = 8, scale: float = 1.0,
                 train_a: bool = True):
        super().__init__()
        self.fc1 = LoRALinear(base.fc1, rank, scale, train_a)
        self.fc2 = LoRALinear(base.fc2, rank, scale, train_a)
        self.fc3 = LoRALinear(base.fc3, head_rank, scale, train_a)

    def forward(self, x):
        x = x.reshape(x.shape[0], 784)
        return self.fc3(torch.relu(self.fc2(torch.relu(self.fc1(x)))))

    def merged(self) -> Mlp:
        """A plain Mlp computing what this module computes: for serving without adapters."""
        plain = Mlp(self.fc1.weight.shape[0], self.fc3.weight.shape[0])
        plain.fc1, plain.fc2, plain.fc3 = self.fc1.merged(), self.fc2.merged(), self.fc3.merged()
        return plain
