"""The examples in examples/ run as a user runs them (their run.sh), cut short: fewer
rounds, clients, steps and examples."""

import json
import os
import subprocess
import sys

import torch

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


def test_adapters_only_what_trains_travels(tmp_path):
    # Pretraining on 1,000 examples, 2 clients, 2 rounds: full fine-tuning, the adapters in
    # float32, compressed, and by Python clients; then the adapters merged into a plain MLP.
    out = run_example("adapters", tmp_path, {"ROUNDS": "2", "CLIENTS": "2", "STEPS": "5",
                                             "TRAIN": "4000", "EPOCHS": "1"},
                      "--", "--insecure")
    runs = {}
    for run in ("full", "adapters", "compressed", "python"):
        with open(tmp_path / "adapters" / f"{run}.json") as f:
            runs[run] = json.load(f)
    full, adapters = runs["full"]["parameters"], runs["adapters"]["parameters"]
    assert full["travel"] == 669706 and full["frozen"] == 0, full
    # Rank-4 adapters on fc1 (784 -> 512) and fc2 (512 -> 512), a dense one on fc3 (512 -> 10).
    assert adapters["travel"] == 4 * (784 + 512) + 4 * (512 + 512) + 10 * 512 + 10, adapters
    assert adapters["frozen"] == full["travel"], adapters
    for run, report in runs.items():
        travel = report["parameters"]["travel"]
        for row in report["rounds"]:
            assert row["participants"] == 2, (run, row)
            # Every client's update is the trained values, never a frozen one.
            assert row["raw_uplink_bytes"] == 2 * 4 * travel, (run, row)
    fp32_up = sum(row["uplink_bytes"] for row in runs["adapters"]["rounds"])
    for run in ("compressed", "python"):
        up = sum(row["uplink_bytes"] for row in runs[run]["rounds"])
        down = sum(row["downlink_bytes"] for row in runs[run]["rounds"])
        assert 0 < up < fp32_up / 5 and 0 < down < fp32_up / 3, (run, up, down, fp32_up)
    assert "| full |" in out and "| python |" in out, out
    assert "the adapters folded into a plain Mlp" in out, out
    # The job's export keeps the pretrained weights exactly as the file had them.
    served = torch.jit.load(str(tmp_path / "adapters" / "adapters.pt")).state_dict()
    adapter_names = ("fc1.lora_a", "fc1.lora_b", "fc2.lora_a", "fc2.lora_b",
                     "fc3.delta_weight", "fc3.delta_bias")
    for run in ("adapters", "compressed", "python"):
        trained = torch.jit.load(str(tmp_path / "adapters" / run / "model.pt")).state_dict()
        for name in served:
            if name not in adapter_names:
                assert torch.equal(trained[name], served[name]), (run, name)
        # Every adapter moves in float32; a top-5% downlink may not reach them all in 2 rounds.
        moved = [name for name in adapter_names if not torch.equal(trained[name], served[name])]
        if run == "adapters":
            assert moved == list(adapter_names), (run, moved)
        else:
            assert "fc3.delta_weight" in moved, (run, moved)
