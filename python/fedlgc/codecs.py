"""fedlgc's codec library from Python: the C++ codecs themselves, so the frames are byte
for byte what a C++ client sends for the same input and seed (docs/codecs.md has every
spec).

    >>> import numpy as np, fedlgc.codecs as fc
    >>> x = np.random.default_rng(0).standard_normal(10000).astype(np.float32)
    >>> frames = fc.encode("qsgd(bits=4)", x, seed=1)
    >>> y = fc.decode(frames)
    >>> sum(len(f) for f in frames) < x.nbytes / 7
    True

A Codec keeps its state between encodes (error feedback's residual, ef(...)); encode()
and decode() make a fresh one each call. Per-tensor codecs (PowerSGD, GradiVeQ) need the
model's layout: [(name, shape), ...], as fedlgc.layout_of(module) gives.
"""

import numpy as np

from . import _fedlgc

Codec = _fedlgc.Codec


def _vector(x):
    if hasattr(x, "detach"):  # a torch tensor
        x = x.detach().to("cpu").numpy()
    return np.ascontiguousarray(np.asarray(x, dtype=np.float32).reshape(-1))


def encode(spec, x, *, seed=0, max_frame_bytes=0, layout=None, cuts=()):
    """Encodes the float32 values of x (any shape, flattened) with a fresh codec of `spec`.
    Returns the frames (bytes), each self-contained: it decodes alone. `cuts`: coordinates
    where a frame must end; a client's flat vector is cut where each averaged buffer begins
    (fedlgc.cuts_of(module)), so to get the very frames a client sends, pass those."""
    return Codec(spec, layout).encode(_vector(x), seed=seed, max_frame_bytes=max_frame_bytes,
                                      cuts=list(cuts))


def decode(frames, *, spec=None, layout=None):
    """The vector the frames encode (its dimension is in each frame); coordinates no frame
    covers are 0. Without `spec` the frames' own spec decodes them; with it, frames of
    another codec are refused."""
    frames = [frames] if isinstance(frames, (bytes, bytearray)) else list(frames)
    if not frames:
        raise ValueError("decode needs at least one frame")
    if spec is None:
        spec = frame_info(frames[0])["spec"]
    return Codec(spec, layout).decode([bytes(f) for f in frames])


def frame_info(frame):
    """A frame's header: spec, dim, begin, length, body_bytes, bytes (checksum verified)."""
    return _fedlgc.frame_info(bytes(frame))


def canonical(spec, layout=None):
    """The canonical, versioned form of a spec, as frames carry it."""
    return Codec(spec, layout).spec
