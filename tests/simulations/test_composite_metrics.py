"""The composite-fit metrics (issue 14, item 3): stationarity, training loss, Hoyer sparsity, support recovery."""

from __future__ import annotations

import math

import numpy as np
import pytest
from _enet_reference import _loss_grad, enet_glm

from privfedstat import FederatedData, FedNMap
from privfedstat.penalty import ElasticNet
from privfedstat.simulations.composite_metrics import hoyer_sparsity, pooled_loss_gradient, stationarity, support_recovery


def _data(family="logistic"):
    rng = np.random.default_rng(0)
    X = np.column_stack([np.ones(300), rng.standard_normal((300, 4))])
    eta = X @ np.array([0.2, 1.0, 0.0, -0.7, 0.0])
    if family == "logistic":
        y = (rng.random(300) < 1 / (1 + np.exp(-eta))).astype(float)
    else:
        y = rng.poisson(np.exp(eta)).astype(float)
    return FederatedData.from_pooled(X, y, sizes=[50, 100, 150])


@pytest.mark.parametrize("family", ["logistic", "poisson"])
def test_loss_and_gradient_are_the_pooled_mean(family):
    data = _data(family)
    theta = np.array([0.1, -0.2, 0.3, 0.0, 0.5])
    loss, grad = pooled_loss_gradient(theta, data, family)
    want_loss, want_grad = _loss_grad(family, data.X, data.y, theta)
    assert loss == pytest.approx(want_loss, rel=1e-12)
    np.testing.assert_allclose(grad, want_grad, rtol=1e-12, atol=1e-15)


def test_stationarity_is_zero_at_the_optimum_only_and_is_the_natural_map():
    data = _data()
    mask = np.array([False, True, True, True, True])
    phi = ElasticNet.from_alpha(0.05, 1.0, mask)
    opt = enet_glm(data.X, data.y, "logistic", 0.05, 1.0)
    assert stationarity(opt, data, "logistic", phi, 0.5) < 1e-22
    theta = opt + 0.1
    grad = _loss_grad("logistic", data.X, data.y, theta)[1]
    v = theta - 0.5 * grad
    prox = np.r_[v[0], np.sign(v[1:]) * np.maximum(np.abs(v[1:]) - 0.5 * 0.05, 0)]
    assert stationarity(theta, data, "logistic", phi, 0.5) == pytest.approx(np.sum(((theta - prox) / 0.5) ** 2), rel=1e-12)
    est = FedNMap(mu=math.inf, alpha=0.05, n_rounds=3).fit(data)  # a fit's path: stationarity falls
    s = [stationarity(x, data, "logistic", est.penalty_, 0.5) for x in est.history_]
    assert s[-1] < s[0]


def test_hoyer_sparsity():
    assert hoyer_sparsity([0, 0, 3.0, 0]) == pytest.approx(1.0)
    assert hoyer_sparsity([-2.0, 2, 2, -2]) == pytest.approx(0.0, abs=1e-15)
    x = np.array([1.0, 0.5, 0.0, 0.0, -0.1])
    p = x.size
    want = (math.sqrt(p) - np.sum(np.abs(x)) / np.linalg.norm(x)) / (math.sqrt(p) - 1)
    assert hoyer_sparsity(x) == pytest.approx(want, rel=1e-14)
    assert hoyer_sparsity(1e300 * x) == pytest.approx(want, rel=1e-14)
    assert hoyer_sparsity(1e-310 * x) == pytest.approx(want, rel=1e-9)
    assert hoyer_sparsity(np.zeros(3)) == 0.0
    with pytest.raises(ValueError, match="at least 2"):
        hoyer_sparsity([1.0])


def test_support_recovery():
    truth = np.array([0.5, 1.0, 0.0, -2.0, 0.0, 0.0])
    r = support_recovery([0.4, 0.9, 0.01, 0.0, 0.0, -0.3], truth, ignore=(0,))
    assert (r.precision, r.recall, r.selected, r.true) == (1 / 3, 1 / 2, 3, 2)
    assert support_recovery([0.4, 0.9, 0.01, 0.0, 0.0, -0.3], truth, ignore=(0,), tol=0.05).precision == 1 / 2
    empty = support_recovery(np.zeros(6), truth, ignore=(0,))
    assert (empty.precision, empty.recall) == (1.0, 0.0)
    with pytest.raises(ValueError, match="same shape"):
        support_recovery(np.zeros(5), truth)
