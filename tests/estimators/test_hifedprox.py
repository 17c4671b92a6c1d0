"""HiFedProx on the GLM backend: the regulariser, the Armijo steps and the rounds against independent references."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy.optimize import minimize_scalar

from privfedstat import FedAvg, FederatedData, HiFedProx
from privfedstat.federation import power_prox
from privfedstat.federation.power_prox import Armijo, PowerProx, armijo_step, power_prox_descent

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")

SIZES = (40, 55, 30, 45, 35, 50)


def data(seed=0, sizes=SIZES):
    rng = np.random.default_rng(seed)
    N = sum(sizes)
    X = np.column_stack([np.ones(N), rng.standard_normal((N, 2))])
    y = (rng.random(N) < 1 / (1 + np.exp(-X @ np.array([0.3, -0.8, 0.5])))).astype(float)
    return FederatedData.from_pooled(X, y, sizes=list(sizes))


def logistic(theta, X, y):
    """The logistic mean loss and its gradient (independent of the package's kernels)."""
    z = X @ theta
    return float(np.mean(np.logaddexp(0.0, z) - y * z)), X.T @ (1 / (1 + np.exp(-z)) - y) / len(y)


def phi(d, coef, R, p):
    """The paper's eq. (4), written directly."""
    return coef / (p * R ** (p - 2)) * np.linalg.norm(d) ** p


# ------------------------------------------------------------------ the regulariser and the affine reference
@pytest.mark.parametrize("p", [2, 2.5, 3, 5, 8])
def test_regulariser_value_and_gradient_match_the_formula_and_finite_differences(p):
    prox = PowerProx(0.03, 1.7, p)
    rng = np.random.default_rng(1)
    D = rng.standard_normal((5, 4)) * [[0.1], [0.5], [1.0], [2.0], [4.0]]
    np.testing.assert_allclose(prox.value(D), [phi(d, 0.03, 1.7, p) for d in D], rtol=1e-13)
    G = prox.gradient(D)
    h = 1e-6
    for d, g in zip(D, G):
        fd = [(phi(d + h * e, 0.03, 1.7, p) - phi(d - h * e, 0.03, 1.7, p)) / (2 * h) for e in np.eye(4)]
        np.testing.assert_allclose(g, fd, rtol=1e-6, atol=1e-12)
    zero = prox.gradient(np.zeros((2, 4)))
    assert np.all(zero == 0.0) and np.all(prox.value(np.zeros((1, 4))) == 0.0)
    at_R = prox.gradient(np.array([[1.7, 0, 0, 0]]))  # every power has gradient norm mu R at ||d|| = R
    assert np.linalg.norm(at_R) == pytest.approx(0.03 * 1.7, rel=1e-14)


@pytest.mark.parametrize("p", [2, 3, 6, 8])
def test_affine_reference_is_the_minimiser_of_the_linear_model(p):
    prox = PowerProx(0.4, 0.8, p)
    g = np.array([[0.3, -0.2, 0.9], [0.02, 0.01, 0.0], [0.0, 0.0, 0.0]])
    d = prox.affine_displacement(g)
    for gi, di in zip(g, d):
        theta = np.linalg.norm(gi) / (0.4 * 0.8)
        want = -0.8 * theta ** (1 / (p - 1)) * gi / np.linalg.norm(gi) if theta > 0 else np.zeros(3)
        np.testing.assert_allclose(di, want, rtol=1e-13, atol=0)
        if theta > 0:  # the minimiser lies along -g: a one-dimensional search over its length
            r = minimize_scalar(lambda s, gi=gi: -np.linalg.norm(gi) * s + phi(np.array([s]), 0.4, 0.8, p), bounds=(0, 10),
                                method="bounded", options={"xatol": 1e-12}).x
            np.testing.assert_allclose(di, -r * gi / np.linalg.norm(gi), atol=1e-8)


@pytest.mark.parametrize("p", [2, 4, 7])
def test_local_steps_on_a_linear_loss_reach_the_affine_reference(p):
    """A single client with a linear f (constant gradient g): enough exact Armijo steps reach d_p(g)."""
    prox = PowerProx(0.5, 1.0, p)
    g = np.array([0.6, -0.3, 0.2])
    w = np.array([1.0, 2.0, -1.0])

    def batch_objective(step, who):
        return (lambda U: U @ g), (lambda U: (U @ g, np.tile(g, (U.shape[0], 1))))

    u, trials, _ = power_prox_descent(w, np.array([400]), np.array([0.25]), prox, Armijo(), batch_objective)
    np.testing.assert_allclose(u[0] - w, prox.affine_displacement(g[None])[0], atol=1e-7)
    assert trials[0] >= 400  # (near the minimiser rounding can make the last line searches fail)


# ------------------------------------------------------------------ Armijo
def test_armijo_condition_holds_at_every_accepted_step_and_fails_just_before():
    rng = np.random.default_rng(2)
    A = rng.standard_normal((6, 3, 3))
    H = A @ A.transpose(0, 2, 1) + 0.1 * np.eye(3)  # one quadratic per row
    u = rng.standard_normal((6, 3))

    def Q(U):
        return 0.5 * np.einsum("ki,kij,kj->k", U, H, U)

    g = np.einsum("kij,kj->ki", H, u)
    alpha0 = np.array([0.01, 0.5, 2.0, 10.0, 100.0, 1e9])
    arm = Armijo(c=1e-4, rho=0.5, max_backtracks=12)
    new, trials, failed = armijo_step(u, g, Q(u), Q, alpha0, arm)
    gg = np.sum(g * g, axis=1)
    for k in range(6):
        def q(x, k=k):
            return 0.5 * x @ H[k] @ x

        for j in range(13):  # the naive loop: the first j with sufficient decrease
            a = alpha0[k] * 0.5**j
            ok = q(u[k] - a * g[k]) <= q(u[k]) - 1e-4 * a * gg[k]
            if ok:
                break
        assert trials[k] == j + 1 and failed[k] == (not ok)
        if ok:
            np.testing.assert_array_equal(new[k], u[k] - a * g[k])
            assert q(new[k]) <= q(u[k]) - 1e-4 * a * gg[k]
        else:
            np.testing.assert_array_equal(new[k], u[k])
    assert failed[-1] and trials[-1] == 13  # alpha0 = 1e9 cannot be backtracked far enough in 12 halvings


def naive_round(d, w, *, p, coef, R, steps, alpha0, cohort=None):
    """One HiFedProx round with full batches, written as the paper's loops (a client at a time)."""
    deltas, trials = [], []
    for i in range(d.n_clients) if cohort is None else cohort:
        X, y = d.X[d.offsets[i]:d.offsets[i + 1]], d.y[d.offsets[i]:d.offsets[i + 1]]
        u, count = w.copy(), 0
        for _ in range(steps):
            f, gf = logistic(u, X, y)
            r = np.linalg.norm(u - w)
            g = gf + coef * R ** (2 - p) * r ** (p - 2) * (u - w)
            q0 = f + phi(u - w, coef, R, p)
            for j in range(13):
                a = alpha0 * 0.5**j
                count += 1
                if logistic(u - a * g, X, y)[0] + phi(u - a * g - w, coef, R, p) <= q0 - 1e-4 * a * g @ g:
                    u = u - a * g
                    break
        deltas.append(u - w)
        trials.append(count)
    return w + np.mean(deltas, axis=0), deltas, trials


@pytest.mark.parametrize("p", [2, 4, 7])
def test_rounds_equal_the_paper_loops_with_backtracking(p):
    d = data()
    w = np.zeros(3)
    est = HiFedProx(mu=math.inf, n_rounds=3, power=p, prox_coef=0.5, prox_radius=0.3, n_local_steps=3,
                    step_size=40.0, batch_size=None, random_state=0).fit(d)
    total = 0
    for t in range(3):
        w, deltas, trials = naive_round(d, w, p=p, coef=0.5, R=0.3, steps=3, alpha0=40.0)
        np.testing.assert_allclose(est.history_[t + 1], w, rtol=1e-10, atol=1e-12)
        rows = est.displacements_[est.displacements_["round"] == t]
        np.testing.assert_allclose(rows["displacement"], np.linalg.norm(deltas, axis=1), rtol=1e-10)
        assert rows["armijo_trials"].tolist() == trials
        total += sum(trials)
    assert est.armijo_trials_ == total > 3 * 3 * len(SIZES)  # some backtracking happened
    assert est.line_search_failures_ == 0


def test_p2_without_regulariser_is_fedavg_when_armijo_accepts_alpha0():
    d = data()
    m = d.n_clients
    est = HiFedProx(mu=math.inf, n_rounds=4, power=2, prox_coef=0.0, n_local_steps=5, step_size=0.3, batch_size=None,
                    random_state=0).fit(d)
    assert est.armijo_trials_ == 4 * 5 * m  # alpha0 accepted at every local step
    ref = FedAvg(mu=math.inf, n_rounds=4, n_local_steps=5, step_size=0.3, weights=np.full(m, 1 / m),
                 inference=None).fit(d)
    np.testing.assert_allclose(est.history_, ref.history_, rtol=1e-12, atol=1e-14)


# ------------------------------------------------------------------ pairing, minibatches, cohorts
def test_paired_design_same_cohorts_and_minibatches_for_every_power(monkeypatch):
    drawn = {}
    real = power_prox.minibatch_rows

    def recording(rng, n, b):
        rows = real(rng, n, b)
        drawn.setdefault(key, []).append((n, rows.tolist()))
        return rows

    monkeypatch.setattr(power_prox, "minibatch_rows", recording)
    fits = {}
    for key in (2, 6):
        fits[key] = HiFedProx(mu=math.inf, n_rounds=4, power=key, n_local_steps=np.array([3, 1, 2, 3, 1, 2]),
                              step_size=0.5, batch_size=8, participation=3, random_state=11).fit(data())
    a, b = fits[2].displacements_, fits[6].displacements_
    assert a[["round", "client"]].equals(b[["round", "client"]]) and (a.groupby("round").size() == 3).all()
    assert drawn[2] == drawn[6] and len(drawn[2]) > 0
    assert all(len(rows) == 8 for _, rows in drawn[2])
    assert not np.allclose(fits[2].coef_, fits[6].coef_)
    other = HiFedProx(mu=math.inf, n_rounds=4, power=2, participation=3, random_state=12).fit(data())
    assert not other.displacements_[["round", "client"]].equals(a[["round", "client"]])


def test_same_seed_same_numbers():
    kw = dict(mu=math.inf, n_rounds=3, power=5, participation=4, random_state=3)
    a, b = HiFedProx(**kw).fit(data()), HiFedProx(**kw).fit(data())
    np.testing.assert_array_equal(a.history_, b.history_)
    assert a.displacements_.equals(b.displacements_)


# ------------------------------------------------------------------ privacy
def test_client_level_privacy_as_dpfedavg():
    d = data()
    R, S, mu = 5, 0.4, 1.5
    est = HiFedProx(mu=mu, n_rounds=R, update_clip=S, random_state=0).fit(d)
    led = est.privacy_
    np.testing.assert_allclose(led.client_mu, mu, rtol=0, atol=1e-12)
    assert tuple(led.units) == ("client",) and len(led.releases) == R
    for rec in led.releases:
        np.testing.assert_allclose(rec.sensitivity, 2 * S)
        np.testing.assert_allclose(rec.sigma, 2 * S * math.sqrt(R) / mu)
    assert est.armijo_trials_ is None and est.displacements_["armijo_trials"].isna().all()
    assert est.communication_.floats_per_client == R * d.n_features  # no diagnostics leave a private client
    auto = HiFedProx(mu=mu, n_rounds=R, prox_radius=0.7, random_state=0).fit(d)
    np.testing.assert_allclose(auto.privacy_.releases[0].sensitivity, 2 * 0.7)  # "auto": S = R


def test_updates_are_clipped_and_mu_inf_reports_no_privacy():
    est = HiFedProx(mu=math.inf, n_rounds=3, update_clip=0.01, step_size=2.0, random_state=0).fit(data())
    assert est.displacements_["displacement"].max() <= 0.01
    assert math.isinf(est.privacy_.mu) and not est.privacy_.is_private
    assert "none (mu = inf)" in est.summary().as_text()


@pytest.mark.parametrize("bad, match", [
    (dict(power=1.5), "power"), (dict(prox_coef=-0.1), "prox_coef"), (dict(prox_radius=0.0), "prox_radius"),
    (dict(n_local_steps=[3, 3]), "n_local_steps"), (dict(n_local_steps=0), "n_local_steps"),
    (dict(step_size=[0.5] * 5 + [-1.0]), "step_size"), (dict(batch_size=0), "batch_size"),
    (dict(update_clip="big"), "update_clip"), (dict(armijo_c=1.0), "c"), (dict(backtrack_factor=0.0), "rho"),
    (dict(inference="auto"), "inference=None"), (dict(update_clip=math.inf), "finite"),
])
def test_bad_parameters_are_refused(bad, match):
    with pytest.raises((ValueError, TypeError), match=match):
        HiFedProx(n_rounds=1, **bad).fit(data())


def test_per_client_settings_of_the_wrong_length_are_refused_before_a_budget_is_charged():
    from privfedstat import PrivacyBudget

    d = data()
    budget = PrivacyBudget(mu=3.0, n_clients=d.n_clients)
    with pytest.raises(ValueError, match="n_local_steps"):
        HiFedProx(mu=2.0, n_rounds=1, n_local_steps=[3, 3]).fit(d, budget=budget)
    assert not budget.fits and np.all(budget.spent == 0)
