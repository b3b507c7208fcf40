"""The models of the adapters example: a plain MLP for 28x28 images (the model pretrained
centrally and, whole, the full fine-tuning baseline) and the same MLP with adapters: LoRA
(Hu et al. 2021) on the hidden layers, each layer's pretrained weight and bias frozen
(requires_grad=False, so fedlgc never sends them) and two small trained matrices beside
them, A (rank x in) and B (out x rank), the layer computing W x + b + scale B A x (the
paper's alpha / rank); and a dense adapter on the classifier. B and the dense adapter start
at zero, so the adapted model starts as the pretrained one."""

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


class DeltaLinear(nn.Module):
    """A frozen linear layer and a dense adapter of its size (delta_weight, delta_bias),
    both starting at zero: the adapter for a layer so narrow that a low-rank one saves
    nothing, as the classifier (10 x 512: rank 8 would cost 8 x (10 + 512) = 4,176 values
    against 5,130 dense)."""

    def __init__(self, layer: nn.Linear):
        super().__init__()
        self.weight = nn.Parameter(layer.weight.detach().clone(), requires_grad=False)
        self.bias = nn.Parameter(layer.bias.detach().clone(), requires_grad=False)
        self.delta_weight = nn.Parameter(torch.zeros_like(self.weight))
        self.delta_bias = nn.Parameter(torch.zeros_like(self.bias))

    def forward(self, x):
        return nn.functional.linear(x, self.weight + self.delta_weight, self.bias + self.delta_bias)

    def merged(self) -> nn.Linear:
        """The adapter folded into a plain layer: W + delta."""
        out, inp = self.weight.shape
        layer = nn.Linear(inp, out)
        with torch.no_grad():
            layer.weight.copy_(self.weight + self.delta_weight)
            layer.bias.copy_(self.bias + self.delta_bias)
        return layer


class Adapted(nn.Module):
    """Mlp with an adapter on each linear layer (the same parameter names, plus fcN.lora_a
    and fcN.lora_b, or fc3.delta_weight and fc3.delta_bias); only the adapters train. The
    classifier's adapter has a rank of its own, and head_rank 0 (the default) makes it dense
    (DeltaLinear): a low-rank change of a 10-row layer saves almost nothing and learns the
    new classes slower."""

    def __init__(self, base: Mlp, rank: int = 4, head_rank: int = 0, scale: float = 1.0,
                 train_a: bool = True):
        super().__init__()
        self.fc1 = LoRALinear(base.fc1, rank, scale, train_a)
        self.fc2 = LoRALinear(base.fc2, rank, scale, train_a)
        self.fc3 = (LoRALinear(base.fc3, head_rank, scale, train_a) if head_rank
                    else DeltaLinear(base.fc3))

    def forward(self, x):
        x = x.reshape(x.shape[0], 784)
        return self.fc3(torch.relu(self.fc2(torch.relu(self.fc1(x)))))

    def merged(self) -> Mlp:
        """A plain Mlp computing what this module computes: for serving without adapters."""
        plain = Mlp(self.fc1.weight.shape[0], self.fc3.weight.shape[0])
        plain.fc1, plain.fc2, plain.fc3 = self.fc1.merged(), self.fc2.merged(), self.fc3.merged()
        return plain
