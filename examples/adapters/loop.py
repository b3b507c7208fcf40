"""The adapters example's training loop for Python clients (fedlgc-sim --python-client
loop.py): plain SGD with momentum on the module's trainable parameters, which in
adapters.pt are the adapters alone. fedlgc loads the job's frozen pretrained weights
into the module before the first round and never sends them; only the adapters go up and
come down.
"""

import torch
from torch import nn

from model import Adapted, Mlp


def model():
    """The module each Python client trains: an Adapted Mlp of pretrain.py's default shapes
    (another --hidden, --rank or --head-rank wants the same here: the first round refuses
    a module whose shapes differ from the job's). Its frozen weights are overwritten with
    the job's, the pretrained ones, when it joins."""
    return Adapted(Mlp())


def train(module, info):
    """info.local_steps batches of info.batch_size from the client's shard, SGD at the
    job's learning rate with momentum 0.9, shuffled by the round's seed."""
    x, y = info.data.x.float().reshape(-1, 784), info.data.y
    trained = [p for p in module.parameters() if p.requires_grad]
    opt = torch.optim.SGD(trained, lr=info.lr, momentum=0.9)
    g = torch.Generator().manual_seed(info.seed)
    module.train()
    steps = info.local_steps or info.local_epochs * len(y) // info.batch_size
    # Batches through the shard in a shuffled order, each example once before any twice,
    # as a C++ client's epoch goes (there a short batch ends each epoch).
    passes = max(1, -(-steps * info.batch_size // len(y)))
    order = torch.cat([torch.randperm(len(y), generator=g) for _ in range(passes)])
    loss = torch.zeros(())
    for step in range(steps):
        idx = order[step * info.batch_size:(step + 1) * info.batch_size]
        opt.zero_grad()
        loss = nn.functional.cross_entropy(module(x[idx]), y[idx])
        loss.backward()
        opt.step()
    return {"samples": steps * info.batch_size, "loss": loss.item()}
