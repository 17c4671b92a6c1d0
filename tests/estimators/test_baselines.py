"""Non-private baselines of Section 5.1: PooledMLE (NP-Pooled) and LocalFit (NP-LocalFit)."""

import math
import warnings

import numpy as np
import pytest
import statsmodels.api as sm
from conftest import simulate
from scipy.optimize import minimize

from privfedstat import ConvergenceWarning, FederatedData, LocalFit, PooledMLE
from privfedstat.families import FAMILIES, get_family

SM_FAMILY = {"logistic": sm.families.Binomial(), "poisson": sm.families.Poisson(), "gaussian": sm.families.Gaussian()}
CASES = [("logistic", [0.5, -0.5, 0.5, 0.25]), ("poisson", [0.3, 0.2, -0.2, 0.1]), ("gaussian", [1.0, 2.0, -1.0, 0.5])]
SIZES = [80, 120, 150, 200, 250]


def sm_fit(X, y, family):
    return sm.GLM(y, X, family=SM_FAMILY[family]).fit(tol=1e-13, maxiter=200).params


@pytest.mark.parametrize("family, beta", CASES)
def test_pooled_mle_equals_statsmodels_glm(family, beta):
    data = simulate(family, SIZES, beta, seed=21)
    est = PooledMLE(family=family).fit(data)
    np.testing.assert_allclose(est.coef_, sm_fit(data.X, data.y, family), atol=1e-6, rtol=0)
    assert est.converged_ and 1 <= est.n_iter_ <= 20
    np.testing.assert_array_equal(est.history_[0], np.zeros(4))
    np.testing.assert_array_equal(est.history_[-1], est.coef_)
    assert est.history_.shape == (est.n_iter_ + 1, 4)


def test_pooled_mle_ledger_and_communication():
    data = simulate("logistic", SIZES, [0.5, -0.5, 0.5], seed=2)
    est = PooledMLE().fit(data)
    led = est.privacy_
    assert not led.is_private
    assert any("raw data pooled at the server" in leak for leak in led.leaks)
    assert np.all(np.isinf(led.client_mu)) and math.isinf(led.mu)
    assert all(np.all(r.sigma == 0) for r in led.releases)  # nothing noisy
    comm = est.communication_
    d = data.n_features
    assert comm.rounds == 1
    assert comm.total_floats == data.n_samples * (d + 1)  # every row of (x, y), once
    assert comm.floats_per_client == max(SIZES) * (d + 1)  # the largest client's upload
    text = est.summary().as_text()
    assert "raw data pooled" in text and "none" in text and "PooledMLE" in text


@pytest.mark.parametrize("family, beta", CASES)
def test_localfit_without_ridge_equals_per_client_statsmodels(family, beta):
    data = simulate(family, SIZES, beta, seed=22)
    est = LocalFit(family=family, alpha=0.0).fit(data)
    ref = np.array([sm_fit(*data.client(i), family) for i in range(data.n_clients)])
    assert est.local_coefs_.shape == (5, 4)
    np.testing.assert_allclose(est.local_coefs_, ref, atol=1e-6, rtol=0)
    w = data.sizes / data.n_samples
    np.testing.assert_allclose(est.coef_, w @ ref, atol=1e-6, rtol=0)
    assert est.converged_.all() and est.history_.shape[1] == 4
    np.testing.assert_allclose(est.history_[-1], est.coef_, atol=1e-14)


def test_localfit_default_ridge_is_the_penalised_fit_and_close_to_the_mle():
    data = simulate("logistic", SIZES, [0.5, -0.5, 0.5, 0.25], seed=23)
    est = LocalFit().fit(data)
    assert est.alpha == 1e-4
    fam = get_family("logistic")
    for i in range(data.n_clients):
        X, y = data.client(i)

        def f(t, X=X, y=y):
            return np.mean(fam.loss(y, X @ t)) + 0.5e-4 * t @ t

        def grad(t, X=X, y=y):
            return X.T @ fam.deriv(y, X @ t) / len(y) + 1e-4 * t

        ref = minimize(f, np.zeros(4), jac=grad, method="BFGS", options={"gtol": 1e-12}).x
        np.testing.assert_allclose(est.local_coefs_[i], ref, atol=1e-6)
        assert np.max(np.abs(est.local_coefs_[i] - sm_fit(X, y, "logistic"))) < 5e-3  # tiny shrinkage


def test_localfit_prediction_uses_the_clients_model():
    data = simulate("poisson", [100, 150, 200], [0.3, 0.2, -0.2], seed=4)
    est = LocalFit(family="poisson").fit(data)
    X = data.X[:7]
    for i in range(3):
        np.testing.assert_allclose(est.predict(X, client=i), np.exp(X @ est.local_coefs_[i]))
    np.testing.assert_allclose(est.predict(X), np.exp(X @ est.coef_))
    np.testing.assert_allclose(est.predict(X, client=-1), est.predict(X, client=2))
    with pytest.raises(IndexError, match="out of range"):
        est.predict(X, client=3)
    with pytest.raises(TypeError, match="client must be an integer"):
        est.predict(X, client="hospital A")
    with pytest.raises(ValueError, match="shape"):
        est.predict(np.zeros((2, 5)), client=0)


def test_localfit_ledger_and_communication():
    data = simulate("logistic", SIZES, [0.5, -0.5, 0.5], seed=5)
    est = LocalFit().fit(data)
    assert not est.privacy_.is_private and est.privacy_.leaks
    assert np.all(np.isinf(est.privacy_.client_mu))  # published local models: not private, not "mu = 0"
    assert est.communication_.rounds == 0 and est.communication_.total_floats == 0
    assert "NP-LocalFit" in est.summary().as_text()


def _separated_client_data():
    rng = np.random.default_rng(7)
    n = 60
    X = np.column_stack([np.ones(3 * n), rng.standard_normal((3 * n, 2))])
    y = (rng.random(3 * n) < 0.5).astype(float)
    y[n:2 * n] = (X[n:2 * n, 1] > 0).astype(float)  # client 1: perfectly separated by x1
    return FederatedData.from_pooled(X, y, sizes=[n, n, n])


def test_separated_client_needs_the_ridge():
    data = _separated_client_data()
    with pytest.warns(ConvergenceWarning, match=r"client\(s\) \[1\].*alpha > 0"):
        LocalFit(alpha=0.0, max_iter=30).fit(data)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        est = LocalFit().fit(data)
    assert np.all(np.isfinite(est.local_coefs_)) and est.converged_.all()
    assert est.local_coefs_[1, 1] > 5  # steep but finite
    X, y = data.client(1)
    with pytest.warns(ConvergenceWarning, match="separated"):
        PooledMLE(max_iter=30).fit(FederatedData.from_pooled(X, y, sizes=[30, 30]))


def test_pooled_mle_rank_deficient_design_gives_the_minimum_norm_fit():
    rng = np.random.default_rng(8)
    n = 400
    X = np.column_stack([np.ones(n), rng.standard_normal(n), np.zeros(n)])
    X = np.column_stack([X, 2 * X[:, 1]])  # a zero column and a collinear one
    y = (rng.random(n) < 1 / (1 + np.exp(-0.5 * X[:, 1]))).astype(float)
    est = PooledMLE().fit(FederatedData.from_pooled(X, y, sizes=[200, 200]))
    b0, b1 = sm_fit(X[:, :2], y, "logistic")  # the identifiable model
    # minimum-norm coefficients with the same fit: b1 x1 = c1 x1 + c3 (2 x1), (c1, c3) parallel to (1, 2)
    np.testing.assert_allclose(est.coef_, [b0, b1 / 5, 0.0, 2 * b1 / 5], atol=1e-6)


def test_pooled_huber_minimises_the_huber_loss():
    rng = np.random.default_rng(9)
    X = np.column_stack([np.ones(300), rng.standard_normal(300)])
    y = 100 + 3 * X[:, 1] + 2 * rng.standard_normal(300)
    y[:15] += 60  # outliers; at theta = 0 every residual is beyond the threshold
    est = PooledMLE(family="huber").fit(FederatedData.from_pooled(X, y, sizes=[150, 150]))
    fam = get_family("huber")
    ref = minimize(lambda t: fam.loss(y, X @ t).mean(), np.zeros(2), jac=lambda t: X.T @ fam.deriv(y, X @ t) / 300,
                   method="BFGS", options={"gtol": 1e-12}).x
    np.testing.assert_allclose(est.coef_, ref, atol=1e-6)


@pytest.mark.skipif("multinomial" not in FAMILIES, reason="no multinomial family")
def test_pooled_multinomial_equals_statsmodels_mnlogit():
    rng = np.random.default_rng(10)
    n = 600
    X = np.column_stack([np.ones(n), rng.standard_normal((n, 2))])
    Z = np.column_stack([np.zeros(n), X @ np.array([[0.2, -0.3], [1.0, 0.5], [-0.5, 0.8]])])
    P = np.exp(Z) / np.exp(Z).sum(axis=1, keepdims=True)
    y = (rng.random(n)[:, None] > np.cumsum(P, axis=1)).sum(axis=1).astype(float)
    data = FederatedData.from_pooled(X, y, sizes=[300, 300])
    fam = get_family("multinomial", n_classes=3)
    est = PooledMLE(family=fam).fit(data)
    ref = sm.MNLogit(y, X).fit(method="newton", tol=1e-14, maxiter=100, disp=0).params
    assert est.coef_.shape == (3, 2)
    np.testing.assert_allclose(est.coef_, ref, atol=1e-6)
    local = LocalFit(family=fam).fit(data)
    assert local.local_coefs_.shape == (2, 3, 2)
    assert local.predict(X[:4], client=1).shape == (4, 3)


@pytest.mark.parametrize("Est", [PooledMLE, LocalFit])
def test_baselines_have_no_budget_and_no_clipping(Est):
    with pytest.raises(TypeError):
        Est(mu=2.0)  # there is no privacy budget to set
    est = Est(family="poisson").fit(simulate("poisson", [100, 100], [0.3, 0.2, -0.2], seed=6))
    assert est.clip_ == math.inf and est.mu_ == math.inf


@pytest.mark.parametrize("Est", [PooledMLE, LocalFit])
@pytest.mark.parametrize(
    "params, exc, match",
    [
        ({"alpha": -1.0}, ValueError, "alpha must be"),
        ({"alpha": float("nan")}, ValueError, "alpha must be"),
        ({"alpha": "small"}, TypeError, "alpha must be"),
        ({"tol": 0.0}, ValueError, "tol must be > 0"),
        ({"max_iter": 0}, ValueError, "max_iter must be"),
        ({"max_iter": 2.5}, TypeError, "max_iter must be"),
        ({"family": "gamma"}, ValueError, "unknown family"),
    ],
)
def test_baseline_bad_parameters(Est, params, exc, match, logistic_data):
    with pytest.raises(exc, match=match):
        Est(**params).fit(logistic_data)


@pytest.mark.parametrize("Est", [PooledMLE, LocalFit])
def test_baseline_bad_data(Est):
    with pytest.raises(ValueError, match="requires y"):
        Est().fit(np.zeros((10, 2)))
    data = simulate("poisson", [50, 50], [0.1, 0.2])
    with pytest.raises(ValueError, match="0, 1"):
        Est(family="logistic").fit(data)
