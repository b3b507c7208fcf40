"""The trained model handed over: fedlgc-sim's --export (and fedlgc-export from a state
folder) write files that plain PyTorch and NumPy read, with nothing of fedlgc imported,
and that score on the test set what the run's report says."""

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from federation import BIN, export_model, fashion_npz

# Loads an export in a fresh interpreter without fedlgc on its path, and prints its
# accuracy on test.npz (uint8 images scaled as the data readers scale them), the names
# of its parameters and buffers, and its metadata.
SCORE = r"""
import json, sys
import numpy as np
import torch
assert "fedlgc" not in sys.modules
pt, test = sys.argv[1], sys.argv[2]
extra = {"fedlgc.json": ""}
m = torch.jit.load(pt, _extra_files=extra)
d = np.load(test)
x = torch.from_numpy(d["x"].astype(np.float32) / 255.0)
y = torch.from_numpy(d["y"].astype(np.int64))
with torch.no_grad():
    acc = (m(x).argmax(1) == y).double().mean().item()
state = {k: v.numpy() for k, v in m.state_dict().items()}
print(json.dumps({"accuracy": acc, "training": m.training,
                  "meta": json.loads(extra["fedlgc.json"]),
                  "state": {k: v.tolist() for k, v in state.items() if v.size < 64},
                  "names": sorted(state), "dtypes": {k: str(v.dtype) for k, v in state.items()}}))
"""


def clean_env():
    env = dict(os.environ)
    env.pop("PYTHONPATH", None)
    return env


def score(pt, test):
    r = subprocess.run(["/usr/bin/python3", "-c", SCORE, pt, test], capture_output=True,
                       text=True, timeout=300, env=clean_env(), cwd="/")
    assert r.returncode == 0, r.stderr[-3000:]
    return json.loads(r.stdout)


def sim(tmp_path, name, *args, check=True):
    run = tmp_path / name
    argv = [os.path.join(BIN, "fedlgc-sim"), "--insecure", "--quiet", f"--run-dir={run}",
            f"--report={run}/report.json", "--clients=2", "--rounds=3", "--local-steps=15",
            "--codec=fp32", "--downlink-codec=fp32", "--torch-threads=1", *args]
    r = subprocess.run(argv, capture_output=True, text=True, timeout=600)
    if check:
        assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    return run, r


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    return fashion_npz(str(tmp_path_factory.mktemp("data")), train=2000, test=1000)


def last_report(run):
    with open(run / "report.json") as f:
        return json.load(f)


def test_a_builtin_model_exports_as_torchscript_that_scores_what_the_report_says(tmp_path, data):
    out = tmp_path / "out" / "cnn.pt"
    run, r = sim(tmp_path, "cnn", "--model=cnn", f"--data=npz:{data['train']}",
                 f"--test-data=npz:{data['test']}", f"--export={out}")
    assert f"model: {out}" in r.stdout, r.stdout
    report = last_report(run)
    last = report["rounds"][-1]
    assert report["export"]["metadata"]["round"] == 3
    got = score(str(out), data["test"])
    assert not got["training"]
    assert got["meta"]["round"] == 3 and got["meta"]["model"] == "cnn"
    assert abs(got["accuracy"] - last["accuracy"]) <= 0.005, (got["accuracy"], last["accuracy"])
    assert got["accuracy"] > 0.5
    # The same tensors by name, for tools without TorchScript.
    arrays = np.load(tmp_path / "out" / "cnn.npz")
    assert sorted(arrays.files) == got["names"] == sorted(
        ["conv1.weight", "conv1.bias", "conv2.weight", "conv2.bias", "fc1.weight", "fc1.bias",
         "fc2.weight", "fc2.bias"])
    assert arrays["fc2.bias"].tolist() == pytest.approx(got["state"]["fc2.bias"], abs=0)
    with open(tmp_path / "out" / "cnn.json") as f:
        assert json.load(f)["round"] == 3


def test_a_batchnorm_module_exports_its_averaged_statistics(tmp_path, data):
    model = export_model(str(tmp_path / "small.pt"))
    out = tmp_path / "small-out.pt"
    run, _ = sim(tmp_path, "bn", f"--model={model}", f"--data=npz:{data['train']}",
                 f"--test-data=npz:{data['test']}", f"--export={out}")
    last = last_report(run)["rounds"][-1]
    got = score(str(out), data["test"])
    assert abs(got["accuracy"] - last["accuracy"]) <= 0.005, (got["accuracy"], last["accuracy"])
    # The running statistics are the clients' averages in their own form: variances
    # positive and moved from their initial ones, means moved from zero.
    arrays = np.load(str(out).replace(".pt", ".npz"))
    var, mean = arrays["bn.running_var"], arrays["bn.running_mean"]
    assert (var > 0).all() and not np.allclose(var, 1.0) and not np.allclose(mean, 0.0)
    assert got["dtypes"]["bn.num_batches_tracked"] == "int64"
    assert set(got["names"]) == set(arrays.files)


def test_export_best_and_fedlgc_export_from_the_state_folder(tmp_path, data):
    out = tmp_path / "best.pt"
    run, _ = sim(tmp_path, "best", "--model=mlp", f"--data=npz:{data['train']}",
                 f"--test-data=npz:{data['test']}", f"--export={out}", "--export-best",
                 "--rounds=4", "--lr=0.5")
    rounds = last_report(run)["rounds"]
    best = max(rounds, key=lambda r: r["accuracy"])
    got = score(str(out), data["test"])
    assert got["meta"]["round"] == best["round"] and got["meta"]["kept_as"] in ("best", "last")
    assert abs(got["accuracy"] - best["accuracy"]) <= 0.005
    state = str(run / "coordinator")
    tool = os.path.join(BIN, "fedlgc-export")
    listing = subprocess.run([tool, f"--state-dir={state}", "--list"], capture_output=True,
                             text=True, timeout=120, check=True).stdout
    assert [line.split()[1] for line in listing.splitlines() if line.startswith("round")] == [
        "2", "3", "4"], listing  # --keep-models 3
    assert f"best: round {best['round']} " in listing
    for which, row in (("2", rounds[1]), ("last", rounds[-1]), ("best", best)):
        target = tmp_path / f"r-{which}.pt"
        subprocess.run([tool, f"--state-dir={state}", f"--round={which}", "-o", str(target)],
                       check=True, capture_output=True, timeout=120)
        got = score(str(target), data["test"])
        assert got["meta"]["round"] == row["round"]
        assert abs(got["accuracy"] - row["accuracy"]) <= 0.005, (which, got, row)
    gone = subprocess.run([tool, f"--state-dir={state}", "--round=1", "-o",
                           str(tmp_path / "r1.pt")], capture_output=True, text=True, timeout=120)
    assert gone.returncode == 1 and "keeps no model of round 1 (kept: 2, 3, 4" in gone.stderr


def test_an_export_path_that_cannot_be_written_fails_the_job_at_start(tmp_path, data):
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    _, r = sim(tmp_path, "bad", "--model=mlp", f"--data=npz:{data['train']}",
               f"--export={blocker}/model.pt", check=False)
    assert r.returncode != 0
    assert "--export" in r.stderr and "cannot make its folder" in r.stderr, r.stderr[-2000:]
    _, r = sim(tmp_path, "npz", "--model=mlp", f"--data=npz:{data['train']}",
               f"--export={tmp_path}/model.npz", check=False)
    assert r.returncode != 0 and "name the TorchScript file" in r.stderr, r.stderr[-2000:]
