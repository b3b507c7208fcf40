"""The examples in examples/ run as a user runs them (their run.sh), cut short: fewer
rounds, clients, steps and examples."""

import json
import os
import subprocess
import sys

from federation import BIN, REPO
from ports import free_port

EXAMPLES = os.path.join(REPO, "examples")


def run_example(name, tmp_path, env, *args, timeout=600):
    e = dict(os.environ, PYTHON=sys.executable, FEDLGC_BIN=BIN, OUT=str(tmp_path / name),
             FEDLGC_PYTHON=os.path.join(os.path.dirname(BIN), "python"), **env)
    r = subprocess.run([os.path.join(EXAMPLES, name, "run.sh"), *args], env=e,
                       capture_output=True, text=True, timeout=timeout)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    return r.stdout


def report(tmp_path, name):
    with open(tmp_path / name / "report.json") as f:
        return json.load(f)


def test_resnet_from_python_on_npz_data(tmp_path):
    run_example("resnet", tmp_path, {"ROUNDS": "2", "CLIENTS": "2", "STEPS": "4", "TRAIN": "600",
                                     "TEST": "300"}, "--insecure", "--quiet")
    r = report(tmp_path, "resnet")
    assert len(r["rounds"]) == 2 and r["config"]["model"].endswith("resnet.pt")
    assert all(row["participants"] == 2 for row in r["rounds"])
    assert r["summary"]["compression_ratio"] > 6 and r["summary"]["downlink_ratio"] > 1.5


def test_a_sequence_model_on_csv_data(tmp_path):
    run_example("sequence", tmp_path, {"ROUNDS": "3", "CLIENTS": "2", "TRAIN": "3000"},
                "--insecure", "--quiet", "--local-epochs", "2")
    r = report(tmp_path, "sequence")
    assert len(r["rounds"]) == 3
    assert r["summary"]["final_accuracy"] > 0.5, r["summary"]  # 4 classes


def test_a_python_loop_beside_cpp_clients(tmp_path):
    out = run_example("python_loop", tmp_path, {"ROUNDS": "2", "STEPS": "10", "TRAIN": "2000",
                                                "PORT": str(free_port())})
    assert "round  2:" in out and "4 clients" in out, out
    assert out.count("py-2: round") == 2 and out.count("py-3: round") == 2, out
