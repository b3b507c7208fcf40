"""Batch normalisation's running statistics re-estimated for the weights a module holds,
as the C++ client does it (core::Model::ReestimateStatistics).

A model whose weights moved by a partial update (a sparse code, a few coordinates a round)
keeps running statistics that belong to other weights; evaluated with them it can be far
worse than its weights are. Passing batches forward with the batch-normalisation modules in
training mode and everything else in eval mode (dropout off), without gradients, gives the
statistics that belong to these weights. The result is the batches' mean of each batch's
per-channel mean and unbiased variance, whatever the modules' momentum: before each batch
their statistics and counters are zeroed, and the first batch, passed a second time from
statistics of 1, measures how much of a batch a module takes (its momentum, or 1 for a
cumulative average). A module with buffers of those names that it does not update as
batch normalisation does is named in `skipped` and keeps its values.
"""

import collections

import numpy as np
import torch

from . import _flat

Statistics = collections.namedtuple("Statistics", "examples batches mean var skipped")
Statistics.__doc__ = """What reestimate_statistics found: examples and batches passed; for
every statistics pair in the flat vector's order (a running_mean and its running_var), its
channels one after another, the estimated mean and variance (numpy float32, raw); the
indices of the pairs it left alone."""


def _pairs(module):
    """[(owning module, mean tensor, var tensor, num_batches_tracked or None)], in the flat
    vector's order (the same pairs its scale-free form takes)."""
    tensors = _flat.flat_tensors(module, "average")
    modules = dict(module.named_modules())
    buffers = dict(module.named_buffers())
    out = []
    for i, j in _flat._statistics(tensors):
        name = tensors[i][0]
        owner = name.rsplit(".", 1)[0] if "." in name else ""
        tracked = buffers.get((owner + "." if owner else "") + "num_batches_tracked")
        out.append((modules.get(owner, module), tensors[i][1], tensors[j][1], tracked))
    return out


def _size(batch):
    first = batch[0] if isinstance(batch, (tuple, list)) else batch
    return int(first.shape[0]) if hasattr(first, "shape") and len(first.shape) else 0


def _forward(module, batch):
    return module(*batch) if isinstance(batch, (tuple, list)) else module(batch)


def _reset(pairs, value):
    for _, mean, var, tracked in pairs:
        mean.fill_(value)
        var.fill_(value)
        if tracked is not None:
            tracked.zero_()


def _read(t):
    return t.detach().to("cpu", torch.float64).reshape(-1).numpy().copy()


def _calibrate(module, pairs, batch, zero):
    """Each pair's factor f (0: not batch normalisation's rule), from the first batch
    passed from 0 (`zero`, what it read) and again from 1."""
    _reset(pairs, 1.0)
    _forward(module, batch)
    factors = []
    for (_, mean, var, _), (m0, v0) in zip(pairs, zero):
        m1, v1 = _read(mean), _read(var)
        fm, fv = 1 - (m1 - m0), 1 - (v1 - v0)
        f = float(fm[0])
        tol = 1e-5 * (1 + np.abs(m0) + np.abs(v0))
        ok = 1e-6 < f <= 1 + 1e-6 and np.all(np.abs(fm - f) <= tol) and \
            np.all(np.abs(fv - f) <= tol)
        factors.append(f if ok else 0.0)
    return factors


def reestimate_statistics(module, batches, max_batches=None):
    """Re-estimates the module's batch-normalisation statistics on `batches` (an iterable
    of input tensors, or of argument tuples, as module(...) takes them: the client's
    training examples without augmentation), at most `max_batches` of them; a batch of one
    example is left out. Sets the statistics to the estimate and returns it (Statistics);
    the weights and each module's num_batches_tracked and training flag stay as they were.
    A module without statistics returns Statistics with 0 batches and sets nothing."""
    pairs = _pairs(module)
    if not pairs:
        return Statistics(0, 0, np.zeros(0, np.float32), np.zeros(0, np.float32), [])
    kept = [(m.clone(), v.clone(), None if t is None else t.clone()) for _, m, v, t in pairs]
    flags = {name: sub.training for name, sub in module.named_modules()}
    factors, sums, examples, count = None, None, 0, 0
    try:
        with torch.no_grad():
            module.eval()
            for owner, _, _, _ in pairs:
                owner.train()
            for batch in batches:
                if max_batches is not None and count >= max_batches:
                    break
                n = _size(batch)
                if n < 2:
                    continue
                _reset(pairs, 0.0)
                _forward(module, batch)
                read = [(_read(m), _read(v)) for _, m, v, _ in pairs]
                if factors is None:
                    factors = _calibrate(module, pairs, batch, read)
                    sums = [(np.zeros_like(m), np.zeros_like(v)) for m, v in read]
                for p, f in enumerate(factors):
                    if f:
                        sums[p][0][:] += read[p][0] / f
                        sums[p][1][:] += read[p][1] / f
                examples += n
                count += 1
    finally:
        with torch.no_grad():
            for p, ((_, mean, var, tracked), (m0, v0, t0)) in enumerate(zip(pairs, kept)):
                if count and factors[p]:
                    mean.copy_(torch.from_numpy(sums[p][0] / count).view(mean.shape))
                    var.copy_(torch.from_numpy(sums[p][1] / count).view(var.shape))
                else:
                    mean.copy_(m0)
                    var.copy_(v0)
                if tracked is not None:
                    tracked.copy_(t0)
        for name, sub in module.named_modules():
            sub.training = flags[name]
    if count == 0:
        raise ValueError("reestimate_statistics: no batch of at least 2 examples")
    mean = np.concatenate([s[0] / count for s in sums]).astype(np.float32)
    var = np.concatenate([s[1] / count for s in sums]).astype(np.float32)
    return Statistics(examples, count, mean, var, [p for p, f in enumerate(factors) if not f])
