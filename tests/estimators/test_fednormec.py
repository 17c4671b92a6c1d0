"""Fed-alpha-NormEC and its clipped DP-FedAvg comparator: smoothed normalisation, naive reference loops, the MLE,
calibration (mu, PLD target, the paper's formula), amplification, the ledger, failures, whole-client neighbours."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays
from scipy.special import expit

from privfedstat import ClientFailureError, FederatedData, PrivacyBudget
from privfedstat._linalg import smoothed_normalize
from privfedstat.algorithms.fednormec import ClippedFedAvg, FedAlphaNormEC
from privfedstat.federation import FailingData
from privfedstat.privacy.accounting import noise_multiplier_for_epsilon, subsampled_gaussian_epsilon
from privfedstat.privacy.calibration import normec_noise_multiplier

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")

MAX = float(np.finfo(np.float64).max)
TINY = float(np.finfo(np.float64).smallest_subnormal)


def _data(sizes=(40, 55, 70, 35, 60), seed=0, family="logistic"):
    rng = np.random.default_rng(seed)
    N = int(np.sum(sizes))
    X = np.column_stack([np.ones(N), rng.standard_normal((N, 2))])
    eta = X @ np.array([0.3, -0.6, 0.2])
    y = (rng.random(N) < expit(eta)).astype(float) if family == "logistic" else eta + rng.standard_normal(N)
    return FederatedData.from_pooled(X, y, sizes=list(sizes))


def _norm(a: np.ndarray) -> float:
    scale = float(np.max(np.abs(a)))
    return 0.0 if scale == 0 else scale * float(np.sqrt(np.sum((a / scale) ** 2)))


# ------------------------------------------------------------------------------ Norm_alpha
finite = st.floats(allow_nan=False, allow_infinity=False, width=64)
extreme = st.sampled_from([0.0, TINY, -TINY, 1e-310, 1e-300, 1e-160, 1e-150, 1.0, -1.0, 1e150, 1e155, 1e300, -1e300,
                           MAX, -MAX])


@given(u=arrays(np.float64, st.integers(1, 40), elements=st.one_of(finite, extreme)),
       alpha=st.one_of(st.floats(1e-300, 1e300), st.sampled_from([TINY, 1e-12, 0.01, 1.0, MAX])))
def test_smoothed_normalisation_has_norm_below_one_for_every_finite_input(u, alpha):
    out = smoothed_normalize(u[None, :], alpha)[0]
    assert np.all(np.isfinite(out))
    assert _norm(out) < 1.0
    n = _norm(u)
    if 1e-150 < n < 1e150 and 1e-150 < alpha < 1e150:  # away from under/overflow: the formula itself
        np.testing.assert_allclose(out, u / (alpha + n), rtol=1e-12, atol=0)


def test_smoothed_normalisation_of_rows():
    u = np.array([[3.0, 4.0], [0.0, 0.0], [-1e-3, 0.0]])
    np.testing.assert_allclose(smoothed_normalize(u, 1.0), [[0.5, 2 / 3], [0.0, 0.0], [-1e-3 / 1.001, 0.0]], rtol=1e-14)


# ------------------------------------------------------------------------------ naive references
def _gradient(X, y, theta, family):
    r = expit(X @ theta) - y if family == "logistic" else X @ theta - y
    return X.T @ r / len(y)


def _naive_normec(data, R, alpha, beta, gamma, eta, T=1, ig=False, sent=None, p=1.0, family="logistic"):
    """Algorithm 1 of Shulgin et al. (2025) without noise, client by client; ``sent[k, i]``: client i sends in round k."""
    m, d = data.n_clients, data.n_features
    w = data.sizes / data.sizes.sum()
    o = data.offsets
    x, v, h = np.zeros(d), np.zeros((m, d)), np.zeros((m, d))
    for k in range(R):
        for i in range(m):
            X, y = data.X[o[i]:o[i + 1]], data.y[o[i]:o[i + 1]]
            local = x.copy()
            if ig:  # one pass, fixed cyclic order, steps gamma / n_i
                for j in range(len(y)):
                    local = local - gamma / len(y) * _gradient(X[j:j + 1], y[j:j + 1], local, family)
            else:
                for _ in range(T):
                    local = local - gamma / T * _gradient(X, y, local, family)
            u = (x - local) / gamma
            delta = (u - v[i]) / (alpha + np.linalg.norm(u - v[i]))
            v[i] += beta * delta
            if sent is None or sent[k, i]:
                h[i] += beta / p * delta
        x = x - eta * (w @ h)
    return x


@pytest.mark.parametrize("T, ig", [(1, False), (3, False), (1, True)])
def test_without_noise_it_is_algorithm_1(T, ig):
    data = _data()
    est = FedAlphaNormEC(mu=math.inf, n_rounds=12, alpha=0.05, beta=0.2, step_size=0.7, server_step_size=0.9,
                         n_local_steps=T, local_solver="ig" if ig else "gd", random_state=0).fit(data)
    ref = _naive_normec(data, 12, 0.05, 0.2, 0.7, 0.9, T, ig)
    np.testing.assert_allclose(est.coef_, ref, rtol=1e-9, atol=1e-12)
    assert len(est.history_) == 13 and est.n_iter_ == 12 * T


def test_with_partial_participation_every_client_keeps_compensating_and_the_server_scales_by_one_over_p():
    data = _data(sizes=(30,) * 8)
    p = 0.4
    est = FedAlphaNormEC(mu=math.inf, n_rounds=15, alpha=0.1, beta=0.1, step_size=0.5, server_step_size=0.8,
                         participation=p, random_state=3).fit(data)
    sent = np.array([r.sensitivity > 0 for r in est.privacy_.releases])  # who sent in each round (the ledger)
    assert sent.shape == (15, 8) and 0 < sent.mean() < 1 and sent.any(axis=1).all()
    ref = _naive_normec(data, 15, 0.1, 0.1, 0.5, 0.8, sent=sent, p=p)
    np.testing.assert_allclose(est.coef_, ref, rtol=1e-9, atol=1e-12)


def test_server_normalisation_steps_eta_along_v_hat():
    est = FedAlphaNormEC(mu=math.inf, n_rounds=6, server_step_size=0.05, server_normalization=True).fit(_data())
    steps = np.linalg.norm(np.diff(est.history_, axis=0), axis=1)
    np.testing.assert_allclose(steps, 0.05, rtol=1e-12)


@pytest.mark.parametrize("family", ["logistic", "gaussian"])
def test_one_local_step_without_noise_converges_to_the_mle(family):
    import statsmodels.api as sm

    data = _data(family=family)  # unequal sizes: size weights make the fixed point the pooled MLE
    est = FedAlphaNormEC(family=family, mu=math.inf, n_rounds=1500, alpha=0.1, beta=0.05, server_step_size=0.5 if
                         family == "gaussian" else 1.0).fit(data)
    model = sm.Logit(data.y, data.X) if family == "logistic" else sm.OLS(data.y, data.X)
    mle = model.fit(disp=0).params if family == "logistic" else model.fit().params
    np.testing.assert_allclose(est.coef_, mle, atol=1e-10)
    assert est.converged_


@pytest.mark.slow
def test_incremental_gradient_settles_within_order_gamma_of_the_mle():
    import statsmodels.api as sm

    data = _data()
    mle = sm.Logit(data.y, data.X).fit(disp=0).params
    gaps = [np.max(np.abs(FedAlphaNormEC(mu=math.inf, n_rounds=1500, alpha=0.1, beta=0.05, step_size=g, server_step_size=1.0,
                                         local_solver="ig").fit(data).coef_ - mle)) for g in (1.0, 0.1)]
    assert gaps[1] < gaps[0] / 5 and gaps[1] < 2e-3  # the incremental pass's bias is O(gamma)


def test_the_comparator_is_the_papers_clipped_fedavg():
    data = _data(sizes=(50,) * 6)
    gamma, beta, eta, T, R = 0.8, 0.05, 0.6, 3, 7
    est = ClippedFedAvg(mu=math.inf, n_rounds=R, beta=beta, step_size=gamma, server_step_size=eta, n_local_steps=T,
                        random_state=0).fit(data)
    x, o = np.zeros(3), data.offsets
    for _ in range(R):  # x <- x - eta / M sum_i Psi_beta((x - T_i(x)) / gamma)
        g = []
        for i in range(6):
            local = x.copy()
            for _ in range(T):
                local = local - gamma / T * _gradient(data.X[o[i]:o[i + 1]], data.y[o[i]:o[i + 1]], local, "logistic")
            u = (x - local) / gamma
            g.append(u * min(1.0, beta / np.linalg.norm(u)))
        x = x - eta * np.mean(g, axis=0)
    np.testing.assert_allclose(est.coef_, x, rtol=1e-9)  # the verb's clip carries a 1 - 2^-40 safety factor
    loose = ClippedFedAvg(mu=math.inf, n_rounds=800, beta=100.0, server_step_size=1.0).fit(data)  # no clipping: FedAvg
    import statsmodels.api as sm

    np.testing.assert_allclose(loose.coef_, sm.Logit(data.y, data.X).fit(disp=0).params, atol=1e-9)


# ------------------------------------------------------------------------------ privacy
@pytest.mark.parametrize("cls", [FedAlphaNormEC, ClippedFedAvg])
def test_the_ledger_is_client_level_and_spends_exactly_mu(cls):
    data = _data()
    est = cls(mu=1.5, n_rounds=8, random_state=1).fit(data)
    led = est.privacy_
    assert led.units == ("client",) and len(led.releases) == 8
    np.testing.assert_allclose(led.client_mu, 1.5, rtol=0, atol=1e-12)
    sigma = 2 * math.sqrt(8) / 1.5
    assert est.sigma_ == pytest.approx(sigma, rel=1e-14)
    rec = led.releases[0]
    gamma_beta = 1.0 if cls is FedAlphaNormEC else 0.1 / (0.25 * 3)  # the comparator's verb releases the update
    np.testing.assert_allclose(rec.sensitivity, 2.0 * gamma_beta, rtol=1e-15)  # a whole client replaced
    np.testing.assert_allclose(2 * rec.sigma / rec.sensitivity, sigma, rtol=1e-13)  # noise multiplier z = 2 sigma / Delta
    budget = PrivacyBudget(mu=2.0, n_clients=data.n_clients)
    cls(mu=1.5, n_rounds=8, random_state=1).fit(data, budget=budget)  # the charge settles: ledger == declared mu


def test_a_target_epsilon_is_met_by_the_pld_and_reported():
    data = _data(sizes=(30,) * 10)
    eps, delta, p, R = 4.0, 1e-5, 0.5, 20
    est = FedAlphaNormEC(mu=None, epsilon=(eps, delta), participation=p, n_rounds=R, random_state=2).fit(data)
    z = noise_multiplier_for_epsilon(eps, delta, p, R)
    assert est.sigma_ == pytest.approx(z, rel=1e-12)
    assert est.mu_ == pytest.approx(2 * math.sqrt(R) / z, rel=1e-12)  # the guarantee towards the server
    expected = subsampled_gaussian_epsilon(z, p, R, delta)  # dp-accounting for the same (q, sigma, T)
    assert est.epsilon_ == pytest.approx(expected, rel=1e-9)
    assert eps - 1e-3 <= est.epsilon_ <= eps and est.delta_ == delta
    took = np.array([r.sensitivity > 0 for r in est.privacy_.releases])
    np.testing.assert_allclose(est.privacy_.client_mu, est.mu_ * np.sqrt(took.sum(axis=0) / R), rtol=1e-12)


def test_the_calibration_is_conservative_and_cached():
    """The search runs on a coarse PLD grid; the sigma it returns meets the target on the default grid and, at
    p = 1, on a 10x finer one and under the exact GDP composition sqrt(R) / sigma; a second call is a cache hit."""
    from privfedstat.privacy import accounting
    from privfedstat.privacy.gdp import epsilon_from_mu

    for p, R in ((1.0, 300), (0.5, 20)):
        z = normec_noise_multiplier(8.0, 1e-5, p, R)
        assert 8.0 - 1e-3 <= subsampled_gaussian_epsilon(z, p, R, 1e-5) <= 8.0
        assert subsampled_gaussian_epsilon(0.999 * z, p, R, 1e-5) > 8.0 - 1e-3  # near the smallest such sigma
    z = normec_noise_multiplier(8.0, 1e-5, 1.0, 300)
    assert subsampled_gaussian_epsilon(z, 1.0, 300, 1e-5, value_discretization_interval=1e-5) <= 8.0
    assert epsilon_from_mu(math.sqrt(300) / z, 1e-5) <= 8.0
    hits = accounting._noise_multiplier.cache_info().hits
    normec_noise_multiplier(8.0, 1e-5, 0.5, 20)
    assert accounting._noise_multiplier.cache_info().hits == hits + 1


def test_the_papers_sigma_formula_and_its_actual_epsilon():
    R, p, eps, delta = 20, 0.5, 4.0, 1e-5
    sigma = normec_noise_multiplier(eps, delta, p, R, rule="paper")
    assert sigma == pytest.approx(p * math.sqrt(R * math.log(1 / delta)) / eps, rel=1e-15)
    with pytest.warns(UserWarning, match="gives epsilon"):
        est = FedAlphaNormEC(mu=None, epsilon=(eps, delta), sigma="paper", participation=p, n_rounds=R,
                             random_state=0).fit(_data(sizes=(30,) * 10))
    assert est.sigma_ == pytest.approx(sigma, rel=1e-12)
    assert est.epsilon_ == pytest.approx(subsampled_gaussian_epsilon(sigma, p, R, delta), rel=1e-9) and est.epsilon_ > eps


@pytest.mark.slow
def test_amplification_for_the_same_epsilon_sigma_shrinks_with_p():
    """Corollary 1's sigma_DP ~ p: at epsilon = 4, delta = 1e-5, R = 20 the PLD noise multipliers (replace-one)
    are about 2.40, 4.81, 9.67 for p = 0.25, 0.5, 1 (ratio to p = 1: 0.25, 0.50)."""
    z = {p: normec_noise_multiplier(4.0, 1e-5, p, 20) for p in (0.25, 0.5, 1.0)}
    assert z[0.25] < z[0.5] < z[1.0]
    assert z[0.25] / z[1.0] < 0.4 and z[0.5] / z[1.0] < 0.6
    for p, s in z.items():  # each meets the target within the bisection's tolerance
        assert 4.0 - 1e-3 <= subsampled_gaussian_epsilon(s, p, 20, 1e-5) <= 4.0


def test_without_noise_epsilon_is_infinite_and_mu_fits_report_at_the_default_delta():
    est = FedAlphaNormEC(mu=math.inf, n_rounds=3).fit(_data())
    assert math.isinf(est.epsilon_) and est.delta_ == 1e-5 and est.sigma_ == 0.0


def test_failures_are_skipped_or_raised():
    data = FailingData(_data(), {3: 2})
    with pytest.raises(ClientFailureError):
        FedAlphaNormEC(mu=2.0, n_rounds=5, random_state=0).fit(data)
    est = FedAlphaNormEC(mu=2.0, n_rounds=5, random_state=0, on_client_failure="skip").fit(data)
    np.testing.assert_allclose(est.privacy_.client_mu[3], 2.0 * math.sqrt(2 / 5), rtol=1e-12)
    assert all(r.sensitivity[3] == 0 and r.weights[3] == 0 for r in est.privacy_.releases[2:])
    # without noise, the skipped client's past messages leave v_hat: the rest is Algorithm 1 on the live clients
    quiet = FedAlphaNormEC(mu=math.inf, n_rounds=200, alpha=0.1, beta=0.05, step_size=0.5, server_step_size=1.0,
                           on_client_failure="skip").fit(FailingData(_data(), {3: 0}))
    live = _data()
    o = live.offsets
    keep = np.r_[o[0]:o[3], o[4]:o[5]]
    rest = live.take(keep, np.delete(live.sizes, 3))
    np.testing.assert_allclose(quiet.coef_, _naive_normec(rest, 200, 0.1, 0.05, 0.5, 1.0), rtol=1e-9)


def test_same_seed_same_numbers():
    data = _data()
    make = lambda seed: FedAlphaNormEC(mu=2.0, n_rounds=6, participation=0.5, random_state=seed).fit(data)  # noqa: E731
    a, b, c = make(4), make(4), make(5)
    np.testing.assert_array_equal(a.coef_, b.coef_)
    assert not np.array_equal(a.coef_, c.coef_)


def test_a_diverging_client_still_sends_a_bounded_message():
    data = _data()
    X = data.X.copy()
    X[:40] *= 1e200  # client 0's rows are enormous: its local steps overflow
    est = FedAlphaNormEC(mu=2.0, n_rounds=3, n_local_steps=2, random_state=0).fit(FederatedData(X, data.y, data.offsets))
    assert np.all(np.isfinite(est.coef_))


@pytest.mark.parametrize("cls", [FedAlphaNormEC, ClippedFedAvg])
def test_whole_client_neighbours_move_each_message_by_at_most_its_stated_sensitivity(cls, monkeypatch):
    from _replay import check_neighbours, tap_channel
    from test_dpfedavg import _client_neighbours  # client 0's single row replaced: its message turns around

    from privfedstat.federation import clients

    data, neighbour = _client_neighbours()
    extra = {"alpha": 1e-3} if cls is FedAlphaNormEC else {}

    def make():
        return cls(mu=1.0, n_rounds=4, beta=0.01, participation=0.6, random_state=0, **extra)

    with tap_channel():
        transcript = check_neighbours(make, data, neighbour)
    assert len(transcript.messages) == 4
    privatize = clients.privatize

    def understated(values, noise, sensitivity, mu, stage, kind, **kw):  # states half the replacement sensitivity
        return privatize(values, noise, np.asarray(sensitivity, dtype=np.float64) / 2, mu, stage, kind, **kw)

    monkeypatch.setattr(clients, "privatize", understated)
    with tap_channel(), pytest.raises(AssertionError, match="stated sensitivity"):
        check_neighbours(make, data, neighbour)


# ------------------------------------------------------------------------------ bad input
@pytest.mark.parametrize("params, match", [
    ({"mu": 2.0, "epsilon": (8.0, 1e-5)}, "either mu"),
    ({"sigma": "paper"}, "needs a target"),
    ({"mu": None, "epsilon": (8.0, 1e-5), "sigma": 3.0}, "sigma must be"),
    ({"mu": None, "epsilon": 8.0}, "pair"),
    ({"mu": None, "epsilon": (8.0, 2.0)}, "pair"),
    ({"mu": None}, "mu must be"),
    ({"local_solver": "sgd"}, "local_solver"),
    ({"local_solver": "ig", "n_local_steps": 2}, "one pass"),
    ({"alpha": 0.0}, "alpha"),
    ({"beta": -1.0}, "beta"),
    ({"inference": "auto"}, "inference=None"),
    ({"server_normalization": "yes"}, "server_normalization"),
])
def test_bad_parameters_are_refused_before_any_release(params, match):
    with pytest.raises((ValueError, TypeError), match=match):
        FedAlphaNormEC(**params).fit(_data())


@pytest.mark.parametrize("eps", [10.0, 1e3, 1e4, 1e6])
def test_any_target_epsilon_is_met_quickly_and_the_summary_states_it(eps):
    """Large targets resolve (no 'use a larger tol', a parameter the estimator does not have) within seconds, and
    the summary states the target met, with its neighbouring relation."""
    import time

    start = time.perf_counter()
    est = FedAlphaNormEC(mu=None, epsilon=(eps, 1e-5), n_rounds=20, random_state=0).fit(_data())
    header = est.summary().header
    assert time.perf_counter() - start < 10.0
    assert eps * (1 - 1e-6) <= est.epsilon_ <= eps
    assert header["Privacy unit"] == "client (one client's whole dataset, replace-one)"
    assert header["Towards third parties"].startswith(f"eps = {eps:.4g} at delta = 1e-05")
