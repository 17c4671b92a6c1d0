"""Non-private runs against independent references (statsmodels GLM MLE)."""

import numpy as np
import pytest
import statsmodels.api as sm
from conftest import simulate

from privfedstat import FedAvg, FedHybrid, FedNewton, FedSGD

INF = float("inf")
SM_FAMILY = {"logistic": sm.families.Binomial(), "poisson": sm.families.Poisson(), "gaussian": sm.families.Gaussian()}


def mle(data, family):
    return sm.GLM(data.y, data.X, family=SM_FAMILY[family]).fit(tol=1e-13).params


@pytest.mark.parametrize(
    "family, beta, step, n_iter",
    [
        ("logistic", [0.5, -0.5, 0.5], 1.0, 3000),
        ("poisson", [0.3, 0.2, -0.2], 0.2, 3000),
        ("gaussian", [1.0, 2.0, -1.0], 0.5, 500),
    ],
)
def test_fedsgd_nonprivate_reaches_glm_mle(family, beta, step, n_iter):
    data = simulate(family, [150] * 8, beta, seed=11)
    est = FedSGD(family=family, mu=INF, clip=INF, n_iter=n_iter, step_size=step, random_state=0).fit(data)
    np.testing.assert_allclose(est.coef_, mle(data, family), atol=1e-6)
    assert not est.privacy_.is_private
    assert np.all(np.isinf(est.privacy_.client_mu))


def test_fedhybrid_nonprivate_reaches_mle():
    data = simulate("logistic", [150] * 8, [0.5, -0.5, 0.5], seed=12)
    est = FedHybrid(mu=INF, clip=INF, n_local_steps=30, n_server_iter=3000, step_size=1.0).fit(data)
    np.testing.assert_allclose(est.coef_, mle(data, "logistic"), atol=1e-6)


def test_fedavg_with_one_client_is_the_mle():
    data = simulate("logistic", [600], [0.5, -0.5, 0.5], seed=13)
    est = FedAvg(mu=INF, clip=INF, n_rounds=3, n_local_steps=1000, step_size=1.0).fit(data)
    np.testing.assert_allclose(est.coef_, mle(data, "logistic"), atol=1e-6)


def test_fednewton_nonprivate_beats_fedavg_on_many_small_clients():
    """Many clients with little data and a strong signal: FedAvg (K = 50, the paper's eta = 0.5) is far from the pooled MLE
    (federation bias plus unfinished local optimisation, Remark 3.7); the Newton step removes most of it."""
    errs_avg, errs_newton = [], []
    for seed in range(3):
        data = simulate("logistic", [60] * 150, [1.0, -1.5, 1.5], seed=seed)
        ref = mle(data, "logistic")
        avg = FedAvg(mu=INF, clip=INF, n_rounds=1, n_local_steps=50, step_size=0.5).fit(data)
        newton = FedNewton(mu=INF, clip=INF, n_rounds=1, n_local_steps=50, step_size=0.5, random_state=seed).fit(data)
        errs_avg.append(np.sum((avg.coef_ - ref) ** 2))
        errs_newton.append(np.sum((newton.coef_ - ref) ** 2))
    assert np.mean(errs_newton) < 0.5 * np.mean(errs_avg)


def test_fedsgd_with_clipping_minimises_the_clipped_objective():
    """With clipping, the fixed point is where the mean clipped gradient vanishes."""
    data = simulate("logistic", [100] * 5, [0.5, -0.5, 0.5], seed=14)
    est = FedSGD(mu=INF, clip=0.5, n_iter=4000, step_size=1.0).fit(data)
    from privfedstat.families import get_family
    from privfedstat.federation import GLMOracle

    g = GLMOracle(data, get_family("logistic")).clipped_gradients(est.coef_, 0.5)
    np.testing.assert_allclose(data.sizes / data.n_samples @ g, 0.0, atol=1e-10)


def test_private_fits_are_close_to_truth_with_large_samples():
    beta = np.array([0.5, -0.5, 0.5])
    data = simulate("logistic", [2000] * 20, beta, seed=15)
    for Est in (FedSGD, FedHybrid, FedAvg, FedNewton):
        est = Est(mu=2.0, random_state=1).fit(data)
        assert est.mse(beta) < 0.02, Est.__name__
