"""Client-level verbs vectorised across clients (StackedLoss, vmap) against the per-client loop: same numbers, same streams."""

from __future__ import annotations

import math

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from torch import nn  # noqa: E402
from torch.nn import functional as F  # noqa: E402

from privfedstat.deep import DeepDPFedAvg, FailingTensorData, TensorFederatedData, TorchClients  # noqa: E402
from privfedstat.deep.hifedprox import DeepHiFedProx  # noqa: E402
from privfedstat.deep.models import DigitsCNN  # noqa: E402
from privfedstat.deep.normec import DeepClippedFedAvg, DeepFedAlphaNormEC  # noqa: E402
from privfedstat.deep.stacked import StackedLoss  # noqa: E402

torch.set_num_threads(1)
pytestmark = [pytest.mark.slow, pytest.mark.filterwarnings("ignore::UserWarning")]

SIZES = (5, 3, 5, 8, 2, 5)  # unequal: the vectorised path groups the clients by batch size


def digits_model(seed=0) -> nn.Module:
    torch.manual_seed(seed)
    return DigitsCNN()


def digits_data(sizes=SIZES, seed=0) -> TensorFederatedData:
    g = torch.Generator().manual_seed(seed)
    n = sum(sizes)
    return TensorFederatedData.from_pooled(torch.rand(n, 1, 8, 8, generator=g), torch.randint(0, 10, (n,), generator=g),
                                           sizes=list(sizes))


def both(verb, data=None, seed=3, calls=2, **kw):
    """The replies of ``calls`` successive requests of ``verb`` from vectorised and from looping clients."""
    data = data or digits_data()
    replies = []
    for vectorise in (True, False):
        clients = TorchClients(data, digits_model(), F.cross_entropy, np.random.SeedSequence(seed), batch_size=3,
                               vectorise=vectorise)
        assert clients._stacked.vectorised is vectorise
        theta = clients.initial_parameters()
        replies.append([getattr(clients, verb)(theta, **kw) for _ in range(calls)])
    return replies


def assert_same(fast, slow, atol=1e-6):
    for a, b in zip(fast, slow):
        np.testing.assert_array_equal(a.answered, b.answered)
        np.testing.assert_allclose(a.values, b.values, atol=atol, rtol=0)
        for ra, rb in zip(a.releases, b.releases):
            assert ra.unit == rb.unit and ra.stage == rb.stage
            np.testing.assert_array_equal(ra.sigma, rb.sigma)
            np.testing.assert_array_equal(ra.sensitivity, rb.sensitivity)


def test_stacked_loss_equals_one_call_per_client():
    data = digits_data()
    model = digits_model()
    names = [n for n, _ in model.named_parameters()]
    fast = StackedLoss(model, F.cross_entropy, names, data.inputs, data.targets)
    slow = StackedLoss(model, F.cross_entropy, names, data.inputs, data.targets, vectorise=False)
    assert fast.vectorised and not slow.vectorised
    rng = np.random.default_rng(0)
    k = len(SIZES)
    params = {n: p.detach() + 0.1 * torch.from_numpy(rng.standard_normal((k, *p.shape)).astype(np.float32))
              for n, p in model.named_parameters()}
    batches = [torch.arange(int(lo), int(hi)) for lo, hi in zip(data.offsets[:-1], data.offsets[1:])]
    (f1, g1), (f2, g2) = fast.value_and_gradient(params, batches), slow.value_and_gradient(params, batches)
    torch.testing.assert_close(f1, f2, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(fast.value(params, batches), f2, rtol=1e-5, atol=1e-6)
    for n in names:
        torch.testing.assert_close(g1[n], g2[n], rtol=1e-4, atol=1e-6)
    # client 3 directly: the mean loss of its rows at its parameters, and its gradient
    own = {n: p[3].clone().requires_grad_() for n, p in params.items()}
    loss = F.cross_entropy(torch.func.functional_call(model, own, (data.inputs[batches[3]],)), data.targets[batches[3]])
    grads = torch.autograd.grad(loss, list(own.values()))
    torch.testing.assert_close(f2[3], loss.detach())
    for n, g in zip(names, grads):
        torch.testing.assert_close(g2[n][3], g)


def test_models_vmap_refuses_run_in_the_loop():
    class ItemScale(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(64, 10)

        def forward(self, x):
            x = x.flatten(1)
            return self.lin(x / float(x.abs().max()))  # .item(): no batching rule

    data = digits_data()
    loss = StackedLoss(ItemScale(), F.cross_entropy, ["lin.weight", "lin.bias"], data.inputs, data.targets)
    assert not loss.vectorised
    params = {n: p.detach().unsqueeze(0).expand(2, *p.shape) for n, p in ItemScale().named_parameters()}
    f, g = loss.value_and_gradient(params, [torch.arange(3), torch.arange(3, 5)])
    assert f.shape == (2,) and g["lin.weight"].shape == (2, 10, 64)


def test_clipped_update_vectorised_equals_the_loop():
    kw = dict(step_size=0.5, n_steps=3, update_clip=0.05, sensitivity=0.1, mu=1.0, stage="s")
    fast, slow = both("clipped_update", **kw)
    assert_same(fast, slow)
    assert np.all(np.linalg.norm(fast[0].values, axis=1) > 0)  # noise drawn, updates clipped to S
    # asked clients only (participation): the others send nothing and draw nothing
    active = np.array([True, False, True, True, False, True])
    fast, slow = both("clipped_update", active=active, **kw)
    assert_same(fast, slow)
    assert np.all(np.isnan(fast[0].values[~active]))


@pytest.mark.parametrize("kw", [dict(n_steps=2, incremental=False), dict(n_steps=1, incremental=True)])
def test_normec_round_vectorised_equals_the_loop(kw):
    """Minibatches (batch_size 3 < n_i for most clients, drawn from each client's stream) and the incremental pass;
    the second request exercises the error memory v_i."""
    fast, slow = both("normec_round", alpha=0.01, beta=0.2, step_size=0.5, sensitivity=2.0, mu=1.5, stage="s",
                      calls=3, **kw)
    assert_same(fast, slow)
    # client 2 fails at its second request: the live clients' memories are updated, its own is left
    fast, slow = both("normec_round", data=FailingTensorData(digits_data(), {2: 1}), alpha=0.01, beta=0.2,
                      step_size=0.5, sensitivity=2.0, mu=1.5, stage="s", calls=3, **kw)
    assert_same(fast, slow)
    assert fast[1].failed[2] and not fast[2].answered[2]


def fits(make, data, monkeypatch):
    """The same fit with the vectorised clients and with the per-client loop (vmap refused for every model)."""
    fast = make().fit(data)
    with monkeypatch.context() as m:
        m.setattr(StackedLoss, "_vmap_allowed", lambda self, params: False)
        slow = make().fit(data)
    return fast, slow


@pytest.mark.parametrize("make", [
    lambda: DeepDPFedAvg(model=digits_model(), mu=2.0, n_rounds=3, n_local_steps=2, step_size=0.3, update_clip=0.5,
                         participation=0.5, random_state=1),
    lambda: DeepFedAlphaNormEC(model=digits_model(), epsilon=(8.0, 1e-5), mu=None, n_rounds=4, step_size=0.5,
                               server_step_size=0.5, batch_size=3, participation=0.5, random_state=1),
    lambda: DeepClippedFedAvg(model=digits_model(), mu=3.0, n_rounds=3, step_size=0.5, server_step_size=0.5,
                              random_state=1),
    lambda: DeepHiFedProx(model=digits_model(), mu=2.0, n_rounds=3, batch_size=3, participation=4, update_clip=0.5,
                          random_state=1),
    lambda: DeepHiFedProx(model=digits_model(), mu=math.inf, n_rounds=3, batch_size=4, n_local_steps=[1, 3, 2, 3, 1, 2],
                          step_size=2.0, random_state=1),
])
def test_estimators_vectorised_equal_the_loop(make, monkeypatch):
    fast, slow = fits(make, digits_data(), monkeypatch)
    np.testing.assert_allclose(np.asarray(fast.history_), np.asarray(slow.history_), atol=1e-5, rtol=0)
    assert fast.privacy_.mu == slow.privacy_.mu and fast.privacy_.units == ("client",)
    for ra, rb in zip(fast.privacy_.releases, slow.privacy_.releases):
        np.testing.assert_array_equal(ra.sigma, rb.sigma)
    if isinstance(fast, DeepHiFedProx):
        assert fast.armijo_trials_ == slow.armijo_trials_
