"""The flat weight vector of a torch.nn.Module as fedlgc lays it out.

The vector holds the module's trained parameters in named_parameters() order, then, when
the job averages buffers (--buffers average), its floating-point buffers in named_buffers()
order; tensors with no elements are left out. A frozen parameter (requires_grad=False, or
named by the job's --freeze) is not in it: it stays as the job's model file has it. Nor is
a personal one (the job's --local-params): each client trains and keeps its own. Batch
normalisation's statistics (a running_mean
and the running_var of the same prefix) travel scale-free: log(var + 1e-5) and
mean / sqrt(var + 1e-5), so that a lossy codec errs by a factor of a channel's variance
rather than by a step that can take it to zero. The C++ side lays a TorchScript module out
the same way (core/model.cc), so a Python module and the job's TorchScript file agree
coordinate for coordinate when their names and shapes do.
"""

import os

import numpy as np
import torch


def _traveling(module, local=()):
    """(name, parameter) pairs that travel: trained, not personal, not empty."""
    return [(n, p) for n, p in module.named_parameters()
            if p.numel() > 0 and p.requires_grad and n not in local]


def flat_tensors(module, buffers="average", local=()):
    """(name, tensor) pairs of the module's flat vector, in order; `local`: the names of
    the job's personal parameters."""
    named = _traveling(module, local)
    if buffers == "average":
        named += [(n, b) for n, b in module.named_buffers()
                  if b.is_floating_point() and b.numel() > 0]
    return named


def layout_of(module, buffers="average", local=()):
    """[(name, shape), ...]: the module's layout, as the codecs and the job know it."""
    return [(n, tuple(t.shape)) for n, t in flat_tensors(module, buffers, local)]


def cuts_of(module, buffers="average", local=()):
    """Where each averaged buffer begins in the flat vector (after the first tensor): a
    client's encode ends a frame there, so that no block's scale spans weights and
    statistics (core::Model::ScaleCuts)."""
    cuts, off = [], 0
    params = len(_traveling(module, local))
    for i, (_, t) in enumerate(flat_tensors(module, buffers, local)):
        if i >= params and off > 0:
            cuts.append(off)
        off += t.numel()
    return cuts


def check_layout(module, buffers, job_layout, local=()):
    """Raises ValueError unless the module's layout is the job's, naming the first
    difference."""
    mine = layout_of(module, buffers, local)
    theirs = [(n, tuple(s)) for n, s in job_layout]
    if mine == theirs:
        return
    for i, (a, b) in enumerate(zip(mine, theirs)):
        if a != b:
            raise ValueError(
                f"the module does not match the job's model: tensor {i} is {a[0]} "
                f"{list(a[1])} here and {b[0]} {list(b[1])} in the job "
                f"(buffers={buffers}; export the same architecture, with the same "
                "parameters frozen)")
    raise ValueError(
        f"the module does not match the job's model: {len(mine)} tensors here, "
        f"{len(theirs)} in the job (buffers={buffers})")


STATISTICS_EPS = 1e-5


def _statistics(tensors):
    """(mean index, var index) of each running_mean with its running_var."""
    index = {n: i for i, (n, _) in enumerate(tensors)}
    pairs = []
    for i, (n, t) in enumerate(tensors):
        if n.endswith("running_mean"):
            j = index.get(n[:-4] + "var")
            if j is not None and tensors[j][1].numel() == t.numel():
                pairs.append((i, j))
    return pairs


def load(tensors, weights):
    """Copies the flat float32 array `weights` into the tensors (on their devices)."""
    off = 0
    with torch.no_grad():
        for _, t in tensors:
            n = t.numel()
            t.copy_(torch.from_numpy(weights[off:off + n]).view(t.shape))
            off += n
        for i, j in _statistics(tensors):
            v, m = tensors[j][1], tensors[i][1]
            v.copy_((v.exp() - STATISTICS_EPS).clamp(min=0))
            m.mul_((v + STATISTICS_EPS).sqrt())
    if off != weights.size:
        raise ValueError(f"{weights.size} weights for a module of {off}")


def store(tensors, weights):
    """Writes the tensors into the flat float32 array `weights`."""
    with torch.no_grad():
        out = [t.detach().to("cpu", torch.float32) for _, t in tensors]
        for i, j in _statistics(tensors):
            v = out[j] + STATISTICS_EPS
            out[i] = out[i] / v.sqrt()
            out[j] = v.log()
        off = 0
        for t in out:
            n = t.numel()
            weights[off:off + n] = t.reshape(-1).numpy()
            off += n


def local_tensors(module, buffers, local=()):
    """What a client keeps to itself, in the C++ client's order (core::Model::
    GetLocalTensors): its personal parameters, then its floating-point buffers under
    --buffers local."""
    out = [p for n, p in module.named_parameters() if p.numel() > 0 and n in local]
    if buffers == "local":
        out += [b for _, b in module.named_buffers() if b.is_floating_point() and b.numel() > 0]
    return out


def freeze(module, names, values=None):
    """Freezes the job's frozen parameters (`names`, in named_parameters() order) in the
    module and, given their values (one float32 array, those tensors one after another, as
    the job's model holds them), sets them: they never travel, so a module built afresh
    would otherwise keep initial values of its own."""
    names = set(names)
    frozen = [p for n, p in module.named_parameters() if n in names]
    for p in frozen:
        p.requires_grad_(False)
    if values is None:
        return
    have = sum(p.numel() for p in frozen)
    if have != values.size:
        raise ValueError(f"the job's frozen parameters hold {values.size} values, the module's "
                         f"{have}: export the same architecture")
    _copy_into(frozen, values)


def _copy_into(tensors, values):
    """The float32 array `values` into the tensors, one after another (sizes checked by
    the caller)."""
    off = 0
    with torch.no_grad():
        for t in tensors:
            t.copy_(torch.from_numpy(values[off:off + t.numel()].copy()).view(t.shape))
            off += t.numel()


def set_local(module, values, buffers, local=()):
    """A client's own tensors (local_tensors) from one float32 array, the job's initial ones
    where the client has none of its own yet; nothing when `values` is None or does not fit."""
    own = local_tensors(module, buffers, local)
    if values is not None and values.size == sum(t.numel() for t in own):
        _copy_into(own, values)


def save_local(module, path, buffers, local=()):
    """The module's own tensors (local_tensors), as the C++ client keeps them
    (<state_dir>/<id>.own, float32)."""
    own = local_tensors(module, buffers, local)
    flat = np.concatenate([t.detach().to("cpu", torch.float32).reshape(-1).numpy()
                           for t in own]) if own else np.zeros(0, np.float32)
    tmp = path + ".tmp"
    flat.astype(np.float32).tofile(tmp)
    os.replace(tmp, path)


def load_local(module, path, buffers, local=()):
    """Loads what save_local wrote (or, without it, what a release before personal
    parameters wrote beside it, <id>.buffers); False when there is nothing that fits."""
    if not os.path.exists(path):
        path = path[:-len(".own")] + ".buffers" if path.endswith(".own") else path
        if not os.path.exists(path):
            return False
    flat = np.fromfile(path, dtype=np.float32)
    own = local_tensors(module, buffers, local)
    if flat.size != sum(t.numel() for t in own):
        return False
    _copy_into(own, flat)
    return True
