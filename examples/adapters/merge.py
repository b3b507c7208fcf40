#!/usr/bin/env python3
"""Folds a fine-tuned adapter model into a plain MLP to serve: reads the job's export
(fedlgc-sim --export PATH's PATH.pt, or --run-dir's model.pt: the job's TorchScript
module with the frozen pretrained weights and the trained adapters), builds model.Adapted
of its shapes and scales, merges each layer (W + scale B A; the classifier's W + delta;
model.Adapted.merged) and writes the plain Mlp as TorchScript. Checks on the test set that
the merged model computes what the export computes and prints its accuracy.

    merge.py MODEL.pt TEST.npz OUT.pt
"""

import sys

import numpy as np
import torch

from model import Adapted, LoRALinear, Mlp
from pretrain import tensors


def main():
    export, test, out = sys.argv[1:4]
    job = torch.jit.load(export).eval()
    state = job.state_dict()
    hidden, classes = state["fc1.weight"].shape[0], state["fc3.weight"].shape[0]
    head_rank = state["fc3.lora_a"].shape[0] if "fc3.lora_a" in state else 0
    adapted = Adapted(Mlp(hidden, classes), state["fc1.lora_a"].shape[0], head_rank)
    adapted.load_state_dict(state)
    for name in ("fc1", "fc2", "fc3"):
        layer = getattr(adapted, name)
        if isinstance(layer, LoRALinear):
            layer.scale = getattr(job, name).scale
    plain = adapted.merged().eval()
    with np.load(test) as f:
        x, y = tensors(f["x"], f["y"])
    with torch.no_grad():
        a, p = job(x), plain(x)
    same = (a.argmax(1) == p.argmax(1)).float().mean().item()
    gap = (a - p).abs().max().item()
    if same < 0.999 or gap > 1e-3:
        sys.exit(f"merged model differs: {same:.4f} of the classes agree, logits differ by {gap}")
    torch.jit.save(torch.jit.script(plain), out)
    acc = (p.argmax(1) == y).float().mean().item()
    size = sum(t.numel() for t in plain.parameters())
    print(f"{out}: the adapters folded into a plain Mlp of {size:,} parameters; test accuracy "
          f"{acc:.4f}, the same classes as the export's (logits within {gap:.1e})")


if __name__ == "__main__":
    main()
