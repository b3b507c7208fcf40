"""fedlgc.reestimate_statistics against torch's own cumulative average: the statistics a
module's batch normalisation would hold after these batches with momentum None, the rest
of the module in eval mode; the same for the module scripted; weights, counters and
training flags untouched; buffers of those names that a module does not update are left
alone. And --bn-stats on in a job: a sparse round's model evaluated and handed over with
the statistics its clients re-estimated."""

import copy
import json
import os
import shutil
import subprocess

import numpy as np
import pytest
import torch
from torch import nn

import fedlgc
from federation import BIN, REPO, Federation, fashion_npz
from test_export import score


class Whiten(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.register_buffer("running_mean", torch.zeros(c))
        self.register_buffer("running_var", torch.ones(c))

    def forward(self, x):
        return (x - self.running_mean) / torch.sqrt(self.running_var + 1e-5)


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(1, 4, 3, padding=1)
        self.bn2 = nn.BatchNorm2d(4)  # momentum 0.1
        self.drop = nn.Dropout(0.5)
        self.fc = nn.Linear(4 * 6 * 6, 8)
        self.bn1 = nn.BatchNorm1d(8, momentum=0.3)
        self.whiten = Whiten(8)
        self.head = nn.Linear(8, 3)

    def forward(self, x):
        h = self.drop(torch.relu(self.bn2(self.conv(x)))).flatten(1)
        return self.head(self.whiten(self.bn1(self.fc(h))))


def batches(seed=0, n=5, size=16):
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(size, 1, 6, 6, generator=g) * 3 + 1 for _ in range(n)]


def reference(module, data):
    """torch's cumulative average (momentum None) of each BatchNorm's statistics, the
    module otherwise in eval mode (dropout off)."""
    ref = copy.deepcopy(module)
    ref.eval()
    for m in ref.modules():
        if isinstance(m, nn.modules.batchnorm._BatchNorm):
            m.momentum = None
            m.reset_running_stats()
            m.train()
    with torch.no_grad():
        for x in data:
            ref(x)
    return ref


def test_the_estimate_is_torchs_cumulative_average_and_nothing_else_moves():
    torch.manual_seed(1)
    net = Net()
    net.train()
    with torch.no_grad():
        net.whiten.running_mean.uniform_(-1, 1)
        net.bn2.running_var.fill_(7.0)
        net.bn2.num_batches_tracked.fill_(11)
    before = {k: v.clone() for k, v in net.state_dict().items()}
    data = batches()
    ref = reference(net, data)
    st = fedlgc.reestimate_statistics(net, data)
    assert (st.examples, st.batches) == (80, 5)
    assert st.skipped == [2]  # the pairs: bn2, bn1, whiten
    expect_mean = torch.cat([ref.bn2.running_mean, ref.bn1.running_mean]).numpy()
    expect_var = torch.cat([ref.bn2.running_var, ref.bn1.running_var]).numpy()
    np.testing.assert_allclose(st.mean[:12], expect_mean, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(st.var[:12], expect_var, rtol=1e-5, atol=1e-6)
    assert not st.mean[12:].any() and not st.var[12:].any()
    np.testing.assert_allclose(net.bn2.running_var.numpy(), ref.bn2.running_var.numpy(),
                               rtol=1e-5)
    np.testing.assert_allclose(net.bn1.running_mean.numpy(), ref.bn1.running_mean.numpy(),
                               rtol=1e-5, atol=1e-6)
    for k, v in net.state_dict().items():
        if k.startswith(("bn2.running", "bn1.running")):
            continue
        assert torch.equal(v, before[k]), k  # weights, counters, whiten's buffers
    assert all(m.training for m in net.modules())


def test_a_scripted_module_gives_the_same_estimate():
    torch.manual_seed(2)
    net = Net()
    scripted = torch.jit.script(copy.deepcopy(net))
    scripted.eval()
    data = batches(seed=3)
    a = fedlgc.reestimate_statistics(net, data)
    b = fedlgc.reestimate_statistics(scripted, data)
    np.testing.assert_allclose(a.mean, b.mean, rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(a.var, b.var, rtol=1e-6, atol=1e-7)
    assert b.skipped == [2]
    assert not scripted.training and not scripted.bn2.training
    torch.testing.assert_close(scripted.bn1.running_var, net.bn1.running_var)


def test_batches_of_one_are_left_out_and_a_module_without_statistics_sets_nothing():
    torch.manual_seed(3)
    net = Net()
    data = batches(n=3)
    one = [x[:1] for x in data]
    st = fedlgc.reestimate_statistics(net, one + data, max_batches=2)
    assert (st.examples, st.batches) == (32, 2)
    ref = reference(net, data[:2])
    np.testing.assert_allclose(st.var[:4], ref.bn2.running_var.numpy(), rtol=1e-5)
    kept = net.bn2.running_var.clone()
    with pytest.raises(ValueError, match="no batch of at least 2"):
        fedlgc.reestimate_statistics(net, one)
    assert torch.equal(net.bn2.running_var, kept)
    plain = nn.Sequential(nn.Flatten(), nn.Linear(36, 3))
    assert fedlgc.reestimate_statistics(plain, data).batches == 0


def test_a_statistics_hook_result_is_checked_before_it_travels():
    from fedlgc import _parse_statistics
    net = Net()
    st = fedlgc.reestimate_statistics(net, batches())
    examples, count, mean, var, skipped = _parse_statistics(st, net)
    assert (examples, count, skipped) == (80, 5, [2])  # Whiten is the third pair
    assert len(mean) == len(var) == 4 + 8 + 8
    assert _parse_statistics(None, net) is None
    with pytest.raises(TypeError, match="reestimate_statistics"):
        _parse_statistics({"examples": 80}, net)
    other = fedlgc.reestimate_statistics(nn.Sequential(nn.BatchNorm1d(3)), [torch.randn(4, 3)])
    with pytest.raises(ValueError, match="3 means and 3 variances for a module of 20"):
        _parse_statistics(other, net)


@pytest.fixture(scope="module")
def net_job(tmp_path_factory):
    """examples/python_loop's Net (two convolutions with BatchNorm) as the job's TorchScript
    file, and Fashion-MNIST slices."""
    d = tmp_path_factory.mktemp("bn")
    paths = fashion_npz(str(d), train=4000, test=2000)
    paths["net"] = str(d / "net.pt")
    loop = os.path.join(REPO, "examples", "python_loop")
    subprocess.run(["/usr/bin/python3", os.path.join(loop, "export.py"), paths["net"]],
                   check=True, capture_output=True, timeout=300, cwd=loop)
    return paths


def run_sim(run, job, *args, every_round=False):
    argv = [os.path.join(BIN, "fedlgc-sim"), "--insecure", "--quiet", f"--run-dir={run}",
            f"--report={run}/report.json", "--torch-threads=1", f"--model={job['net']}",
            f"--data=npz:{job['train']}", f"--test-data=npz:{job['test']}", "--clients=4",
            "--rounds=1", "--local-epochs=3", "--downlink-codec=fp32", "--seed=1", *args]
    r = subprocess.run(argv, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    with open(os.path.join(run, "report.json")) as f:
        rounds = json.load(f)["rounds"]
    return rounds if every_round else rounds[-1]


# The model guard judges a sparse round's candidate of a BatchNorm model with statistics
# that fit its weights: under the phase a candidate holds the last commit's statistics
# beside new weights (the clients' own come only after the commit), and judged with those
# the ResNet's every candidate after round 1 read as a loss blow-up and no update
# committed. Here the guard allows at most the last loss + 0.1: every round must commit
# every client, and the guard's loss must be near the loss the committed model (with the
# clients' statistics) is evaluated at.
def test_the_guard_judges_a_sparse_candidate_with_statistics_of_its_own(tmp_path, net_job):
    rounds = run_sim(str(tmp_path / "guard"), net_job,
                     "--codec=topk(ratio=0.01,values=qsgd(bits=8))", "--rounds=3",
                     "--local-epochs=1", "--guard-max-loss-ratio=1", "--bn-stats-batches=4",
                     "--bn-stats-batch=100", every_round=True)
    for r in rounds:
        print(f"round {r['round']}: guard {r.get('guard')} loss {r.get('guard_loss')}, "
              f"evaluated {r.get('loss')}, counted {r.get('participants')}")
    assert [r["round"] for r in rounds] == [1, 2, 3]
    for r in rounds:
        assert r["guard"] == "passed" and r["guard_excluded"] == 0, r
        assert r["bn_stats"] == "committed", r
    for r in rounds[1:]:
        assert abs(r["guard_loss"] - r["loss"]) < 0.25 * r["loss"] + 0.05, r


# Round 1 of a BatchNorm model under top-1%: with the statistics phase (the default,
# --bn-stats auto, runs it for a compressed job) every client's estimate is pooled and
# committed as a version of its own, which the coordinator then evaluates and exports;
# without it (--bn-stats off) the averaged statistics do not belong to the weights.
def test_the_statistics_phase_gives_a_sparse_round_statistics_that_fit_its_weights(
        tmp_path, net_job):
    top = "--codec=topk(ratio=0.01,values=qsgd(bits=8))"
    plain = run_sim(str(tmp_path / "plain"), net_job, top, "--bn-stats=off")
    phase = run_sim(str(tmp_path / "phase"), net_job, top,
                    "--bn-stats-batches=4", "--bn-stats-batch=100")
    assert "bn_stats" not in plain
    assert phase["bn_stats"] == "committed", phase
    assert phase["bn_stats_asked"] == 4 and phase["bn_stats_answers"] == 4, phase
    # 1,000 examples a client, at most 4 batches of 100 each.
    assert phase["bn_stats_examples"] == 4 * 400, phase
    # The same weights (same seed, codec and clients), statistics that fit them.
    print("round 1:", plain["accuracy"], "as averaged,", phase["accuracy"], "re-estimated")
    assert phase["accuracy"] > plain["accuracy"] + 0.10, (plain["accuracy"], phase["accuracy"])
    # What was evaluated is what is handed over: the statistics' version.
    with open(tmp_path / "phase" / "model.json") as f:
        meta = json.load(f)
    assert meta["model_version"] == 2, meta
    got = score(str(tmp_path / "phase" / "model.pt"), net_job["test"])
    assert abs(got["accuracy"] - phase["accuracy"]) <= 0.005, (got, phase["accuracy"])


# The same phase answered by Python training loops: examples/python_loop/loop.py's
# statistics(module, info) through run_client(statistics=...), and a loop without one,
# whose clients decline and leave the round's averaged statistics.
def test_python_clients_answer_the_phase_through_their_statistics_hook(tmp_path, net_job):
    loop = os.path.join(REPO, "examples", "python_loop", "loop.py")
    without = tmp_path / "nohook.py"
    with open(loop) as f:
        text = f.read()
    # The example's loop with its statistics() taken out.
    without.write_text(text.replace("def statistics(module, info):", "def _unused(module, info):"))
    shutil.copy(os.path.join(REPO, "examples", "python_loop", "model.py"), tmp_path)
    flags = ("--codec=topk(ratio=0.01,values=qsgd(bits=8))", "--local-steps=40", "--bn-stats=on",
             "--bn-stats-batches=3", "--bn-stats-batch=50")
    declined = run_sim(str(tmp_path / "declined"), net_job, f"--python-client={without}", *flags)
    assert declined["bn_stats"] == "none", declined
    assert declined["bn_stats_declined"] == 4, declined
    phase = run_sim(str(tmp_path / "phase"), net_job, f"--python-client={loop}", *flags)
    assert phase["bn_stats"] == "committed", phase
    assert phase["bn_stats_answers"] == 4 and phase["bn_stats_declined"] == 0, phase
    assert phase["bn_stats_examples"] == 4 * 150, phase
    print("round 1, Python clients:", declined["accuracy"], "as averaged,", phase["accuracy"],
          "re-estimated")
    # The same weights (the loop seeds its batches with the round's seed); measured 28.4%
    # as averaged and 35.9% re-estimated.
    assert phase["accuracy"] > declined["accuracy"] + 0.04, (declined["accuracy"],
                                                             phase["accuracy"])
    got = score(str(tmp_path / "phase" / "model.pt"), net_job["test"])
    assert abs(got["accuracy"] - phase["accuracy"]) <= 0.005, (got, phase["accuracy"])


def run_phase_job(work, job, failpoint=None):
    """Three C++ clients, two top-1% rounds of the BatchNorm Net with --bn-stats on; with
    `failpoint`, the coordinator exits there in round 1's phase (as if killed) and a new one
    takes its state folder and port. Returns the round log, the final model's tensors and
    the coordinator's log."""
    ids = ["c0", "c1", "c2"]
    env = {"FEDLGC_FAILPOINT": f"{failpoint}:1"} if failpoint else None
    f = Federation(work, ids, ["--rounds=2", "--local-steps=20", "--batch=32", "--lr=0.05",
                               "--codec=topk(ratio=0.01,values=qsgd(bits=8))",
                               "--downlink-codec=fp32", "--min-clients=3", "--round-timeout=120",
                               "--bn-stats=on", "--bn-stats-batches=3", "--bn-stats-batch=50",
                               "--seed=3", "--eval-limit=500", f"--export={work}/final"],
                   model=job["net"], test_npz=job["test"], coordinator_env=env)
    try:
        clients = [f.cpp_client(c, i, 3, job["train"]) for i, c in enumerate(ids)]
        if failpoint:
            assert f.wait(180) == 99, f.logs()
            f.restart_coordinator()
        assert f.wait(240) == 0, f.logs()
        assert all(c.wait(60) == 0 for c in clients), f.logs()
        with np.load(f"{work}/final.npz") as z:
            model = {k: z[k] for k in z.files}
        with open(f.coordinator.log) as log:
            return f.rounds(), model, log.read()
    finally:
        f.stop()


@pytest.fixture(scope="module")
def clean_phase_job(tmp_path_factory, net_job):
    clean, want, _ = run_phase_job(str(tmp_path_factory.mktemp("clean")), net_job)
    assert [r.get("bn_stats") for r in clean] == ["committed", "committed"], clean
    return clean, want


# The coordinator gone in round 1's statistics phase, once with the clients asked and none
# heard, once with their answers pooled into the next version but its checkpoint not
# written: the restarted coordinator runs the phase again before round 2 (its log line:
# the final model alone would not show it, as round 2's phase re-estimates the statistics
# and BatchNorm trains on each batch's own), and the job ends with the uninterrupted job's
# model (up to the order in which updates were added).
@pytest.mark.parametrize("failpoint", ["statistics-asked", "statistics-pooled"])
def test_a_coordinator_gone_in_the_statistics_phase_runs_it_again(tmp_path, net_job, failpoint,
                                                                 clean_phase_job):
    clean, want = clean_phase_job
    rounds, got, log = run_phase_job(str(tmp_path / "killed"), net_job, failpoint)
    assert f"failpoint {failpoint}:1 reached" in log, log[-3000:]
    assert "statistics of round 1: committed" in log, log[-3000:]
    assert [r["round"] for r in rounds] == [1, 2], rounds
    assert rounds[1]["bn_stats"] == "committed", rounds
    assert sorted(got) == sorted(want)
    for name in want:
        scale = max(1.0, float(np.abs(want[name]).max()))
        assert np.abs(got[name] - want[name]).max() <= 1e-4 * scale, name
    assert abs(rounds[1]["accuracy"] - clean[1]["accuracy"]) <= 0.002, (rounds[1], clean[1])
