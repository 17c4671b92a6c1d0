"""FedNMap, Zhang et al. (2024a) and FedCanon on the GLM backend (issue 14): the penalty, the client verb, the
pooled elastic-net solution (an independent solver and scikit-learn, 1e-6), privacy bookkeeping, bad input."""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest
from _enet_reference import _loss_grad, enet_glm

from privfedstat import FedCanon, FederatedData, FedNMap, PrivateStandardize, ZhangComposite
from privfedstat.families import get_family
from privfedstat.federation import InProcessClients
from privfedstat.penalty import ElasticNet
from privfedstat.privacy.mechanisms import ClientNoise

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")

INF = math.inf
BETA = np.array([0.3, 1.0, -0.8, 0.0, 0.0, 0.6, 0.0, 0.0])  # intercept first, a sparse truth
SIZES = (80, 120, 150, 100)


def heterogeneous(family: str, seed: int = 0) -> FederatedData:
    """Clients whose covariates differ in mean and scale (client k: columns shifted by 0.4 k, scaled by 1 + 0.2 k)."""
    rng = np.random.default_rng(seed)
    blocks = [(0.4 * k + (1 + 0.2 * k) * rng.standard_normal((n, BETA.size - 1))) for k, n in enumerate(SIZES)]
    X = np.column_stack([np.ones(sum(SIZES)), np.vstack(blocks)])
    eta = X @ BETA - (0.5 if family == "poisson" else 0.0)
    if family == "logistic":
        y = (rng.random(eta.size) < 1 / (1 + np.exp(-eta))).astype(float)
    elif family == "poisson":
        y = rng.poisson(np.exp(np.clip(eta, -5, 2))).astype(float)
    else:
        y = eta + rng.standard_normal(eta.size)
    return FederatedData.from_pooled(X, y, sizes=list(SIZES))


def local_step(data: FederatedData, family: str, Q: int) -> float:
    """``1 / (L Q)`` with L the largest eigenvalue of the pooled Hessian bound ``kappa X^T X / N``."""
    kappa = {"logistic": 0.25, "gaussian": 1.0, "poisson": 2.0}[family]
    return 1.0 / (kappa * np.linalg.eigvalsh(data.X.T @ data.X / data.n_samples)[-1] * Q)


# ------------------------------------------------------------------------------------ the penalty
def test_prox_satisfies_its_optimality_condition_and_keeps_unpenalised_coordinates():
    rng = np.random.default_rng(1)
    phi = ElasticNet(0.3, 0.2, np.array([False, True, True, True, True]))
    z = rng.standard_normal((6, 5)) * 2
    t = 0.7
    u = phi.prox(z, t)
    np.testing.assert_array_equal(u[:, 0], z[:, 0])
    v, w = u[:, 1:], z[:, 1:]
    r = (w - v) / t - 2 * phi.l2 * v  # must lie in nu1 * subdifferential of |v|
    nz = v != 0
    np.testing.assert_allclose(r[nz], phi.l1 * np.sign(v[nz]), atol=1e-12)
    assert np.all(np.abs(r[~nz]) <= phi.l1 + 1e-12) and np.any(~nz)
    assert not np.any(np.signbit(u[u == 0]))  # 0, not -0
    np.testing.assert_array_equal(phi.prox(z, 0.0), z)
    assert ElasticNet.from_alpha(0.5, 0.25, phi.mask).l1 == 0.125 and ElasticNet.from_alpha(0.5, 0.25, phi.mask).l2 == 0.1875


def test_newton_step_solves_the_penalised_quadratic_model():
    rng = np.random.default_rng(2)
    A = rng.standard_normal((7, 7))
    H = A @ A.T + 0.5 * np.eye(7)
    g, x = rng.standard_normal(7), rng.standard_normal(7)
    phi = ElasticNet(0.8, 0.1, np.array([False] + [True] * 6))
    s = phi.newton_step(x, g, H)
    u, r = x + s, g + H @ s  # KKT of min g's + s'Hs/2 + phi(x + s)
    assert abs(r[0]) < 1e-10
    m = phi.mask & (u != 0)
    np.testing.assert_allclose(r[m] + phi.l1 * np.sign(u[m]) + 2 * phi.l2 * u[m], 0, atol=1e-10)
    assert np.all(np.abs(r[phi.mask & (u == 0)]) <= phi.l1 + 1e-10)
    np.testing.assert_allclose(ElasticNet(0.0, 0.0, phi.mask).newton_step(x, g, H), -np.linalg.solve(H, g), atol=1e-10)


# ------------------------------------------------------------------------------------ the client verb
def test_composite_round_is_the_papers_local_loop():
    """Two rounds of the verb (mu = inf, no clipping) against the local loop written out with independent gradients."""
    data = heterogeneous("logistic")
    clients = InProcessClients(data, get_family("logistic"), ClientNoise(np.random.SeedSequence(0), 4))
    phi = ElasticNet(0.05, 0.01, np.array([False] + [True] * (BETA.size - 1)))
    rng = np.random.default_rng(3)
    z = 0.3 * rng.standard_normal(BETA.size)
    gamma, eta, Q = 0.8, 0.1, 3
    o = data.offsets
    parts = [(data.X[o[i]:o[i + 1]], data.y[o[i]:o[i + 1]]) for i in range(4)]
    c, y_last, ybar = np.zeros((4, BETA.size)), None, None
    for _ in range(2):
        x = phi.prox(z, gamma)
        shift = (z - x) / gamma
        reply = clients.composite_round(z, shift=shift, prox_steps=(gamma,) * Q, penalty=phi, ybar=ybar, clip=INF,
                                        step_size=eta, sensitivity=0.0, mu=INF, stage="t")
        expected = []
        for i, (Xi, yi) in enumerate(parts):
            if ybar is not None:
                c[i] = c[i] - y_last[i] + ybar
            zi = z.copy()
            for _ in range(Q):
                zi = zi - eta * (_loss_grad("logistic", Xi, yi, phi.prox(zi, gamma))[1] + shift + c[i])
            expected.append((z - zi) / (eta * Q))
        np.testing.assert_allclose(reply.values, np.array(expected), rtol=0, atol=1e-12)
        assert [r.kind for r in reply.releases] == ["local"] * Q
        y_last = reply.values
        ybar = data.sizes / data.n_samples @ y_last
        z = z - 0.5 * ybar


@pytest.mark.parametrize("cls", [FedNMap, ZhangComposite, FedCanon])
def test_one_client_and_one_local_step_is_proximal_gradient_descent(cls):
    data = heterogeneous("gaussian")
    one = FederatedData.from_pooled(data.X, data.y, sizes=[data.n_samples])
    eta = local_step(data, "gaussian", 1)
    est = cls(family="gaussian", mu=INF, n_rounds=6, n_local_steps=1, step_size=eta, alpha=0.05, penalty="elasticnet",
              l1_ratio=0.5).fit(one)
    phi = est.penalty_
    x, path = np.zeros(BETA.size), [np.zeros(BETA.size)]
    for _ in range(6):
        x = phi.prox(x - eta * _loss_grad("gaussian", data.X, data.y, x)[1], eta)
        path.append(x)
    np.testing.assert_allclose(est.history_, np.array(path), rtol=0, atol=1e-13)


# ------------------------------------------------------------------------------------ the pooled solution
#: penalty strengths that leave at least two of the five zero coefficients of BETA at zero
ALPHA = {"logistic": 0.03, "poisson": 0.03, "gaussian": 0.1}
CASES = [(f, cls, pen) for f in ("logistic", "poisson", "gaussian") for cls in (FedNMap, ZhangComposite)
         for pen in ("l1", "elasticnet")]


@pytest.mark.parametrize("family, cls, penalty", CASES, ids=[f"{f}-{c.__name__}-{p}" for f, c, p in CASES])
def test_no_noise_converges_to_the_pooled_elastic_net(family, cls, penalty):
    """mu = inf, no clipping, heterogeneous clients: the pooled penalised estimate to 1e-6 (an independent solver)."""
    data = heterogeneous(family)
    ratio = 0.6 if penalty == "elasticnet" else None
    alpha = ALPHA[family]
    reference = enet_glm(data.X, data.y, family, alpha, 1.0 if ratio is None else ratio)
    Q = 5
    est = cls(family=family, mu=INF, n_rounds=1500, n_local_steps=Q, step_size=local_step(data, family, Q), alpha=alpha,
              penalty=penalty, l1_ratio=ratio).fit(data)
    print(f"max |coef - pooled| = {np.max(np.abs(est.coef_ - reference)):.2e}")
    assert np.max(np.abs(est.coef_ - reference)) < 1e-6
    assert np.sum(reference[1:] == 0) >= 2 and np.array_equal(est.coef_ == 0, reference == 0)  # the same support
    assert est.converged_ and est.n_iter_ == 1500 * Q


def test_the_pooled_solution_is_scikit_learns():
    """The reference solver and FedNMap against scikit-learn's ElasticNet (Gaussian) and saga LogisticRegression."""
    from sklearn.linear_model import ElasticNet as SkElasticNet
    from sklearn.linear_model import LogisticRegression

    for family in ("gaussian", "logistic"):
        data = heterogeneous(family)
        N = data.n_samples
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            if family == "gaussian":
                sk = SkElasticNet(alpha=0.03, l1_ratio=0.6, tol=1e-14, max_iter=100_000).fit(data.X[:, 1:], data.y)
            else:
                sk = LogisticRegression(penalty="elasticnet", solver="saga", C=1 / (0.03 * N), l1_ratio=0.6, tol=1e-14,
                                        max_iter=100_000).fit(data.X[:, 1:], data.y)
        sk_coef = np.r_[np.ravel(sk.intercept_), np.ravel(sk.coef_)]
        np.testing.assert_allclose(enet_glm(data.X, data.y, family, 0.03, 0.6), sk_coef, rtol=0, atol=1e-8)
        est = FedNMap(family=family, mu=INF, n_rounds=1500, n_local_steps=5, step_size=local_step(data, family, 5),
                      alpha=0.03, penalty="elasticnet", l1_ratio=0.6).fit(data)
        assert np.max(np.abs(est.coef_ - sk_coef)) < 1e-6


def test_fedcanon_settles_off_the_optimum_with_local_steps():
    """FedCanon's local steps ignore phi: with K > 1 on heterogeneous clients its fixed point is not the composite
    minimiser (here 0.008 off, about 0.1 sampling SE: the mu = inf check stays quiet below 0.5 SE), with K = 1 it is
    proximal gradient descent and reaches it."""
    data = heterogeneous("logistic")
    reference = enet_glm(data.X, data.y, "logistic", 0.03, 1.0)
    K = 5
    biased = FedCanon(mu=INF, n_rounds=1500, n_local_steps=K, step_size=local_step(data, "logistic", K), alpha=0.03).fit(data)
    assert np.max(np.abs(biased.coef_ - reference)) > 1e-3
    assert np.max(np.abs(biased.history_[-1] - biased.history_[-2])) < 1e-12  # settled there
    exact = FedCanon(mu=INF, n_rounds=1500, n_local_steps=1, step_size=local_step(data, "logistic", 1), alpha=0.03).fit(data)
    assert np.max(np.abs(exact.coef_ - reference)) < 1e-6


@pytest.mark.parametrize("family", ["logistic", "multinomial"])
def test_a_huge_penalty_leaves_only_the_unpenalised_intercept(family):
    data = heterogeneous("logistic")
    if family == "multinomial":
        y = np.random.default_rng(4).integers(0, 3, data.n_samples).astype(float)
        data = FederatedData(data.X, y, data.offsets)
        fam = get_family("multinomial", n_classes=3)
        counts = np.bincount(y.astype(int), minlength=3)
        expected = np.log(counts[1:] / counts[0])
    else:
        fam = "logistic"
        expected = math.log(data.y.mean() / (1 - data.y.mean()))
    est = FedNMap(family=fam, mu=INF, n_rounds=800, n_local_steps=2, step_size=0.5, alpha=10.0).fit(data)
    np.testing.assert_allclose(est.coef_[0], expected, atol=1e-6)
    assert np.all(est.coef_[1:] == 0)


# ------------------------------------------------------------------------------------ privacy
@pytest.mark.parametrize("cls", [FedNMap, ZhangComposite])
def test_private_fit_spends_mu_on_the_local_gradients_and_sends_one_vector_per_round(cls):
    data = heterogeneous("logistic")
    R, Q, B, mu = 4, 3, 1.5, 1.3
    est = cls(mu=mu, n_rounds=R, n_local_steps=Q, clip=B, random_state=2).fit(data)
    releases = est.privacy_.releases
    assert [r.stage for r in releases] == ["local-gradient"] * (R * Q) and {r.kind for r in releases} == {"local"}
    np.testing.assert_allclose(releases[0].sigma, 2 * B * math.sqrt(R * Q) / (mu * data.sizes), rtol=1e-12)
    np.testing.assert_allclose(est.privacy_.client_mu, mu, rtol=0, atol=1e-12)
    assert (est.communication_.rounds, est.communication_.floats_per_client) == (R, R * BETA.size)
    again = cls(mu=mu, n_rounds=R, n_local_steps=Q, clip=B, random_state=2).fit(data)
    np.testing.assert_array_equal(again.coef_, est.coef_)


def test_the_upload_noise_is_that_of_one_release_of_sensitivity_2B_over_n_per_round():
    """The docstring's claim: noising the Q local gradients at mu / sqrt(R Q) puts noise of sd ``2 B sqrt(R) / (mu n_i)``
    on the upload y_i, whatever Q. Measured over 300 seeds on data whose gradients are 0 (a zero design, y = 0)."""
    n = 50
    data = FederatedData.from_pooled(np.zeros((2 * n, 2)), np.zeros(2 * n), sizes=[n, n])
    R, Q, B, mu = 3, 4, 1.0, 2.0
    ys = []
    for seed in range(300):
        clients = InProcessClients(data, get_family("gaussian"),
                                   ClientNoise(np.random.SeedSequence(seed), 2))
        sens = 2 * B / data.sizes
        reply = clients.composite_round(np.zeros(2), shift=np.zeros(2), prox_steps=(1.0,) * Q,
                                        penalty=ElasticNet(0.0, 0.0, np.ones(2, bool)), ybar=None, clip=B,
                                        step_size=0.1, sensitivity=sens, mu=mu / math.sqrt(R * Q), stage="t")
        ys.append(reply.values[0])
    sd = float(np.std(np.array(ys)))
    assert sd == pytest.approx(2 * B * math.sqrt(R) / (mu * n), rel=0.1)


# ------------------------------------------------------------------------------------ bad input
@pytest.mark.parametrize("params, error, match", [
    ({"penalty": "l2"}, ValueError, "penalty must be one of"),
    ({"alpha": -1.0}, ValueError, "alpha must be"),
    ({"alpha": math.inf}, ValueError, "alpha must be"),
    ({"l1_ratio": 0.5}, ValueError, "penalty='l1' takes l1_ratio=None"),
    ({"penalty": "elasticnet"}, ValueError, "needs l1_ratio in"),
    ({"penalty": "elasticnet", "l1_ratio": 1.5}, ValueError, "needs l1_ratio in"),
    ({"unpenalized": (9,)}, ValueError, "not columns of X"),
    ({"unpenalized": 0}, TypeError, "tuple of column indices"),
    ({"unpenalized": (), "scaling": "private"}, ValueError, "declares column 0 the intercept"),
    ({"unpenalized": (1,), "scaling": PrivateStandardize(intercept=0)}, ValueError, "add 0 to unpenalized"),
    ({"inference": "auto"}, ValueError, "inference=None"),
    ({"gamma": -1.0}, ValueError, "gamma must be > 0"),
    ({"n_local_steps": 0}, ValueError, "n_local_steps"),
])
def test_bad_parameters_are_refused_before_any_release(params, error, match):
    data = heterogeneous("logistic")
    est = FedNMap(mu=1.0, n_rounds=2, **params)
    with pytest.raises(error, match=match):
        est.fit(data)
    assert not hasattr(est, "privacy_")
