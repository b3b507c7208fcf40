"""fedlgc.codecs: the C++ codec library from Python, byte for byte what fedlgc-codec (and
so a C++ client) writes for the same input and seed."""

import os
import subprocess

import numpy as np
import pytest

import fedlgc
import fedlgc.codecs as fc
from federation import BIN

SPECS = ["fp32", "fp16", "qsgd(bits=4)", "qsgd(bits=8,bucket=128,elias=1)",
         "qsgd(bits=4,norm=linf)", "terngrad", "natural", "topk(ratio=0.01,values=qsgd(bits=8))",
         "randk(ratio=0.05,values=fp16)", "zstd(qsgd(bits=4))", "sign", "nuqsgd(bits=3)"]


def cpp_encode(tmp_path, spec, x, seed, max_frame_bytes=0):
    src, out = tmp_path / "x.f32", tmp_path / "x.frames"
    x.astype(np.float32).tofile(src)
    subprocess.run([os.path.join(BIN, "fedlgc-codec"), "encode", spec, str(src), str(out),
                    "--seed", str(seed), "--max-frame-bytes", str(max_frame_bytes)], check=True)
    data = out.read_bytes()
    frames, at = [], 0
    while at < len(data):
        n = int.from_bytes(data[at:at + 4], "little")
        frames.append(data[at + 4:at + 4 + n])
        at += 4 + n
    return frames


def cpp_decode(tmp_path, frames):
    src, out = tmp_path / "y.frames", tmp_path / "y.f32"
    src.write_bytes(b"".join(len(f).to_bytes(4, "little") + f for f in frames))
    subprocess.run([os.path.join(BIN, "fedlgc-codec"), "decode", str(src), str(out)], check=True)
    return np.fromfile(out, dtype=np.float32)


@pytest.mark.parametrize("spec", SPECS)
def test_frames_are_the_cpp_frames_byte_for_byte(tmp_path, spec):
    x = np.random.default_rng(1).standard_normal(20000).astype(np.float32)
    for seed, max_frame_bytes in ((0, 0), (7, 4096)):
        py = fc.encode(spec, x, seed=seed, max_frame_bytes=max_frame_bytes)
        cpp = cpp_encode(tmp_path, spec, x, seed, max_frame_bytes)
        assert py == cpp, f"{spec} seed {seed}"
        if max_frame_bytes:
            assert all(len(f) <= max_frame_bytes for f in py)
            assert len(py) > 1 or len(py[0]) <= max_frame_bytes
        y = fc.decode(py)
        assert y.dtype == np.float32 and y.shape == x.shape
        np.testing.assert_array_equal(y, cpp_decode(tmp_path, cpp))
        # Each frame decodes alone, into its own range.
        part = fc.decode(py[:1])
        info = fc.frame_info(py[0])
        assert info["dim"] == x.size
        np.testing.assert_array_equal(part[info["begin"]:info["begin"] + info["length"]],
                                      y[info["begin"]:info["begin"] + info["length"]])


def test_lossless_and_lossy_codecs_do_what_they_say():
    x = np.random.default_rng(2).standard_normal(5000).astype(np.float32)
    np.testing.assert_array_equal(fc.decode(fc.encode("fp32", x)), x)
    frames = fc.encode("qsgd(bits=4,norm=linf)", x, seed=3)
    assert sum(map(len, frames)) < x.nbytes / 6
    err = np.linalg.norm(fc.decode(frames) - x) / np.linalg.norm(x)
    assert 0 < err < 0.2
    kept = fc.decode(fc.encode("topk(ratio=0.01)", x))
    assert np.count_nonzero(kept) == 50
    assert set(np.flatnonzero(kept)) == set(np.argsort(-np.abs(x))[:50])
    assert fc.canonical("qsgd(bits=4)") == "qsgd/1(bits=4,bucket=512,norm=l2,elias=0)"


def test_a_codec_keeps_its_state_between_encodes():
    x = np.random.default_rng(4).standard_normal(3000).astype(np.float32)
    c = fc.Codec("ef(topk(ratio=0.01))")
    assert c.traits["stateful"]
    first, second = c.decode(c.encode(x)), c.decode(c.encode(x))
    # Error feedback: what the first round left out comes out in the second.
    assert not np.array_equal(first, second)
    assert np.abs(first + second).sum() > np.abs(2 * first).sum()


def test_per_tensor_codecs_take_a_layout():
    layout = [("w", (64, 32)), ("b", (32,))]
    x = np.random.default_rng(5).standard_normal(64 * 32 + 32).astype(np.float32)
    frames = fc.encode("powersgd(rank=2)", x, layout=layout)
    y = fc.decode(frames, layout=layout)
    np.testing.assert_array_equal(y[-32:], x[-32:])  # a vector goes as it is
    with pytest.raises(ValueError, match="layout"):
        fc.encode("powersgd(rank=2)", x)


def test_bad_input_is_an_exception_not_a_crash():
    x = np.ones(100, np.float32)
    frame = bytearray(fc.encode("qsgd(bits=4)", x)[0])
    frame[-10] ^= 0xFF
    with pytest.raises(Exception, match="(?i)crc|checksum"):
        fc.decode([bytes(frame)])
    with pytest.raises(Exception):
        fc.decode([b"not a frame"])
    with pytest.raises(ValueError):
        fc.encode("qsgd(bits=99)", x)
    with pytest.raises(ValueError, match="finite"):
        fc.encode("qsgd(bits=4)", np.array([1, np.nan], np.float32))
    with pytest.raises(ValueError, match="encoded with"):
        fc.decode(fc.encode("qsgd(bits=4)", x), spec="qsgd(bits=8)")
    assert fedlgc.PROTOCOL_VERSION >= 2


def test_a_clients_cuts_start_a_frame_at_each_averaged_buffer():
    from federation import SmallNet
    # SmallNet: 38,266 weights, then bn.running_mean and bn.running_var (48 each).
    cuts = fedlgc.cuts_of(SmallNet())
    assert cuts == [38266, 38314]
    assert fedlgc.cuts_of(SmallNet(), "local") == []
    x = np.random.default_rng(6).standard_normal(38266 + 96).astype(np.float32)
    frames = fc.encode("qsgd(bits=4)", x, cuts=cuts)
    assert [fc.frame_info(f)["begin"] for f in frames] == [0] + cuts
    assert len(fc.encode("qsgd(bits=4)", x)) == 1
    with pytest.raises(ValueError, match="cuts"):
        fc.encode("qsgd(bits=4)", x, cuts=[38314, 38266])


def test_what_train_returns_is_a_count_or_a_dict():
    parse = fedlgc._parse_result
    assert parse(np.int64(32)) == (32, {})
    assert parse({"samples": np.int32(5), "loss": np.float32(0.5)}) == (5, {"loss": 0.5})
    for bad in [None, True, 3.5, "7", {"loss": 1.0}, -1]:
        with pytest.raises((TypeError, ValueError)):
            parse(bad)


def test_the_tool_refuses_bad_values_and_says_which(tmp_path):
    tool = os.path.join(BIN, "fedlgc-codec")
    src = tmp_path / "x.f32"
    np.ones(16, dtype=np.float32).tofile(src)
    out = str(tmp_path / "x.frames")
    for extra, said in ((["--seed", "abc"], "--seed"), (["--bogus", "1"], "--bogus")):
        r = subprocess.run([tool, "encode", "qsgd(bits=4)", str(src), out] + extra,
                           capture_output=True, text=True)
        assert r.returncode != 0, extra
        assert said in r.stderr, r.stderr
    r = subprocess.run([tool, "encode", "qsgd(bits=99)", str(src), out],
                       capture_output=True, text=True)
    assert r.returncode != 0 and "bits" in r.stderr, r.stderr
    r = subprocess.run([tool, "encode", "--help"], capture_output=True, text=True)
    assert r.returncode == 0 and "--max-frame-bytes" in r.stdout
    assert subprocess.run([tool], capture_output=True).returncode != 0
