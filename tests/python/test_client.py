"""fedlgc.run_client against a real coordinator, beside C++ clients: every mode runs to the
end with two of each; a Python client SIGKILLed mid-upload and restarted loses nothing; a
module of another architecture and a model file of another hash are refused, clearly; C++
clients hosted in one process fetch the served model once and keep their own buffers."""

import json
import os
import signal

import numpy as np
import pytest
import torch

import fedlgc
from federation import Federation, SmallNet, export_model, fashion_npz, wait_for
from throttle import Throttle

ROUNDS = 3
JOB = ["--rounds=3", "--local-steps=10", "--batch=32", "--lr=0.05", "--round-timeout=120",
       "--eval-limit=500", "--seed=3"]
MODES = {
    "fedavg": ["--codec=qsgd(bits=8)", "--downlink-codec=qsgd(bits=4,norm=linf)"],
    "lgc": ["--codec=lgc()"],
    "lsgd": ["--mode=lsgd", "--codec=qsgd(bits=8)", "--lsgd-period=10",
             "--lsgd-global-period=20"],
    "sgp": ["--mode=sgp", "--codec=qsgd(bits=8)"],
}


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    d = tmp_path_factory.mktemp("data")
    paths = fashion_npz(str(d))
    paths["model"] = export_model(str(d / "smallnet.pt"))
    return paths


@pytest.fixture
def federations():
    made = []
    yield made
    for f in made:
        f.stop()


@pytest.mark.parametrize("mode", list(MODES))
def test_two_cpp_and_two_python_clients_run_every_mode(tmp_path, data, federations, mode):
    ids = ["cpp-0", "cpp-1", "py-2", "py-3"]
    f = Federation(str(tmp_path), ids, JOB + MODES[mode] + ["--min-clients=4"],
                   model=data["model"], test_npz=data["test"])
    federations.append(f)
    clients = [f.cpp_client(ids[0], 0, 4, data["train"]), f.cpp_client(ids[1], 1, 4, data["train"]),
               f.py_client(ids[2], 2, 4, data["train"]),
               f.py_client(ids[3], 3, 4, data["train"], extra=["--optimizer=adam", "--augment"])]
    assert f.wait(240) == 0, f.logs()
    for c in clients:
        assert c.wait(60) == 0, f.logs()
    rounds = f.rounds()
    assert [r["round"] for r in rounds] == list(range(1, ROUNDS + 1)), f.logs()
    for r in rounds:
        if mode == "lsgd":  # every client reports its loss; the elected leader uploads
            assert sorted(r["lsgd_loss"]) == sorted(ids), (r, f.logs())
        else:
            assert r["participants"] == 4, (r, f.logs())
    assert rounds[-1]["accuracy"] > 0.3, rounds
    for c in clients[2:]:
        assert f"trained {ROUNDS} rounds" in c.tail(), f.logs()
    # What the Python loop returned is in its round log: its steps of 32 (10, or LSGD's
    # period), and its loss.
    for cid in ids[2:]:
        with open(os.path.join(str(tmp_path), "clients", f"{cid}.rounds.jsonl")) as log:
            trained = [r for r in map(json.loads, log) if "train_samples" in r]
        assert {r["round"] for r in trained} == set(range(1, ROUNDS + 1)), trained
        assert all(r["train_samples"] in (320, 640) and r["metric_loss"] > 0
                   for r in trained), trained
    # The C++ clients had no file: they downloaded the coordinator's.
    models = os.listdir(os.path.join(str(tmp_path), "clients", "models"))
    assert len(models) == 1 and models[0].endswith(".pt")


def test_the_proximal_term_is_fedprox_and_zero_elsewhere():
    torch.manual_seed(0)
    module = torch.nn.Linear(3, 2)
    anchor = tuple(p.detach().clone() for p in module.parameters())
    info = fedlgc.RoundInfo(round=1, total_rounds=1, mode="fedavg", lr=0.1, local_epochs=1,
                            local_steps=0, batch_size=1, seed=1, model_version=0, prox_mu=0.3,
                            _anchor=anchor)
    assert float(fedlgc.proximal_term(module, info)) == 0.0  # at the round's start
    with torch.no_grad():
        for p in module.parameters():
            p.add_(torch.randn_like(p))
    term = fedlgc.proximal_term(module, info)
    want = 0.15 * sum(float(((p - a) ** 2).sum()) for p, a in zip(module.parameters(), anchor))
    assert abs(float(term) - want) < 1e-5
    term.backward()  # its gradient is mu (w - w_round)
    for p, a in zip(module.parameters(), anchor):
        assert torch.allclose(p.grad, 0.3 * (p.detach() - a), atol=1e-6)
    plain = fedlgc.RoundInfo(round=1, total_rounds=1, mode="fedavg", lr=0.1, local_epochs=1,
                             local_steps=0, batch_size=1, seed=1, model_version=0)
    assert float(fedlgc.proximal_term(module, plain)) == 0.0


def test_scaffold_step_moves_the_trainable_parameters_by_lr_times_the_correction():
    torch.manual_seed(0)
    module = torch.nn.Sequential(torch.nn.Linear(3, 2), torch.nn.Linear(2, 1))
    module[1].bias.requires_grad_(False)  # frozen: not in the flat vector, never corrected
    module.register_parameter("empty", torch.nn.Parameter(torch.empty(0)))  # not in it
    flat = np.arange(sum(p.numel() for p in module.parameters() if p.requires_grad),
                     dtype=np.float32) / 10
    correction = fedlgc._scaffold_correction(module, flat)
    assert [tuple(c.shape) for c in correction] == [(2, 3), (2,), (1, 2)]
    assert torch.equal(correction[2].flatten(), torch.from_numpy(flat[8:10]))
    info = fedlgc.RoundInfo(round=1, total_rounds=1, mode="fedavg", lr=0.1, local_epochs=1,
                            local_steps=0, batch_size=1, seed=1, model_version=0, scaffold=True,
                            _correction=correction)
    opt = torch.optim.SGD(module.parameters(), lr=0.05, momentum=0.9)
    for _ in range(2):
        frozen = module[1].bias.detach().clone()
        opt.zero_grad()
        module(torch.ones(4, 3)).sum().backward()
        opt.step()
        stepped = [p.detach().clone() for p in module.parameters()]
        fedlgc.scaffold_step(module, info, opt)
        trainable = [i for i, p in enumerate(module.parameters())
                     if p.requires_grad and p.numel() > 0]
        for k, i in enumerate(trainable):  # exactly -lr c, after the optimizer's step
            p = list(module.parameters())[i]
            assert torch.allclose(p.detach(), stepped[i] - 0.05 * correction[k], atol=1e-7)
        assert torch.equal(module[1].bias.detach(), frozen)
    assert info._steps == {"steps": 2, "lr_sum": 0.1}
    plain = fedlgc.RoundInfo(round=1, total_rounds=1, mode="fedavg", lr=0.1, local_epochs=1,
                             local_steps=0, batch_size=1, seed=1, model_version=0)
    fedlgc.scaffold_step(module, plain, opt)  # no SCAFFOLD: nothing moves, nothing counted
    assert plain._steps["steps"] == 0


@pytest.mark.parametrize("algorithm,flag,needs", [
    ("fedprox(mu=0.5)", "--prox", "fedlgc.proximal_term(module, info)"),
    ("scaffold", "--scaffold", "fedlgc.scaffold_step(module, info, optimizer)")])
def test_an_algorithm_reaches_cpp_and_python_loops_and_a_loop_without_its_step_is_stopped(
        tmp_path, data, federations, algorithm, flag, needs):
    job = ["--local-steps=10", "--batch=32", "--lr=0.05", "--round-timeout=120",
           "--eval-limit=500", "--seed=3", "--codec=fp32", f"--algorithm={algorithm}"]
    for d in ("lone", "job"):
        (tmp_path / d).mkdir()
    # A loop that leaves the algorithm's part out stops, with a message that says what to
    # add.
    lone = Federation(str(tmp_path / "lone"), ["py-9"], job + ["--rounds=1", "--min-clients=1"],
                      model=data["model"], test_npz=data["test"])
    federations.append(lone)
    bad = lone.py_client("py-9", 0, 3, data["train"])
    assert bad.wait(120) not in (0, None), lone.logs()
    assert needs in bad.tail(), lone.logs()
    lone.stop()
    ids = ["cpp-0", "py-1"]
    f = Federation(str(tmp_path / "job"), ids, job + ["--rounds=2", "--min-clients=2"],
                   model=data["model"], test_npz=data["test"])
    federations.append(f)
    clients = [f.cpp_client(ids[0], 0, 3, data["train"]),
               f.py_client(ids[1], 1, 3, data["train"], extra=[flag])]
    assert f.wait(240) == 0, f.logs()
    for c in clients:
        assert c.wait(60) == 0, f.logs()
    rounds = f.rounds()
    assert [r["round"] for r in rounds] == [1, 2], f.logs()
    assert all(r["participants"] == 2 for r in rounds), rounds
    if algorithm == "scaffold":
        # Both clients' control variate changes counted every round, and c moved; each
        # change is a second model-sized part of the update, its bytes counted as uplink.
        dim = sum(int(np.prod(shape)) for _, shape in
                  fedlgc.layout_of(torch.jit.load(data["model"])))
        assert all(r["scaffold_counted"] == 2 and r["scaffold_control_norm"] > 0
                   and r["raw_uplink_bytes"] == 2 * 2 * 4 * dim
                   and r["uplink_bytes"] > 2 * 2 * 4 * dim for r in rounds), (dim, rounds)


def run_kill_job(work, data, kill):
    """One C++ and one Python client, fp32 updates in 32 KiB chunks; with `kill`, the
    Python client is SIGKILLed once the first chunks of its round-1 update have arrived
    (its link is slowed to 2 Mbit/s by the proxy) and restarted from its state folder."""
    ids = ["cpp-0", "py-1"]
    f = Federation(work, ids, ["--rounds=2", "--local-steps=5", "--batch=32", "--lr=0.05",
                               "--codec=fp32", "--chunk-bytes=32768", "--min-clients=2",
                               "--round-timeout=120", "--eval-limit=500", "--seed=5"],
                   model=data["model"], test_npz=data["test"])
    proxy = Throttle(f.port, bytes_per_second=250_000)
    try:
        cpp = f.cpp_client(ids[0], 0, 2, data["train"])
        py = f.py_client(ids[1], 1, 2, data["train"], server=f"127.0.0.1:{proxy.port}")
        if kill:
            assert wait_for(lambda: f.metric("fedlgc_uplink_wire_bytes_total", client="py-1") > 0,
                            120), f.logs()
            py.kill(signal.SIGKILL)
            sent = f.metric("fedlgc_uplink_wire_bytes_total", client="py-1")
            update = 4 * sum(n for _, shape in fedlgc.layout_of(SmallNet())
                             for n in [int(np.prod(shape))])
            assert sent < 0.9 * update, "the whole update arrived before the kill"
            py = f.py_client(ids[1], 1, 2, data["train"], server=f"127.0.0.1:{proxy.port}")
        assert f.wait(240) == 0, f.logs()
        assert cpp.wait(60) == 0 and py.wait(60) == 0, f.logs()
        return f.rounds(), f
    finally:
        f.stop()
        proxy.stop()


def test_a_python_client_killed_mid_upload_loses_nothing(tmp_path, data):
    clean, _ = run_kill_job(str(tmp_path / "clean"), data, kill=False)
    killed, f = run_kill_job(str(tmp_path / "killed"), data, kill=True)
    assert len(killed) == 2
    for r in killed:
        assert r["participants"] == 2 and r["stragglers"] == 0, r
        # Every coordinate of both updates counted once: nothing lost, nothing twice.
        assert r["raw_uplink_bytes"] == clean[0]["raw_uplink_bytes"], (r, clean[0])
    # Same seeds, same data, the same updates: the same model (up to the order in which
    # chunks were added).
    for a, b in zip(clean, killed):
        assert abs(a["loss"] - b["loss"]) < 1e-4 * max(1.0, a["loss"]), (a, b)


def test_a_module_of_another_architecture_is_refused(tmp_path, data, federations):
    f = Federation(str(tmp_path), ["py-0"], ["--rounds=1", "--local-steps=2", "--min-clients=1",
                                            "--round-timeout=60"],
                   model=data["model"], test_npz=data["test"])
    federations.append(f)
    c = f.py_client("py-0", 0, 1, data["train"], extra=["--wrong-model"])
    assert c.wait(120) not in (None, 0), f.logs()
    log = c.tail(30)
    assert "does not match the job's model" in log and "fc2.weight [7, 48]" in log, log


def test_a_model_file_of_another_hash_is_refused_with_both_hashes(tmp_path, data, federations):
    other = export_model(str(tmp_path / "other.pt"), seed=1)
    f = Federation(str(tmp_path), ["cpp-0"], ["--rounds=1", "--min-clients=1"],
                   model=data["model"], test_npz=data["test"])
    federations.append(f)
    c = f.cpp_client("cpp-0", 0, 1, data["train"], extra=[f"--model={other}"])
    assert c.wait(60) == 1, f.logs()
    log = c.tail()
    assert "FAILED_PRECONDITION" in log and log.count("sha256:") >= 2, log
    assert wait_for(lambda: f.metric("fedlgc_rejected_total", reason="model") == 1, 10)


def test_local_buffers_stay_with_each_client(tmp_path, data, federations):
    """--buffers local (FedBN): only the weights travel; each client keeps its own batch
    normalisation statistics in <state-dir>/<id>.own, the C++ client and the Python
    client alike, and the coordinator evaluates with batch statistics."""
    ids = ["cpp-0", "py-1"]
    work = str(tmp_path)
    f = Federation(work, ids, ["--rounds=2", "--local-steps=10", "--min-clients=2",
                               "--buffers=local", "--codec=qsgd(bits=8)", "--eval-limit=500",
                               f"--export={work}/global.pt"],
                   model=data["model"], test_npz=data["test"])
    federations.append(f)
    clients = [f.cpp_client(ids[0], 0, 2, data["train"], extra=[f"--export={work}/cpp-0.pt"]),
               f.py_client(ids[1], 1, 2, data["train"], extra=[f"--save-final={work}/py-1.npz"])]
    assert f.wait(180) == 0, f.logs()
    assert all(c.wait(60) == 0 for c in clients), f.logs()
    rounds = f.rounds()
    assert len(rounds) == 2 and all(r["participants"] == 2 for r in rounds), rounds
    assert rounds[-1]["accuracy"] > 0.3, rounds
    # SmallNet's weights without its 96 statistics: what each client sends.
    dim = sum(int(np.prod(s)) for _, s in fedlgc.layout_of(SmallNet(), "local"))
    assert rounds[0]["raw_uplink_bytes"] == 2 * 4 * dim
    kept = [np.fromfile(os.path.join(str(tmp_path), "clients", f"{c}.own"), np.float32)
            for c in ids]
    assert all(k.size == 96 for k in kept)
    assert not np.array_equal(kept[0], kept[1]), "each client has statistics of its own"
    assert not np.allclose(kept[0][48:], 1.0), "trained variances, not the initial ones"
    # What each hands over when the job ends: the coordinator's global parameters (with
    # the module's initial statistics, as its model.json says), and each client's
    # personalised model, the same parameters beside its own statistics.
    glob = np.load(f"{work}/global.npz")
    with open(f"{work}/global.json") as meta:
        assert json.load(meta)["buffers"] == "local"
    assert np.allclose(glob["bn.running_var"], 1.0)
    for cid, path, own in (("cpp-0", f"{work}/cpp-0.npz", kept[0]),
                           ("py-1", f"{work}/py-1.npz", kept[1])):
        mine = np.load(path)
        for name in ("fc1.weight", "fc1.bias", "bn.weight", "bn.bias", "fc2.weight", "fc2.bias"):
            assert np.array_equal(mine[name], glob[name]), (cid, name)
        assert np.array_equal(mine["bn.running_mean"], own[:48]), cid
        assert np.array_equal(mine["bn.running_var"], own[48:]), cid


def test_hosted_clients_fetch_the_model_once_and_keep_their_own_buffers(tmp_path, data,
                                                                         federations):
    """Four clients in one fedlgc-edge process (--client-ids), the job's TorchScript model served
    by the coordinator and --buffers local: the process downloads the model once for all of
    them, and each client trains on its own shard with its own statistics, kept in its own
    <id>.own, although they share two models (--train-slots 2)."""
    ids = [f"host-{i}" for i in range(4)]
    f = Federation(str(tmp_path), ids, ["--rounds=2", "--local-steps=10", "--min-clients=4",
                                        "--buffers=local", "--codec=qsgd(bits=8)",
                                        "--eval-limit=500"],
                   model=data["model"], test_npz=data["test"])
    federations.append(f)
    host = f.cpp_client("host-{i}", 0, 4, data["train"],
                        extra=["--client-ids=0-3", "--train-slots=2"])
    assert f.wait(180) == 0, f.logs()
    assert host.wait(60) == 0, f.logs()
    rounds = f.rounds()
    assert len(rounds) == 2 and all(r["participants"] == 4 for r in rounds), rounds
    dim = sum(int(np.prod(s)) for _, s in fedlgc.layout_of(SmallNet(), "local"))
    assert rounds[0]["raw_uplink_bytes"] == 4 * 4 * dim
    log = host.tail(200)
    assert log.count("downloading the job's model") == 1, log
    models = os.listdir(os.path.join(str(tmp_path), "clients", "models"))
    assert len(models) == 1 and models[0].endswith(".pt"), models
    kept = [np.fromfile(os.path.join(str(tmp_path), "clients", f"{c}.own"), np.float32)
            for c in ids]
    assert all(k.size == 96 for k in kept)
    assert all(not np.array_equal(kept[i], kept[j]) for i in range(4) for j in range(i)), \
        "each client has statistics of its own"


def test_clients_evaluate_where_the_data_lives_without_a_test_set(tmp_path, data, federations):
    """A coordinator without a test set, as it is (no --test-data, and the default
    Fashion-MNIST not where it looks): the clients evaluate (--eval auto). A client with a
    file of its own to evaluate on (--eval-data) and one holding out a tenth of its shard
    answer every round; the coordinator weighs them, exports Prometheus gauges and picks the
    best round by them."""
    work = str(tmp_path)
    ids = ["cpp-0", "cpp-1"]
    f = Federation(work, ids, ["--rounds=3", "--local-steps=10", "--min-clients=2",
                               f"--data-dir={work}/not-installed", "--eval-fraction=0.1",
                               f"--export={work}/best.pt", "--export-best"],
                   model=data["model"])
    federations.append(f)
    clients = [f.cpp_client(ids[0], 0, 2, data["train"], extra=[f"--eval-data=npz:{data['test']}"]),
               f.cpp_client(ids[1], 1, 2, data["train"])]
    assert wait_for(lambda: f.metric("fedlgc_eval_answers_total", outcome="reported") >= 2,
                    180), f.logs()
    assert 0 < f.metric("fedlgc_federated_accuracy") <= 1
    assert f.wait(180) == 0, f.logs()
    assert all(c.wait(60) == 0 for c in clients), f.logs()
    rounds = f.rounds()
    assert len(rounds) == 3 and all(r["accuracy"] is None or r["accuracy"] < 0 for r in rounds)
    for r in rounds:
        fed = r["federated_eval"]
        # cpp-0: test.npz's 1,000 images; cpp-1: a tenth of its 1,000.
        assert fed["clients"] == 2 and fed["missing"] == 0, fed
        assert fed["examples"] == 1000 + 100, fed
        assert sorted(r["eval_examples"].items()) == [("cpp-0", 1000.0), ("cpp-1", 100.0)]
    best = max(rounds, key=lambda r: r["federated_eval"]["accuracy"])
    with open(f"{work}/best.json") as meta:
        m = json.load(meta)
    assert m["evaluated_on"] == "clients" and m["round"] == best["round"], (m, rounds)
    with open(f.coordinator.log) as log:
        assert "no test set: fashion-mnist is not installed" in log.read(), f.logs()


def test_frozen_parameters_stay_home_and_personal_ones_with_each_client(tmp_path, data,
                                                                       federations):
    """--freeze and --local-params: the frozen first layer (fc1, 37,680 values) and each
    client's personal classifier (fc2, 490) are not in the flat vector, so every upload and
    every download of the model counts exactly the batch normalisation weights and
    statistics (192 values, 4 bytes each in float32) and never the others. The frozen ones
    end as the model file has them everywhere, the Python client's freshly built module
    included; each client trains its own head, keeps it in <id>.own across a restart, hands
    it over in its export, and evaluates the global model with it."""
    ids = ["cpp-0", "py-1"]
    work = str(tmp_path)
    f = Federation(work, ids, ["--rounds=3", "--local-steps=10", "--min-clients=2",
                               "--freeze=^fc1\\.", "--local-params=^fc2\\.",
                               "--eval-fraction=0.2", f"--export={work}/global.pt"],
                   model=data["model"], test_npz=data["test"])
    federations.append(f)
    cpp = f.cpp_client(ids[0], 0, 2, data["train"], extra=["--exit-after-rounds=1"])
    py = f.py_client(ids[1], 1, 2, data["train"], extra=[f"--save-final={work}/py-1.npz"])
    assert cpp.wait(120) == 0, f.logs()
    own_after_1 = np.fromfile(os.path.join(work, "clients", "cpp-0.own"), np.float32)
    assert own_after_1.size == 490
    # Back on the same state folder: it trains on from its own head, not the file's.
    cpp = f.cpp_client(ids[0], 0, 2, data["train"], extra=[f"--export={work}/cpp-0.pt"])
    assert f.wait(180) == 0, f.logs()
    assert cpp.wait(60) == 0 and py.wait(60) == 0, f.logs()
    with open(cpp.log) as log:
        assert "its own parameters and buffers from" in log.read(), f.logs()
    with open(f.coordinator.log) as log:
        assert ("192 values travel with its buffers, 37680 frozen, 490 personal stay home"
                in log.read()), f.logs()

    module = SmallNet()
    for p in module.fc1.parameters():
        p.requires_grad_(False)
    dim = sum(int(np.prod(s)) for _, s in
              fedlgc.layout_of(module, "average", local={"fc2.weight", "fc2.bias"}))
    assert dim == 4 * 48  # bn's weight and bias, and its averaged statistics
    rounds = f.rounds()
    assert [r["round"] for r in rounds] == [1, 2, 3], f.logs()
    for r in rounds:
        assert r["participants"] == 2, r
        assert r["raw_uplink_bytes"] == 2 * 4 * dim, r  # float32 updates of exactly dim values
        assert r["uplink_bytes"] < 2 * (4 * dim + 4096), r
        if r["round"] > 1:  # rounds 2-3: whole float32 models of dim values and nothing else
            assert r["downlink_bytes"] > 0 and r["downlink_bytes"] % (4 * dim) == 0, r
    # Evaluated on the clients (auto, under --local-params), each with its own head.
    evals = [r["federated_eval"] for r in rounds if r.get("federated_eval")]
    assert evals and evals[-1]["clients"] >= 1 and evals[-1]["accuracy"] > 0.3, rounds

    initial = torch.jit.load(data["model"]).state_dict()
    glob = np.load(f"{work}/global.npz")
    with open(f"{work}/global.json") as meta:
        m = json.load(meta)
        assert m["freeze"] == "^fc1\\." and m["local_params"] == "^fc2\\.", m
    mine = {"cpp-0": np.load(f"{work}/cpp-0.npz"), "py-1": np.load(f"{work}/py-1.npz")}
    kept = {c: np.fromfile(os.path.join(work, "clients", f"{c}.own"), np.float32) for c in ids}
    for name in ("fc1.weight", "fc1.bias"):  # frozen: the file's, everywhere
        assert np.array_equal(glob[name], initial[name].numpy()), name
        for c in ids:
            assert np.array_equal(mine[c][name], initial[name].numpy()), (c, name)
    for name in ("bn.weight", "bn.bias", "bn.running_mean", "bn.running_var"):
        assert not np.array_equal(glob[name], initial[name].numpy()), name  # trained
        for c in ids:
            assert np.allclose(mine[c][name], glob[name], atol=1e-6), (c, name)
    # The personal head: the coordinator's export holds the file's, each client its own.
    assert np.array_equal(glob["fc2.weight"], initial["fc2.weight"].numpy())
    for c in ids:
        head = np.concatenate([mine[c]["fc2.weight"].ravel(), mine[c]["fc2.bias"]])
        assert np.array_equal(head, kept[c]), c
        assert not np.allclose(head[:480], initial["fc2.weight"].numpy().ravel()), c
    assert not np.allclose(kept["cpp-0"], kept["py-1"]), "each client has a head of its own"
    assert not np.array_equal(kept["cpp-0"], own_after_1), "trained on after the restart"
