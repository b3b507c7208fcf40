"""Bad input to the binaries, as a new user gives it: one clear line naming the file and
what is wrong, a non-zero exit, nothing written; fedlgc-sim fails at once when a client
exits on such an error."""

import os
import subprocess
import time

import numpy as np
import pytest
import torch

from federation import BIN, SmallNet, export_model


def run(argv, timeout=120):
    r = subprocess.run(argv, capture_output=True, text=True, timeout=timeout)
    return r.returncode, (r.stdout + r.stderr).strip()


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    d = tmp_path_factory.mktemp("bad")
    f = {"dir": d, "model": export_model(str(d / "smallnet.pt"))}
    rng = np.random.default_rng(0)
    x = rng.integers(0, 256, (40, 28, 28), dtype=np.uint8)
    y = rng.integers(0, 10, 40)
    np.savez(d / "good.npz", x=x, y=y)
    data = (d / "good.npz").read_bytes()
    (d / "truncated.npz").write_bytes(data[:len(data) // 2])
    xf = x.astype(np.float32) / 255
    xf[7, 3, 3] = np.nan
    np.savez(d / "nan.npz", x=xf, y=y)
    np.savez(d / "labels.npz", x=x, y=y + 5)  # up to 14: the model has 10 outputs
    np.savez(d / "shape.npz", x=rng.random((40, 3, 32, 32), dtype=np.float32), y=y)
    (d / "table.csv").write_text("a,b,label\n1,2,0\n3,4,1\n5,6\n")
    (d / "not_torchscript.pt").write_bytes(b"PK\x03\x04 not a model")
    torch.save(SmallNet().state_dict(), d / "state_dict.pt")
    return f


def edge(files, state, *flags):
    return [os.path.join(BIN, "fedlgc-edge"), "--insecure", "--server=127.0.0.1:1",
            f"--state-dir={state}", "--device=cpu", *flags]


def coordinator(files, state, *flags):
    return [os.path.join(BIN, "fedlgc-coordinator"), "--insecure", f"--state-dir={state}",
            "--listen=127.0.0.1:0", "--metrics-listen=", *flags]


CASES = [
    # (binary, flags, what the one line must say)
    ("edge", ["--data=npz:{dir}/truncated.npz"], ["truncated.npz", "truncated"]),
    ("edge", ["--data=npz:{dir}/nan.npz"], ["nan.npz", "example 7", "finite"]),
    ("edge", ["--data=csv:{dir}/table.csv"], ["table.csv: line 4", "2 fields, the header has 3"]),
    ("edge", ["--data=npz:{dir}/labels.npz", "--model={model}"],
     ["smallnet.pt", "labels.npz", "labels go up to 14", "outputs 10 classes"]),
    ("edge", ["--data=npz:{dir}/shape.npz", "--model={model}"],
     ["smallnet.pt", "shape.npz", "[2, 3, 32, 32]", "fails in forward"]),
    ("edge", ["--data=npz:{dir}/good.npz", "--model={dir}/not_torchscript.pt"],
     ["not_torchscript.pt: not a TorchScript file"]),
    ("edge", ["--data=npz:{dir}/good.npz", "--model={dir}/state_dict.pt"],
     ["state_dict.pt: not a TorchScript file", "torch.jit.save"]),
    ("edge", ["--data=npz:{dir}/good.npz", "--partition=labels(2)", "--num-shards=2",
              "--targets=values"], ["float targets", "iid"]),
    ("edge", ["--optimizer=adam(lr=-1)"], ["--optimizer", "lr"]),
    ("coordinator", ["--model={dir}/not_torchscript.pt"], ["not_torchscript.pt", "TorchScript"]),
    ("coordinator", ["--model={model}", "--test-data=npz:{dir}/shape.npz"],
     ["smallnet.pt", "shape.npz", "fails in forward"]),
    ("coordinator", ["--test-data=npz:{dir}/truncated.npz"], ["truncated.npz"]),
    ("coordinator", ["--model={model}", "--buffers=shared"], ["--buffers"]),
]


@pytest.mark.parametrize("binary,flags,says", CASES)
def test_bad_input_is_one_clear_line_and_nothing_written(tmp_path, files, binary, flags, says):
    flags = [f.format(dir=files["dir"], model=files["model"]) for f in flags]
    state = tmp_path / "state"
    argv = (edge if binary == "edge" else coordinator)(files, str(state), *flags)
    code, out = run(argv)
    assert code != 0, out
    lines = [line for line in out.splitlines() if line.strip()]
    assert len(lines) == 1, out
    for part in says:
        assert part in lines[0], lines[0]
    assert not state.exists() or not any(state.rglob("*")), list(state.rglob("*"))


def test_the_simulator_fails_at_once_when_a_client_gives_up(tmp_path, files):
    start = time.monotonic()
    code, out = run([os.path.join(BIN, "fedlgc-sim"), "--insecure", "--clients=2", "--rounds=1",
                     f"--data=npz:{files['dir']}/nan.npz", f"--test-data=npz:{files['dir']}/good.npz",
                     f"--run-dir={tmp_path}/run", "--quiet"], timeout=60)
    took = time.monotonic() - start
    assert code != 0, out
    assert "client-0 exited with status 1" in out or "client-1 exited with status 1" in out, out
    assert "nan.npz" in out and "finite" in out, out
    # A simulator that waited would sit out the round's 600 s deadline.
    assert took < 45, f"{took:.1f} s: it waited instead of failing"


def test_the_simulator_refuses_a_bad_partition_before_starting(tmp_path):
    start = time.monotonic()
    code, out = run([os.path.join(BIN, "fedlgc-sim"), "--insecure", "--partition=dirichlet(-1)",
                     f"--run-dir={tmp_path}/run"], timeout=60)
    assert code != 0 and "--partition" in out and "dirichlet" in out, out
    assert time.monotonic() - start < 20  # one process that loads libtorch, nothing more
    assert not os.path.exists(f"{tmp_path}/run/coordinator")
