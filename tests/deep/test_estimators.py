"""The network estimators: rounds and units, failures, the seam, and reductions to plain gradient descent."""

from __future__ import annotations

import gc
import math

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from _seam import ServerView  # noqa: E402
from torch import nn  # noqa: E402
from torch.nn import functional as F  # noqa: E402

from privfedstat import AutoClip, ClientFailureError  # noqa: E402
from privfedstat.deep import (  # noqa: E402
    DeepDPFedAvg,
    DeepFedAvg,
    DeepFedHybrid,
    DeepFedSGD,
    FailingTensorData,
    TensorFederatedData,
    TorchClients,
    compute_matched_rounds,
)
from privfedstat.deep import estimators as deep_estimators  # noqa: E402

torch.set_num_threads(1)
pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")


def tiny_model(seed=0) -> nn.Module:
    torch.manual_seed(seed)
    return nn.Sequential(nn.Conv2d(1, 2, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(), nn.Linear(8, 3),
                         nn.LogSoftmax(dim=1)).double()


def tiny_data(sizes=(12, 16, 10, 14), seed=0) -> TensorFederatedData:
    g = torch.Generator().manual_seed(seed)
    n = sum(sizes)
    X = torch.randn(n, 1, 4, 4, generator=g, dtype=torch.float64)
    y = (X[:, 0, :2].sum(dim=(1, 2)) > 0).long() + (X[:, 0, 2:].sum(dim=(1, 2)) > 1).long()
    return TensorFederatedData.from_pooled(X, y, sizes=list(sizes))


SETTINGS = {
    "fedavg": lambda **kw: DeepFedAvg(model=tiny_model(), n_rounds=3, n_local_steps=2, step_size=0.3, server_step_size=0.8,
                                      clip=0.5, **kw),
    "fedsgd": lambda **kw: DeepFedSGD(model=tiny_model(), n_iter=5, step_size=0.3, clip=0.5, **kw),
    "fedhybrid": lambda **kw: DeepFedHybrid(model=tiny_model(), n_local_steps=2, n_server_iter=3, step_size=0.3, clip=0.5,
                                            **kw),
    "dpfedavg": lambda **kw: DeepDPFedAvg(model=tiny_model(), n_rounds=3, n_local_steps=2, step_size=0.3, update_clip=0.5,
                                          **kw),
}
#: (rounds, floats per client) of each setting with P parameters
COMMUNICATION = {"fedavg": (3, 3), "fedsgd": (5, 5), "fedhybrid": (4, 4), "dpfedavg": (3, 3)}


@pytest.mark.parametrize("name", SETTINGS)
def test_rounds_floats_units_and_the_first_iterate(name):
    """What the contract suite (tests/deep/test_network_contract.py) leaves to each estimator: its exact
    communication, its privacy unit, and theta^(0) as the model's weights."""
    est = SETTINGS[name](mu=2.0, random_state=3).fit(tiny_data())
    P = sum(p.numel() for p in tiny_model().parameters())
    np.testing.assert_array_equal(est.history_[0], torch.nn.utils.parameters_to_vector(tiny_model().parameters()).detach())
    rounds, floats = COMMUNICATION[name]
    assert est.communication_.rounds == rounds and est.communication_.floats_per_client == floats * P
    assert est.privacy_.units == (("client",) if name == "dpfedavg" else ("record",))


@pytest.mark.parametrize("name", SETTINGS)
def test_a_failing_client_raises_or_is_skipped(name):
    data = FailingTensorData(tiny_data(), {2: 1})
    with pytest.raises(ClientFailureError):
        SETTINGS[name](mu=2.0, random_state=0).fit(data)
    est = SETTINGS[name](mu=2.0, random_state=0, on_client_failure="skip").fit(data)
    assert np.all(np.isfinite(est.coef_))
    assert est.privacy_.client_mu[2] < 2.0 and np.allclose(np.delete(est.privacy_.client_mu, 2), 2.0)


def test_participation_samples_clients_and_records_the_rate():
    est = DeepFedSGD(model=tiny_model(), n_iter=8, step_size=0.3, clip=0.5, mu=2.0, participation=0.5,
                     random_state=1).fit(tiny_data())
    assert np.all(est.privacy_.client_mu <= 2.0 + 1e-12) and np.any(est.privacy_.client_mu < 2.0)
    assert {r.sampling_rate for r in est.privacy_.releases} == {0.5}


def test_private_clip_search_spends_its_share():
    est = DeepFedSGD(model=tiny_model(), n_iter=3, step_size=0.3, clip=AutoClip(budget=0.2), mu=2.0,
                     random_state=1).fit(tiny_data())
    assert 1e-2 <= est.clip_ <= 1e4
    np.testing.assert_allclose(est.privacy_.client_mu, 2.0, rtol=0, atol=1e-12)
    assert any(r.stage == "clip-gradient" for r in est.privacy_.releases)


def plain_gd(model: nn.Module, X, y, lr: float, steps: int) -> np.ndarray:
    opt = torch.optim.SGD(model.parameters(), lr=lr)
    for _ in range(steps):
        opt.zero_grad()
        F.nll_loss(model(X), y).backward()
        opt.step()
    return torch.nn.utils.parameters_to_vector(model.parameters()).detach().numpy()


def test_without_privacy_one_client_fedavg_and_fedsgd_are_plain_gradient_descent():
    data = tiny_data(sizes=(30,))
    X, y = data.inputs, data.targets
    ref = plain_gd(tiny_model(), X, y, lr=0.3, steps=12)
    avg = DeepFedAvg(model=tiny_model(), mu=math.inf, clip=math.inf, n_rounds=4, n_local_steps=3, step_size=0.3).fit(data)
    np.testing.assert_allclose(avg.coef_, ref, rtol=1e-6, atol=1e-9)
    sgd = DeepFedSGD(model=tiny_model(), mu=math.inf, clip=math.inf, n_iter=12, step_size=0.3).fit(data)
    np.testing.assert_allclose(sgd.coef_, ref, rtol=1e-6, atol=1e-9)
    hybrid = DeepFedHybrid(model=tiny_model(), mu=math.inf, clip=math.inf, n_local_steps=5, n_server_iter=7,
                           step_size=0.3).fit(data)
    np.testing.assert_allclose(hybrid.coef_, ref, rtol=1e-6, atol=1e-9)
    # a server step eta_s after one local step is a gradient step of eta * eta_s
    scaled = DeepFedAvg(model=tiny_model(), mu=math.inf, clip=math.inf, n_rounds=6, n_local_steps=1, step_size=0.3,
                        server_step_size=0.5).fit(data)
    np.testing.assert_allclose(scaled.coef_, plain_gd(tiny_model(), X, y, lr=0.15, steps=6), rtol=1e-6, atol=1e-9)
    # per-sample clipping: the per-sample path (finite B) against the plain gradient when B binds nowhere
    big = DeepFedSGD(model=tiny_model(), mu=math.inf, clip=1e6, n_iter=12, step_size=0.3).fit(data)
    np.testing.assert_allclose(big.coef_, ref, rtol=1e-6, atol=1e-9)


def test_compute_matched_rounds():
    assert compute_matched_rounds(10, 10) == 100
    assert compute_matched_rounds(10, 30, local_steps=30) == 270
    with pytest.raises(ValueError, match="no server round"):
        compute_matched_rounds(2, 3, local_steps=6)


def test_bad_settings_are_refused():
    data = tiny_data()
    with pytest.raises(ValueError, match="step_size must be a number"):
        DeepFedAvg(model=tiny_model(), step_size="auto").fit(data)
    for clip in ("auto", "paper", AutoClip(pilot_rounds=2)):
        with pytest.raises(ValueError, match="clip must be a number"):
            DeepFedSGD(model=tiny_model(), clip=clip).fit(data)
    with pytest.raises(ValueError, match="loss must be"):
        DeepFedSGD(model=tiny_model(), loss="hinge").fit(data)
    with pytest.raises(TypeError, match="TensorFederatedData"):
        DeepFedSGD(model=tiny_model()).fit(data.inputs.numpy(), data.targets.numpy())
    with pytest.raises(ValueError, match="clip=inf"):
        DeepFedSGD(model=tiny_model(), clip=math.inf, mu=1.0).fit(data)
    with pytest.raises(TypeError, match="batch_size"):
        DeepFedAvg(model=tiny_model(), batch_size=2.5).fit(data)


@pytest.mark.parametrize("name", SETTINGS)
def test_the_server_only_uses_verbs_every_reply_is_privatized_and_no_data_is_kept(name, monkeypatch):
    data = tiny_data()
    reference = SETTINGS[name](mu=2.0, random_state=5).fit(data)
    replies: list = []
    real = deep_estimators.TorchClients
    monkeypatch.setattr(deep_estimators, "TorchClients", lambda *a, **kw: ServerView(real(*a, **kw), replies))
    est = SETTINGS[name](mu=2.0, random_state=5).fit(data)
    np.testing.assert_array_equal(est.coef_, reference.coef_)
    assert replies and all(reply.leak is None for _, _, reply in replies)
    for _, _, reply in replies:
        for rec in reply.releases:
            assert np.all(rec.sigma[reply.answered] > 0)
    seen, frontier = {id(est)}, [est]
    for _ in range(6):
        nxt = []
        for obj in frontier:
            for ref in gc.get_referents(obj):
                if id(ref) not in seen and not isinstance(ref, type):
                    seen.add(id(ref))
                    nxt.append(ref)
                    assert not isinstance(ref, (TensorFederatedData, TorchClients, ServerView)), type(ref)
                    if isinstance(ref, torch.Tensor) and ref.numel() >= data.inputs.numel():
                        assert ref.data_ptr() != data.inputs.data_ptr()
        frontier = nxt


def test_secure_mode_draws_os_noise_and_refuses_a_seed():
    """Deep estimators take secure_mode as the GLM ones: SecureClientNoise, no seed, privacy_.secure_mode True."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(3, 2))
    g = torch.Generator().manual_seed(0)
    data = TensorFederatedData.from_pooled(torch.randn(60, 3, generator=g), torch.randint(0, 2, (60,), generator=g),
                                           sizes=[20, 20, 20])
    with pytest.raises(ValueError, match="random_state must be None"):
        DeepFedSGD(model=model, n_iter=2, secure_mode=True, random_state=0).fit(data)
    fits = [DeepFedSGD(model=model, n_iter=2, mu=1.0, secure_mode=True).fit(data) for _ in range(2)]
    assert all(f.privacy_.secure_mode for f in fits)
    assert not np.array_equal(fits[0].coef_, fits[1].coef_)  # fresh OS noise each fit
    assert DeepFedSGD(model=model, secure_mode=True).get_params()["secure_mode"] is True
    assert type(fits[0]._make_clients(data, None, np.random.SeedSequence(0), True)._noise).__name__ == "SecureClientNoise"


def test_the_summary_says_what_is_protected_and_how_much():
    """Record-level unit, the budget towards the server (not the worst client's spend under participation); no
    standard errors, for the reason that applies (not 'whole clients')."""
    from privfedstat import NoInferenceError

    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(3, 2))
    g = torch.Generator().manual_seed(0)
    data = TensorFederatedData.from_pooled(torch.randn(60, 3, generator=g), torch.randint(0, 2, (60,), generator=g),
                                           sizes=[20, 20, 20])
    est = DeepFedAvg(model=model, n_rounds=3, n_local_steps=2, mu=2.0, participation=0.5, random_state=0).fit(data)
    header = est.summary().header
    assert est.privacy_.mu < 2.0
    assert header["Privacy unit"].startswith("record") and header["Towards the server"].startswith("mu = 2 per client")
    with pytest.raises(NoInferenceError) as info:
        _ = est.bse_
    assert "whole clients" not in str(info.value) and "standard errors of the weights are not defined" in str(info.value)
