"""fedlgc.reestimate_statistics against torch's own cumulative average: the statistics a
module's batch normalisation would hold after these batches with momentum None, the rest
of the module in eval mode; the same for the module scripted; weights, counters and
training flags untouched; buffers of those names that a module does not update are left
alone."""

import copy

import numpy as np
import pytest
import torch
from torch import nn

import fedlgc


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
