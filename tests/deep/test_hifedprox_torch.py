"""HiFedProx on torch clients: equal to the GLM backend on a linear logistic model; privacy, pairing, the CNN."""

from __future__ import annotations

import math

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from test_normec import linear_model, logistic_loss  # noqa: E402  (the GLM's logistic model as a network)

from privfedstat import HiFedProx  # noqa: E402
from privfedstat.deep import TensorFederatedData  # noqa: E402
from privfedstat.deep.hifedprox import DeepHiFedProx  # noqa: E402
from privfedstat.deep.models import FemnistCNN  # noqa: E402

torch.set_num_threads(1)
pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")

SIZES = (30, 24, 36, 20, 28)


def logistic_data(seed=0):
    rng = np.random.default_rng(seed)
    n = sum(SIZES)
    X = rng.normal(size=(n, 3))
    y = (X @ np.array([1.0, -0.5, 0.3]) + rng.logistic(size=n) > 0).astype(np.int64)
    return X, y, np.repeat(np.arange(len(SIZES)), SIZES)


def pair(**kw):
    X, y, labels = logistic_data()
    tensors = TensorFederatedData.from_pooled(torch.from_numpy(X), torch.from_numpy(y), sizes=list(SIZES))
    glm = HiFedProx(family="logistic", **kw).fit(X, y, clients=labels)
    deep = DeepHiFedProx(model=linear_model(), loss=logistic_loss, **kw).fit(tensors)
    return glm, deep


@pytest.mark.parametrize("kw", [
    dict(power=2, batch_size=None, step_size=30.0),  # full batches, backtracking
    dict(power=5, batch_size=8, participation=3, n_local_steps=[3, 9, 3, 9, 3], step_size=[0.5, 2.0, 0.5, 2.0, 0.5]),
    dict(power=8, prox_coef=0.3, prox_radius=0.2, batch_size=8, participation=0.6),
])
def test_equals_the_glm_backend_without_noise(kw):
    glm, deep = pair(mu=math.inf, n_rounds=5, random_state=3, **kw)
    np.testing.assert_allclose(np.asarray(deep.history_), np.asarray(glm.history_), atol=1e-6, rtol=0)
    cols = ["round", "client", "armijo_trials", "line_search_failures"]
    assert deep.displacements_[cols].equals(glm.displacements_[cols])
    np.testing.assert_allclose(deep.displacements_["displacement"], glm.displacements_["displacement"], atol=1e-6)
    assert deep.armijo_trials_ == glm.armijo_trials_ > 0


def test_client_level_ledger_as_the_glm_backend():
    glm, deep = pair(mu=1.3, n_rounds=4, update_clip=0.5, batch_size=8, random_state=4)
    a, b = glm.privacy_, deep.privacy_
    np.testing.assert_allclose(b.client_mu, 1.3, rtol=0, atol=1e-12)
    assert [r.stage for r in a.releases] == [r.stage for r in b.releases] and tuple(b.units) == ("client",)
    for ra, rb in zip(a.releases, b.releases):
        np.testing.assert_allclose(rb.sigma, ra.sigma, rtol=1e-14)
        np.testing.assert_allclose(rb.sigma, 2 * 0.5 * math.sqrt(4) / 1.3, rtol=1e-14)
    assert deep.armijo_trials_ is None
    again = DeepHiFedProx(model=linear_model(), loss=logistic_loss, mu=1.3, n_rounds=4, update_clip=0.5, batch_size=8,
                          random_state=4).fit(TensorFederatedData.from_pooled(
                              torch.from_numpy(logistic_data()[0]), torch.from_numpy(logistic_data()[1]),
                              sizes=list(SIZES)))
    np.testing.assert_array_equal(again.coef_, deep.coef_)  # same seed, same numbers


def test_femnist_cnn_rounds_paired_across_powers():
    torch.manual_seed(0)
    model = FemnistCNN()
    assert sum(p.numel() for p in model.parameters()) == 27_326
    rng = np.random.default_rng(0)
    n = 6 * 12
    images = torch.from_numpy(rng.random((n, 1, 14, 14)).astype(np.float32))
    labels = torch.from_numpy(rng.integers(0, 62, n))
    data = TensorFederatedData.from_pooled(images, labels, sizes=[12] * 6)
    fits = [DeepHiFedProx(model=model, mu=math.inf, power=p, n_rounds=2, participation=3, batch_size=4,
                          random_state=7).fit(data) for p in (2, 7)]
    a, b = (f.displacements_ for f in fits)
    assert a[["round", "client"]].equals(b[["round", "client"]])
    assert fits[0].coef_.shape == (27_326,) and not np.allclose(fits[0].coef_, fits[1].coef_)
    assert (a["armijo_trials"] >= 3).all() and fits[0].line_search_failures_ == 0
    assert all(np.isfinite(f.score(data)) for f in fits)
