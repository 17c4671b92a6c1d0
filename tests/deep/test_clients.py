"""TorchClients and TensorFederatedData: each verb against a direct computation, noise streams, participation, failures."""

from __future__ import annotations

import math

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from torch import nn  # noqa: E402
from torch.nn import functional as F  # noqa: E402

from privfedstat.deep import FailingTensorData, TensorFederatedData, TorchClients, TorchNoise, per_sample_clipped_mean  # noqa: E402
from privfedstat.deep.per_sample import CLIP_SAFETY  # noqa: E402
from privfedstat.federation import clients as federation_clients  # noqa: E402

torch.set_num_threads(1)


def tiny_model(seed=0) -> nn.Module:
    torch.manual_seed(seed)
    return nn.Sequential(nn.Flatten(), nn.Linear(16, 6), nn.Tanh(), nn.Linear(6, 3), nn.LogSoftmax(dim=1)).double()


def tiny_data(sizes=(7, 11, 9), seed=0) -> TensorFederatedData:
    g = torch.Generator().manual_seed(seed)
    n = sum(sizes)
    return TensorFederatedData.from_pooled(torch.randn(n, 1, 4, 4, generator=g, dtype=torch.float64),
                                           torch.randint(0, 3, (n,), generator=g), sizes=list(sizes))


def clients_for(data=None, model=None, seed=0, **kw) -> TorchClients:
    return TorchClients(data or tiny_data(), model or tiny_model(), F.nll_loss, np.random.SeedSequence(seed), **kw)


def with_theta(model: nn.Module, theta: np.ndarray) -> nn.Module:
    torch.nn.utils.vector_to_parameters(torch.as_tensor(theta, dtype=torch.float64), model.parameters())
    return model


# ---------------------------------------------------------------------- data
def test_from_pooled_split_iid_and_validation():
    X, y = torch.randn(10, 2, 3), torch.arange(10) % 4
    d = TensorFederatedData.from_pooled(X, y, clients=np.array([2, 1, 2, 1, 0, 0, 1, 2, 2, 0]))
    assert d.sizes.tolist() == [3, 3, 4] and d.input_shape == (2, 3) and d.n_features == 6 and d.n_samples == 10
    np.testing.assert_array_equal(d.client(0)[1].numpy(), [0, 1, 1])  # rows 4, 5, 9 in order
    iid = TensorFederatedData.split_iid(X, y, 3, random_state=1)
    assert iid.sizes.tolist() == [4, 3, 3]
    again = TensorFederatedData.split_iid(X, y, 3, random_state=1)
    np.testing.assert_array_equal(iid.to_numpy()[0], again.to_numpy()[0])
    capped = TensorFederatedData.split_iid(X, y, 4, n_per_client=2, random_state=1)
    assert capped.sizes.tolist() == [2] * 4 and len(set(capped.targets.tolist())) <= 4
    with pytest.raises(ValueError, match="4 clients of 3 rows need 12 rows, more than the 10 given"):
        TensorFederatedData.split_iid(X, y, 4, n_per_client=3)
    with pytest.raises(ValueError, match="NaN"):
        TensorFederatedData.from_pooled(torch.full((2, 1), math.nan), torch.zeros(2, dtype=torch.int64), sizes=[2])
    with pytest.raises(TypeError, match="integer class labels"):
        TensorFederatedData.from_pooled(X, y.double(), sizes=[10])
    with pytest.raises(ValueError, match="no rows"):
        TensorFederatedData(X, y, [0, 0, 10])
    with pytest.raises(ValueError, match="outside"):
        FailingTensorData(d, {5: 0})


# ---------------------------------------------------------------------- noise
def test_noise_streams_are_per_client_and_reproducible():
    a, b = TorchNoise.from_seed(np.random.SeedSequence(3), 4), TorchNoise.from_seed(np.random.SeedSequence(3), 4)
    za = a.standard_normal((2, 5))
    assert za.dtype == np.float64 and za.shape == (4, 2, 5)
    np.testing.assert_array_equal(za, b.standard_normal((2, 5)))
    # client 2 alone draws the same numbers as client 2 of the full set
    c = TorchNoise.from_seed(np.random.SeedSequence(3), 4)
    np.testing.assert_array_equal(c.subset(np.array([2])).standard_normal((2, 5))[0], za[2])
    assert np.std(za) > 0.3 and not np.array_equal(za[0], za[1])


# ---------------------------------------------------------------------- verbs
def test_initial_parameters_are_the_models_weights():
    model = tiny_model()
    c = clients_for(model=model)
    initial = torch.nn.utils.parameters_to_vector(model.parameters()).detach().numpy()
    np.testing.assert_array_equal(c.initial_parameters(), initial)
    assert c.n_params == 16 * 6 + 6 + 6 * 3 + 3 and c.family is None and not c.has_offset


def test_gradients_are_each_clients_clipped_mean_plus_calibrated_noise():
    data, model = tiny_data(), tiny_model()
    theta = clients_for().initial_parameters() + 0.1
    exact = np.stack([per_sample_clipped_mean(with_theta(tiny_model(), theta), F.nll_loss, *data.client(i), 0.3).numpy()
                      for i in range(3)])
    sens = 2 * 0.3 / data.sizes
    reply = clients_for(data, model).gradients(theta, clip=0.3, sensitivity=sens, mu=math.inf, stage="g")
    np.testing.assert_allclose(reply.values, exact, rtol=1e-12, atol=1e-15)
    noisy = clients_for(data, model, seed=4).gradients(theta, clip=0.3, sensitivity=sens, mu=2.0, stage="g")
    (rec,) = noisy.releases
    np.testing.assert_allclose(rec.sigma, sens / 2.0)
    z = TorchNoise.from_seed(np.random.SeedSequence(4).spawn(2)[0], 3).standard_normal((clients_for().n_params,))
    np.testing.assert_allclose(noisy.values, exact + (sens / 2.0)[:, None] * z, rtol=1e-12, atol=1e-14)


def test_only_the_asked_clients_answer_and_draw_noise():
    data = tiny_data()
    c, ref = clients_for(data, seed=2), clients_for(data, seed=2)
    theta = c.initial_parameters()
    active = np.array([True, False, True])
    reply = c.gradients(theta, clip=0.3, sensitivity=0.1, mu=1.0, stage="g", active=active)
    assert reply.answered.tolist() == [True, False, True] and np.isnan(reply.values[1]).all()
    assert reply.releases[0].sigma.tolist()[1] == 0.0 and reply.releases[0].sensitivity[1] == 0.0
    # client 1 sat out: its next draw is the first draw of its stream
    second = c.gradients(theta, clip=0.3, sensitivity=0.1, mu=1.0, stage="g")
    first = ref.gradients(theta, clip=0.3, sensitivity=0.1, mu=1.0, stage="g")
    np.testing.assert_array_equal(second.values[1], first.values[1])
    assert not np.array_equal(second.values[0], first.values[0])


def test_every_reply_goes_through_privatize(monkeypatch):
    calls = []
    real = federation_clients.privatize

    def tap(*args, **kw):
        calls.append(args[4])
        return real(*args, **kw)

    monkeypatch.setattr(federation_clients, "privatize", tap)
    c = clients_for()
    theta = c.initial_parameters()
    c.gradients(theta, clip=1.0, sensitivity=0.1, mu=1.0, stage="a")
    c.local_descent(theta, clip=1.0, step_size=0.1, n_steps=2, sensitivity=0.1, mu=1.0, stage="b")
    c.clipped_update(theta, step_size=0.1, n_steps=2, update_clip=1.0, sensitivity=2.0, mu=1.0, stage="c")
    c.count_at_most("gradient", theta, 1.0, mu=1.0, stage="d")
    assert calls == ["a", "b", "b", "c", "d"]


def local_gd(data, i, theta, clip, steps, eta=0.5) -> np.ndarray:
    """Client i's GD steps on its mean of per-sample gradients clipped to ``clip``, from the public function."""
    for _ in range(steps):
        theta = theta - eta * per_sample_clipped_mean(with_theta(tiny_model(), theta), F.nll_loss, *data.client(i), clip).numpy()
    return theta


def test_local_descent_is_noisy_gd_on_the_clipped_mean():
    data = tiny_data()
    c = clients_for(data)
    theta0 = c.initial_parameters()
    reply = c.local_descent(theta0, clip=0.2, step_size=0.5, n_steps=3, sensitivity=0.0, mu=math.inf, stage="l")
    for i in range(3):
        np.testing.assert_allclose(reply.values[i], local_gd(data, i, theta0, 0.2, 3), rtol=1e-12, atol=1e-14)
    assert len(reply.releases) == 3 and all(r.kind == "local" for r in reply.releases)


def test_minibatch_steps_send_noise_for_the_batch_sensitivity():
    data = tiny_data()
    c = clients_for(data, batch_size=5)
    sens = 2 * 0.2 * 0.5 / data.sizes  # the server's full-batch statement
    reply = c.local_descent(c.initial_parameters(), clip=0.2, step_size=0.5, n_steps=2, sensitivity=sens, mu=1.0, stage="l")
    np.testing.assert_allclose(reply.releases[0].sensitivity, 2 * 0.2 * 0.5 / 5)
    np.testing.assert_allclose(reply.releases[0].sigma, 2 * 0.2 * 0.5 / 5 / 1.0)
    again = clients_for(data, batch_size=5).local_descent(c.initial_parameters(), clip=0.2, step_size=0.5, n_steps=2,
                                                          sensitivity=sens, mu=1.0, stage="l")
    np.testing.assert_array_equal(reply.values, again.values)  # the same seed draws the same batches and noise
    full = clients_for(data).local_descent(c.initial_parameters(), clip=0.2, step_size=0.5, n_steps=2, sensitivity=sens,
                                           mu=math.inf, stage="l")
    mini = clients_for(data, batch_size=5).local_descent(c.initial_parameters(), clip=0.2, step_size=0.5, n_steps=2,
                                                         sensitivity=sens, mu=math.inf, stage="l")
    assert not np.allclose(full.values, mini.values)


def test_clipped_update_is_the_gd_update_clipped_to_s():
    data = tiny_data()
    c = clients_for(data)
    theta0 = c.initial_parameters()
    reply = c.clipped_update(theta0, step_size=0.5, n_steps=4, update_clip=0.05, sensitivity=0.1, mu=math.inf, stage="u")
    for i in range(3):
        u = local_gd(data, i, theta0, math.inf, 4) - theta0
        np.testing.assert_allclose(reply.values[i], u * 0.05 * CLIP_SAFETY / np.linalg.norm(u), rtol=1e-10)
        assert np.linalg.norm(reply.values[i]) <= 0.05
    assert reply.releases[0].unit == "client"


def test_count_at_most_counts_gradient_norms():
    data = tiny_data()
    c = clients_for(data)
    theta = c.initial_parameters()
    model = tiny_model()
    norms = []
    for i in range(3):
        X, y = data.client(i)
        norms.append([float(torch.linalg.vector_norm(per_sample_clipped_mean(model, F.nll_loss, X[j:j + 1], y[j:j + 1],
                                                                             math.inf))) for j in range(len(y))])
    t = float(np.median(np.concatenate(norms)))
    reply = c.count_at_most("gradient", theta, t, mu=math.inf, stage="clip-gradient")
    np.testing.assert_array_equal(reply.values[:, 0], [np.sum(np.array(n) <= t) for n in norms])
    with pytest.raises(ValueError, match="gradient"):
        c.count_at_most("hessian", theta, t, mu=1.0, stage="s")


def test_fault_injection_fails_a_client_on_cue():
    c = clients_for(FailingTensorData(tiny_data(), {1: 1}))
    theta = c.initial_parameters()
    first = c.gradients(theta, clip=1.0, sensitivity=0.1, mu=1.0, stage="g")
    assert first.answered.all() and not first.failed.any()
    second = c.gradients(theta, clip=1.0, sensitivity=0.1, mu=1.0, stage="g")
    assert second.failed.tolist() == [False, True, False] and second.answered.tolist() == [True, False, True]
    third = c.gradients(theta, clip=1.0, sensitivity=0.1, mu=1.0, stage="g")
    assert third.answered.tolist() == [True, False, True] and not third.failed.any()
    assert np.isnan(third.values[1]).all() and third.releases[0].sigma[1] == 0.0


def test_a_diverging_local_descent_raises_divergence_error_after_booking_its_steps():
    """The reply carries the DivergenceError (not a TypeError from a missing ``error=``) with the steps released so far,
    and a network estimator raises it."""
    from privfedstat.deep import DeepFedAvg
    from privfedstat.exceptions import DivergenceError

    c = clients_for()
    reply = c.local_descent(c.initial_parameters(), clip=1.0, step_size=1e11, n_steps=3, sensitivity=0.0, mu=math.inf,
                            stage="l")
    assert isinstance(reply.error, DivergenceError) and len(reply.releases) == 1
    with pytest.raises(DivergenceError, match="step_size"):
        DeepFedAvg(model=tiny_model(), loss=F.nll_loss, mu=math.inf, n_rounds=2, n_local_steps=3, step_size=1e11,
                   progress=False, random_state=0).fit(tiny_data())
