"""Multinomial (softmax) family: kernels vs numpy twins, finite differences, MLE, privacy."""

import numpy as np
import pytest
import statsmodels.api as sm

from privfedstat import FedAvg, FederatedData, FedHybrid, FedNewton, FedSGD, get_family
from privfedstat.kernels import multinomial_nb as mk
from privfedstat.kernels import reference as ref


def make(N=600, d=3, K=4, m=5, seed=0):
    rng = np.random.default_rng(seed)
    X = np.column_stack([np.ones(N), rng.normal(size=(N, d - 1))])
    B = rng.normal(scale=0.7, size=(d, K - 1))
    P = get_family("multinomial", n_classes=K).mean(X @ B)
    y = (P.cumsum(axis=1) < rng.random(N)[:, None]).sum(axis=1).astype(float)
    sizes = np.full(m, N // m)
    return FederatedData.from_pooled(X, y, sizes=sizes), B


@pytest.mark.parametrize("shared", [True, False])
@pytest.mark.parametrize("clip", [1e-3, 0.7, np.inf])
def test_kernels_match_numpy_twins(shared, clip):
    data, _ = make()
    fam = get_family("multinomial", n_classes=4)
    rng = np.random.default_rng(1)
    m, p = data.n_clients, data.n_features * 3
    theta = rng.normal(size=(1 if shared else m, p))
    g = np.empty((m, p))
    mk.multinomial_clipped_mean_grad(data.X, data.y, data.row_norms, data.offsets, theta, clip, 3, g)
    np.testing.assert_allclose(g, ref.multinomial_clipped_mean_grad(data.X, data.y, data.offsets, theta, clip, fam),
                               rtol=1e-10, atol=1e-13)
    loss = np.empty(m)
    mk.multinomial_client_loss(data.X, data.y, data.offsets, theta, 3, loss)
    np.testing.assert_allclose(loss, ref.multinomial_client_loss(data.X, data.y, data.offsets, theta, fam), rtol=1e-12)
    H = np.empty((m, p, p))
    mk.multinomial_client_hessian(data.X, data.y, data.row_norms, data.offsets, theta, clip, 3, H)
    np.testing.assert_allclose(H, ref.multinomial_client_hessian(data.X, data.y, data.offsets, theta, clip, fam),
                               rtol=1e-10, atol=1e-13)
    assert np.all(np.linalg.norm(g, axis=1) <= clip * (1 + 1e-12))


def test_gradient_and_hessian_match_finite_differences():
    data, _ = make(N=200)
    m, p = data.n_clients, 9
    theta = np.random.default_rng(2).normal(scale=0.4, size=p)

    def loss(t):
        out = np.empty(m)
        mk.multinomial_client_loss(data.X, data.y, data.offsets, t[None], 3, out)
        return out

    def grad(t):
        out = np.empty((m, p))
        mk.multinomial_clipped_mean_grad(data.X, data.y, data.row_norms, data.offsets, t[None], np.inf, 3, out)
        return out

    eps, E = 1e-6, np.eye(p)
    fd_g = np.stack([(loss(theta + eps * E[a]) - loss(theta - eps * E[a])) / (2 * eps) for a in range(p)], axis=1)
    np.testing.assert_allclose(grad(theta), fd_g, atol=1e-8)
    H = np.empty((m, p, p))
    mk.multinomial_client_hessian(data.X, data.y, data.row_norms, data.offsets, theta[None], np.inf, 3, H)
    fd_h = np.stack([(grad(theta + eps * E[a]) - grad(theta - eps * E[a])) / (2 * eps) for a in range(p)], axis=2)
    np.testing.assert_allclose(H, fd_h, atol=1e-8)


def test_nonprivate_fedsgd_reaches_mnlogit_mle():
    data, _ = make(N=1500)
    mle = sm.MNLogit(data.y, data.X).fit(disp=0, method="newton", tol=1e-12).params
    est = FedSGD(family=get_family("multinomial", n_classes=4), mu=float("inf"), clip=float("inf"),
                 n_iter=4000, step_size=1.0).fit(data)
    assert est.coef_.shape == (3, 3)
    np.testing.assert_allclose(est.coef_, mle, atol=1e-6)
    P = est.predict(data.X[:5])
    assert P.shape == (5, 4) and np.allclose(P.sum(axis=1), 1.0)


@pytest.mark.parametrize("Est", [FedSGD, FedHybrid, FedAvg, FedNewton])
def test_private_multinomial_fits(Est):
    data, B = make(N=4000, m=10)
    est = Est(family=get_family("multinomial", n_classes=4), mu=2.0, random_state=0).fit(data)
    np.testing.assert_allclose(est.privacy_.client_mu, 2.0, rtol=1e-12)
    assert est.coef_.shape == (3, 3) and np.all(np.isfinite(est.coef_))
    assert est.mse(B) < 1.0
    assert "y=3" in est.summary().as_text()  # equations named as statsmodels MNLogit: response=class


def test_multinomial_validation():
    with pytest.raises(ValueError, match="n_classes"):
        get_family("multinomial")
    with pytest.raises(ValueError, match="n_classes"):
        get_family("multinomial", n_classes=1)
    data, _ = make()
    with pytest.raises(ValueError, match="labels 0..2"):
        FedSGD(family=get_family("multinomial", n_classes=3)).fit(data)
