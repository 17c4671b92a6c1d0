"""Fed-alpha-NormEC and its clipped comparator on torch clients: equal to the GLM backend on a linear model."""

from __future__ import annotations

import math

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from torch import nn  # noqa: E402
from torch.nn import functional as F  # noqa: E402

from privfedstat import ClippedFedAvg, FedAlphaNormEC  # noqa: E402
from privfedstat.deep import TensorFederatedData  # noqa: E402
from privfedstat.deep.normec import DeepClippedFedAvg, DeepFedAlphaNormEC  # noqa: E402

torch.set_num_threads(1)
pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")

SIZES = (12, 16, 10, 14)


def logistic_data(seed=0):
    rng = np.random.default_rng(seed)
    n = sum(SIZES)
    X = rng.normal(size=(n, 3))
    y = (X @ np.array([1.0, -0.5, 0.3]) + rng.logistic(size=n) > 0).astype(np.int64)
    labels = np.repeat(np.arange(len(SIZES)), SIZES)
    return X, y, labels


def linear_model() -> nn.Module:
    """nn.Linear without bias, weights 0: the GLM's x^0 = 0 and linear predictor."""
    m = nn.Linear(3, 1, bias=False).double()
    with torch.no_grad():
        m.weight.zero_()
    return m


def logistic_loss(out, target):
    """The GLM's logistic loss (mean over the batch) on the linear model's output."""
    return F.binary_cross_entropy_with_logits(out[:, 0], target.to(out.dtype))


def pair(kind, **kw):
    X, y, labels = logistic_data()
    tensors = TensorFederatedData.from_pooled(torch.from_numpy(X), torch.from_numpy(y), sizes=list(SIZES))
    if kind == "normec":
        glm = FedAlphaNormEC(family="logistic", **kw).fit(X, y, clients=labels)
        deep = DeepFedAlphaNormEC(model=linear_model(), loss=logistic_loss, **kw).fit(tensors)
    else:
        glm = ClippedFedAvg(family="logistic", **kw).fit(X, y, clients=labels)
        deep = DeepClippedFedAvg(model=linear_model(), loss=logistic_loss, **kw).fit(tensors)
    return glm, deep, tensors


@pytest.mark.parametrize("kw", [
    dict(n_local_steps=1),
    dict(n_local_steps=3, participation=0.5),
    dict(local_solver="ig", beta=0.5),
    dict(n_local_steps=2, server_normalization=True, alpha=0.1),
])
def test_normec_equals_the_glm_backend_without_noise(kw):
    glm, deep, _ = pair("normec", mu=math.inf, n_rounds=6, step_size=0.7, server_step_size=0.4, random_state=2, **kw)
    np.testing.assert_allclose(np.asarray(deep.history_), np.asarray(glm.history_), atol=1e-6, rtol=0)
    assert deep.communication_.rounds == glm.communication_.rounds


@pytest.mark.parametrize("kw", [dict(n_local_steps=1), dict(n_local_steps=3, participation=0.5, beta=0.05)])
def test_clipped_fedavg_equals_the_glm_backend_without_noise(kw):
    glm, deep, _ = pair("clipped", mu=math.inf, n_rounds=6, step_size=0.7, server_step_size=0.4, random_state=2, **kw)
    np.testing.assert_allclose(np.asarray(deep.history_), np.asarray(glm.history_), atol=1e-6, rtol=0)


@pytest.mark.parametrize("kind", ["normec", "clipped"])
def test_client_level_ledger_as_the_glm_backend(kind):
    kw = dict(epsilon=(8.0, 1e-5), mu=None, n_rounds=5, step_size=0.5, server_step_size=0.3, participation=0.5,
              random_state=4)
    glm, deep, _ = pair(kind, **kw)
    assert deep.privacy_.units == glm.privacy_.units == ("client",)
    assert deep.privacy_.mu == pytest.approx(glm.privacy_.mu, rel=1e-12)
    assert deep.sigma_ == pytest.approx(glm.sigma_, rel=1e-12)
    assert deep.epsilon_ == pytest.approx(glm.epsilon_, rel=1e-9) and deep.epsilon_ <= 8.0 + 1e-6
    assert math.isfinite(deep.privacy_.mu) and np.all(np.isfinite(deep.coef_))


def test_same_seed_same_numbers_and_the_error_memory_stays_on_the_client():
    X, y, _ = logistic_data()
    tensors = TensorFederatedData.from_pooled(torch.from_numpy(X), torch.from_numpy(y), sizes=list(SIZES))

    def fit(seed):
        return DeepFedAlphaNormEC(model=linear_model(), loss=logistic_loss, mu=1.0, n_rounds=4, step_size=0.5,
                                  server_step_size=0.3, batch_size=5, participation=0.5,
                                  random_state=seed).fit(tensors).coef_

    np.testing.assert_array_equal(fit(7), fit(7))
    assert not np.array_equal(fit(7), fit(8))


def test_message_norm_below_one_and_memory_update():
    from privfedstat.deep import TorchClients

    X, y, _ = logistic_data()
    tensors = TensorFederatedData.from_pooled(torch.from_numpy(X), torch.from_numpy(y), sizes=list(SIZES))
    clients = TorchClients(tensors, linear_model(), logistic_loss, np.random.SeedSequence(0))
    x = np.array([0.3, -0.2, 0.1])
    active = np.array([True, False, True, True])
    r1 = clients.normec_round(x, alpha=0.01, beta=0.2, step_size=0.5, n_steps=1, incremental=False, sensitivity=2.0,
                              mu=math.inf, stage="s", active=active)
    np.testing.assert_array_equal(r1.answered, active)
    assert np.all(np.isnan(r1.values[1]))
    norms = np.linalg.norm(r1.values[active], axis=1)
    assert np.all(norms < 1) and np.all(norms > 0.9)
    assert r1.releases[0].unit == "client"
    # every live client moved its memory by beta Delta_i, the non-participant too: round 2 sends Norm(u_i - v_i)
    r2 = clients.normec_round(x, alpha=0.01, beta=0.2, step_size=0.5, n_steps=1, incremental=False, sensitivity=2.0,
                              mu=math.inf, stage="s")

    def norm(u):
        return u / (0.01 + np.linalg.norm(u))

    for i, (lo, hi) in enumerate(zip(np.cumsum((0,) + SIZES[:-1]), np.cumsum(SIZES))):
        u = X[lo:hi].T @ (1 / (1 + np.exp(-X[lo:hi] @ x)) - y[lo:hi]) / (hi - lo)  # T = 1: u_i is the gradient
        np.testing.assert_allclose(r2.values[i], norm(u - 0.2 * norm(u)), atol=1e-12)


def test_bad_input():
    with pytest.raises(ValueError, match="server_step_size must be a number"):
        X, y, _ = logistic_data()
        tensors = TensorFederatedData.from_pooled(torch.from_numpy(X), torch.from_numpy(y), sizes=list(SIZES))
        DeepFedAlphaNormEC(model=linear_model(), loss=logistic_loss, server_step_size="auto").fit(tensors)
