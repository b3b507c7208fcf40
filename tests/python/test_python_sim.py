"""fedlgc-sim --python-client: a whole federation of Python training loops in one command,
with federated evaluation on each client's held-out share and the global model handed
over; a file without train(), and an evaluate() that raises, as a user would get them
wrong."""

import json
import os
import subprocess

import pytest

from federation import BIN, REPO, fashion_npz
from test_export import score

LOOP = os.path.join(REPO, "examples", "python_loop", "loop.py")
# A train() of a few lines, for the files the tests write.
TRAIN = (
        "import torch\n"
        "def train(module, info):\n"
        "    opt = torch.optim.SGD(module.parameters(), lr=info.lr)\n"
        "    x, y = info.data.x[:64].float(), info.data.y[:64]\n"
        "    loss = torch.nn.functional.cross_entropy(module(x), y)\n"
        "    opt.zero_grad(); loss.backward(); opt.step()\n"
        "    return {'samples': 64, 'loss': loss.item()}\n"
)


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    d = tmp_path_factory.mktemp("data")
    paths = fashion_npz(str(d), train=2400, test=1000)
    net = str(d / "net.pt")
    subprocess.run(["/usr/bin/python3", os.path.join(REPO, "examples", "python_loop", "export.py"),
                    net], check=True, capture_output=True, timeout=300,
                   cwd=os.path.join(REPO, "examples", "python_loop"))
    paths["net"] = net
    return paths


def sim(run, *args, timeout=600):
    argv = [os.path.join(BIN, "fedlgc-sim"), "--insecure", "--quiet", f"--run-dir={run}",
            f"--report={run}/report.json", "--torch-threads=1", *args]
    return subprocess.run(argv, capture_output=True, text=True, timeout=timeout)


def test_the_examples_loop_runs_as_python_clients_in_one_command(tmp_path, data):
    run = tmp_path / "loop"
    r = sim(run, f"--python-client={LOOP}", f"--model={data['net']}",
            f"--data=npz:{data['train']}", f"--test-data=npz:{data['test']}", "--clients=4",
            "--rounds=2", "--local-steps=15", "--eval=both", "--eval-fraction=0.1")
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    with open(run / "report.json") as f:
        report = json.load(f)
    rounds = report["rounds"]
    assert [row["participants"] for row in rounds] == [4, 4], rounds
    for row in rounds:
        fed = row["federated_eval"]
        # 4 clients asked, each holding out 10% of its 600 examples.
        assert fed["asked"] == 4 and fed["clients"] == 4 and fed["missing"] == 0, fed
        assert fed["examples"] == 4 * 60, fed
        assert 0 <= fed["accuracy"] <= 1 and fed["loss"] > 0
        assert sorted(row["eval_accuracy"]) == [f"client-{i}" for i in range(4)]
    # The loop's own round logs: what its train() returned, and its evaluations.
    with open(run / "clients" / "client-2.rounds.jsonl") as f:
        log = [json.loads(line) for line in f]
    assert sum(1 for e in log if "train_samples" in e) == 2
    assert sum(1 for e in log if "eval_examples" in e) == 2
    # The exported global model scores what the server's evaluation said.
    got = score(str(run / "model.pt"), data["test"])
    assert abs(got["accuracy"] - rounds[-1]["accuracy"]) <= 0.005, (got, rounds[-1])


def test_a_file_without_train_fails_at_start_naming_it(tmp_path, data):
    bad = tmp_path / "notrain.py"
    bad.write_text("def evaluate(module, info):\n    return None\n")
    r = sim(tmp_path / "run", f"--python-client={bad}", f"--data=npz:{data['train']}",
            "--model=mlp", "--clients=2", "--rounds=1", "--join-timeout=60", timeout=300)
    assert r.returncode != 0
    assert "defines no train(module, info)" in r.stderr, r.stderr[-2000:]


def test_an_evaluate_that_raises_is_declined_not_fatal(tmp_path, data):
    loop = tmp_path / "raises.py"
    loop.write_text(
        TRAIN +
        "def evaluate(module, info):\n"
        "    raise RuntimeError('my evaluation is broken')\n")
    run = tmp_path / "run"
    r = sim(run, f"--python-client={loop}", "--model=mlp", f"--data=npz:{data['train']}",
            "--test-data=none", "--clients=2", "--rounds=2", "--eval-timeout=20")
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    with open(run / "report.json") as f:
        rounds = json.load(f)["rounds"]
    # Each failed evaluation is an answer that says why (declined), at once: no round
    # waited out its 20 s.
    assert all(row["federated_eval"]["declined"] == 2 for row in rounds), rounds
    assert all(row["federated_eval_seconds"] < 15 for row in rounds), rounds
    with open(run / "clients-0-1.log") as f:
        assert "my evaluation is broken" in f.read()


def test_the_package_installs_into_a_virtual_environment_beside_the_system_torch(tmp_path):
    venv = tmp_path / "venv"
    r = subprocess.run([os.path.join(REPO, "scripts", "python-venv.sh"), str(venv),
                        os.path.dirname(BIN)], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    out = subprocess.run([str(venv / "bin" / "python"), "-c",
                          "import sys, fedlgc, torch; print(sys.prefix, fedlgc.__version__, "
                          "fedlgc.run_client.__name__)"],
                         capture_output=True, text=True, timeout=300, env=env, cwd="/")
    assert out.returncode == 0, out.stderr
    prefix, version, name = out.stdout.split()
    assert prefix == str(venv) and name == "run_client"
    assert version.count(".") == 2


def test_an_evaluate_that_returns_an_accuracy_makes_the_federated_accuracy(tmp_path, data):
    loop = tmp_path / "acc.py"
    loop.write_text(
        TRAIN +
        "def evaluate(module, info):\n"
        "    with torch.no_grad():\n"
        "        out = module(info.data.x.float())\n"
        "    y = info.data.y\n"
        "    return {'examples': len(y), 'accuracy': (out.argmax(1) == y).double().mean().item(),\n"
        "            'loss': torch.nn.functional.cross_entropy(out, y).item()}\n")
    run = tmp_path / "run"
    r = sim(run, f"--python-client={loop}", "--model=mlp", f"--data=npz:{data['train']}",
            "--test-data=none", "--clients=2", "--rounds=2")
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    with open(run / "report.json") as f:
        report = json.load(f)
    for row in report["rounds"]:
        fed = row["federated_eval"]
        assert fed["clients"] == 2 and 0 < fed["accuracy"] < 1, fed
        per = row["eval_accuracy"]
        # Equal shards, equal weights: the mean of the two clients' accuracies (each
        # rounded to whole right answers of its 120 held-out examples).
        assert abs(fed["accuracy"] - sum(per.values()) / 2) < 1e-9, (fed, per)
    assert report["summary"]["final_accuracy"] == report["rounds"][-1]["federated_eval"]["accuracy"]
