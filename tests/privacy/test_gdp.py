"""Tests for privfedstat.privacy.gdp (mu-GDP arithmetic of Dong, Roth & Su 2022).

Reference values are computed independently in this file (scipy.stats.norm / math.erfc, or
mpmath when available) rather than with the package's own helpers.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy.optimize import brentq
from scipy.stats import norm

from privfedstat.privacy.gdp import (
    calibrate_sigma,
    compose,
    delta_from_mu,
    epsilon_from_mu,
    gaussian_mu,
    mu_from_epsilon_delta,
)

try:  # optional high-precision reference
    import mpmath  # type: ignore
except ImportError:  # pragma: no cover - depends on the environment
    mpmath = None


# --------------------------------------------------------------------------- independent references
def delta_ref(mu: float, eps: float) -> float:
    """Dong-Roth-Su Corollary 2.13 with scipy.stats.norm (plain, no log-space tricks)."""
    return float(norm.cdf(-eps / mu + mu / 2) - math.exp(eps) * norm.cdf(-eps / mu - mu / 2))


def _phi_erfc(x: float) -> float:
    return 0.5 * math.erfc(-x / math.sqrt(2.0))


def delta_ref_erfc(mu: float, eps: float) -> float:
    """Same formula through math.erfc (accurate in the tails, independent of scipy.special)."""
    return _phi_erfc(-eps / mu + mu / 2) - math.exp(eps) * _phi_erfc(-eps / mu - mu / 2)


def eps_high_precision(mu: float, delta: float) -> float:
    """Independent solve of delta(eps) = delta for eps."""
    if mpmath is not None:
        with mpmath.workdps(50):
            m, d = mpmath.mpf(mu), mpmath.mpf(delta)

            def f(e):
                return mpmath.ncdf(-e / m + m / 2) - mpmath.exp(e) * mpmath.ncdf(-e / m - m / 2) - d

            bracket = (mpmath.mpf(0), mpmath.mpf(mu * mu + 20 * mu + 10))
            return float(mpmath.findroot(f, bracket, solver="illinois", tol=mpmath.mpf(10) ** -40, maxsteps=500))
    # fall back: tight brentq on the erfc implementation above
    return brentq(lambda e: delta_ref_erfc(mu, e) - delta, 0.0, mu * mu + 20 * mu + 10, xtol=1e-15, rtol=1e-15, maxiter=1000)


MUS = [0.05, 0.2, 0.5, 1.0, 2.0, 4.0, 8.0]
DELTAS = [1e-10, 1e-6, 1e-5, 1e-3, 0.05, 0.3]


# --------------------------------------------------------------------------- gaussian_mu / calibrate_sigma
class TestGaussianMu:
    @pytest.mark.parametrize("sens,sigma", [(1.0, 1.0), (2.0, 0.5), (0.3, 7.0), (1e-6, 1e-3)])
    def test_ratio(self, sens, sigma):
        assert gaussian_mu(sens, sigma) == pytest.approx(sens / sigma, rel=1e-15, abs=0)

    def test_zero_sensitivity_is_zero(self):
        assert gaussian_mu(0.0, 1.0) == 0.0
        assert gaussian_mu(0.0, 0.0) == 0.0

    def test_zero_sigma_is_no_privacy(self):
        assert gaussian_mu(1.0, 0.0) == math.inf

    def test_infinite_sensitivity(self):
        assert gaussian_mu(math.inf, 1.0) == math.inf

    def test_infinite_sigma(self):
        assert gaussian_mu(1.0, math.inf) == 0.0

    @pytest.mark.parametrize("sens,sigma", [(-1.0, 1.0), (1.0, -1.0), (math.nan, 1.0), (1.0, math.nan)])
    def test_bad_inputs(self, sens, sigma):
        with pytest.raises(ValueError):
            gaussian_mu(sens, sigma)


class TestCalibrateSigma:
    @pytest.mark.parametrize("sens,mu", [(1.0, 1.0), (2.0, 0.5), (0.3, 7.0), (5.0, 1e-3)])
    def test_value_and_round_trip(self, sens, mu):
        sigma = calibrate_sigma(sens, mu)
        assert sigma == pytest.approx(sens / mu, rel=1e-15, abs=0)
        assert gaussian_mu(sens, sigma) == pytest.approx(mu, rel=1e-14, abs=0)

    def test_mu_inf_gives_zero_noise(self):
        assert calibrate_sigma(1.0, math.inf) == 0.0
        assert calibrate_sigma(0.0, math.inf) == 0.0
        assert calibrate_sigma(math.inf, math.inf) == 0.0

    def test_zero_sensitivity_needs_no_noise(self):
        assert calibrate_sigma(0.0, 1.0) == 0.0

    def test_infinite_sensitivity_with_finite_mu_raises(self):
        with pytest.raises(ValueError, match="[Ii]nfinite sensitivity"):
            calibrate_sigma(math.inf, 1.0)

    @pytest.mark.parametrize("mu", [0.0, -1.0, math.nan])
    def test_bad_mu(self, mu):
        with pytest.raises(ValueError):
            calibrate_sigma(1.0, mu)

    @pytest.mark.parametrize("sens", [-1.0, math.nan])
    def test_bad_sensitivity(self, sens):
        with pytest.raises(ValueError):
            calibrate_sigma(sens, 1.0)

    def test_smaller_mu_means_more_noise(self):
        sig = [calibrate_sigma(1.0, m) for m in (0.1, 0.5, 1.0, 3.0)]
        assert all(a > b for a, b in zip(sig, sig[1:]))


# --------------------------------------------------------------------------- compose
class TestCompose:
    def test_pythagoras(self):
        assert compose([3.0, 4.0]) == pytest.approx(5.0, rel=1e-15, abs=0)

    def test_k_equal(self):
        for k in (1, 2, 7, 100):
            assert compose([0.3] * k) == pytest.approx(0.3 * math.sqrt(k), rel=1e-13, abs=0)

    def test_random_sum_of_squares(self):
        rng = np.random.default_rng(0)
        mus = rng.uniform(0, 3, size=17)
        assert compose(mus) == pytest.approx(math.sqrt(sum(m * m for m in mus)), rel=1e-13)

    def test_accepts_tuples_scalars_and_nested_arrays(self):
        assert compose(np.array([[1.0, 2.0], [2.0, 4.0]])) == pytest.approx(5.0, rel=1e-15, abs=0)
        assert compose((3.0, 4.0)) == pytest.approx(5.0, rel=1e-15, abs=0)
        assert compose(2.5) == pytest.approx(2.5, rel=1e-15, abs=0)

    def test_empty_is_zero(self):
        assert compose([]) == 0.0

    def test_zero_components(self):
        assert compose([0.0, 0.0, 2.0]) == pytest.approx(2.0, rel=1e-15, abs=0)

    def test_inf(self):
        assert compose([1.0, math.inf]) == math.inf
        assert compose([math.inf]) == math.inf

    @pytest.mark.parametrize("bad", [[1.0, -0.5], [math.nan], [1.0, math.nan, math.inf], [-math.inf]])
    def test_bad(self, bad):
        with pytest.raises(ValueError):
            compose(bad)

    def test_associative(self):
        a, b, c = 0.7, 1.3, 2.2
        assert compose([compose([a, b]), c]) == pytest.approx(compose([a, b, c]), rel=1e-14, abs=0)

    def test_returns_python_float(self):
        assert type(compose([1.0, 2.0])) is float


# --------------------------------------------------------------------------- delta_from_mu
class TestDeltaFromMu:
    @pytest.mark.parametrize("mu", MUS)
    @pytest.mark.parametrize("eps", [0.0, 0.1, 0.5, 1.0, 3.0, 8.0])
    def test_matches_corollary_2_13(self, mu, eps):
        ref = delta_ref(mu, eps)
        ref2 = delta_ref_erfc(mu, eps)
        got = delta_from_mu(mu, eps)
        assert 0.0 <= got <= 1.0
        if ref2 > 1e-250:
            # both references agree with each other, and the package agrees with them
            assert ref == pytest.approx(ref2, rel=1e-7, abs=0)
            assert got == pytest.approx(ref2, rel=1e-9, abs=1e-300)
        else:
            assert got <= 1e-240

    def test_eps_zero_closed_form(self):
        # delta(0) = Phi(mu/2) - Phi(-mu/2) = 2 Phi(mu/2) - 1
        for mu in MUS:
            assert delta_from_mu(mu, 0.0) == pytest.approx(math.erf(mu / 2 / math.sqrt(2)), rel=1e-12)

    def test_known_value(self):
        # mu = 1, eps = 1: Phi(-0.5) - e Phi(-1.5)
        expected = 0.5 * math.erfc(0.5 / math.sqrt(2)) - math.e * 0.5 * math.erfc(1.5 / math.sqrt(2))
        assert delta_from_mu(1.0, 1.0) == pytest.approx(expected, rel=1e-12, abs=0)
        assert delta_from_mu(1.0, 1.0) == pytest.approx(0.126936, abs=1e-6)

    def test_mu_inf(self):
        assert delta_from_mu(math.inf, 1.0) == 1.0

    def test_monotone(self):
        eps_grid = np.linspace(0, 10, 41)
        for mu in (0.5, 1.0, 3.0):
            d = [delta_from_mu(mu, e) for e in eps_grid]
            assert all(a > b for a, b in zip(d, d[1:]) if b > 0)  # strictly decreasing in eps
        for eps in (0.0, 1.0, 4.0):
            d = [delta_from_mu(m, eps) for m in MUS]
            assert all(a < b for a, b in zip(d, d[1:]))  # strictly increasing in mu

    @pytest.mark.parametrize("mu,eps", [(0.0, 1.0), (-1.0, 1.0), (math.nan, 1.0), (1.0, -0.1), (1.0, math.nan), (1.0, math.inf)])
    def test_bad_inputs(self, mu, eps):
        with pytest.raises(ValueError):
            delta_from_mu(mu, eps)


# --------------------------------------------------------------------------- epsilon_from_mu
class TestEpsilonFromMu:
    def test_documented_example(self):
        eps = epsilon_from_mu(1.0, 1e-5)
        assert eps == pytest.approx(4.3772, abs=1e-4)
        assert eps == pytest.approx(eps_high_precision(1.0, 1e-5), rel=1e-6, abs=0)

    @pytest.mark.parametrize("mu", MUS)
    @pytest.mark.parametrize("delta", DELTAS)
    def test_inverts_delta(self, mu, delta):
        eps = epsilon_from_mu(mu, delta)
        assert eps >= 0.0
        if delta_ref_erfc(mu, 0.0) <= delta:
            # already (0, delta)-DP
            assert eps == 0.0
            assert delta_from_mu(mu, 0.0) <= delta
            return
        assert eps > 0.0
        # solver consistency with the package's own delta ...
        assert delta_from_mu(mu, eps) == pytest.approx(delta, rel=1e-9, abs=0)
        # ... and with an independent implementation of Corollary 2.13
        assert delta_ref_erfc(mu, eps) == pytest.approx(delta, rel=1e-8, abs=0)
        assert eps == pytest.approx(eps_high_precision(mu, delta), rel=1e-9, abs=0)

    @pytest.mark.parametrize("mu", MUS)
    def test_smallest_epsilon(self, mu):
        # a slightly smaller epsilon must violate the delta
        delta = 1e-6
        eps = epsilon_from_mu(mu, delta)
        assert delta_ref_erfc(mu, eps * (1 - 1e-6)) > delta

    def test_zero_when_delta_large(self):
        # delta(0) = erf(mu / (2 sqrt 2)) ~ 0.0399 for mu = 0.1
        assert epsilon_from_mu(0.1, 0.5) == 0.0
        assert epsilon_from_mu(0.1, 0.03) > 0.0

    def test_mu_inf(self):
        assert epsilon_from_mu(math.inf, 1e-5) == math.inf

    def test_monotone(self):
        e_mu = [epsilon_from_mu(m, 1e-5) for m in MUS]
        assert all(a < b for a, b in zip(e_mu, e_mu[1:]))
        e_delta = [epsilon_from_mu(1.0, d) for d in sorted(DELTAS)]
        assert all(a > b for a, b in zip(e_delta, e_delta[1:]) if b > 0)

    @pytest.mark.parametrize("delta", [0.0, 1.0, -1e-5, 1.5, math.nan, math.inf])
    def test_bad_delta(self, delta):
        with pytest.raises(ValueError):
            epsilon_from_mu(1.0, delta)

    @pytest.mark.parametrize("mu", [0.0, -1.0, math.nan])
    def test_bad_mu(self, mu):
        with pytest.raises(ValueError):
            epsilon_from_mu(mu, 1e-5)


# --------------------------------------------------------------------------- mu_from_epsilon_delta
class TestMuFromEpsilonDelta:
    @pytest.mark.parametrize("mu", MUS)
    @pytest.mark.parametrize("delta", [1e-10, 1e-5, 1e-3])
    def test_round_trip_mu_eps_mu(self, mu, delta):
        eps = epsilon_from_mu(mu, delta)
        assert eps > 0
        assert mu_from_epsilon_delta(eps, delta) == pytest.approx(mu, rel=1e-8, abs=0)

    @pytest.mark.parametrize("eps", [0.1, 0.5, 1.0, 2.0, 5.0, 10.0])
    @pytest.mark.parametrize("delta", [1e-9, 1e-5, 1e-2])
    def test_round_trip_eps_mu_eps(self, eps, delta):
        mu = mu_from_epsilon_delta(eps, delta)
        assert mu > 0
        assert delta_ref_erfc(mu, eps) == pytest.approx(delta, rel=1e-8, abs=0)
        assert epsilon_from_mu(mu, delta) == pytest.approx(eps, rel=1e-8, abs=0)

    def test_largest_mu(self):
        mu = mu_from_epsilon_delta(1.0, 1e-5)
        assert delta_ref_erfc(mu * (1 + 1e-6), 1.0) > 1e-5
        assert delta_ref_erfc(mu * (1 - 1e-6), 1.0) < 1e-5

    def test_eps_zero(self):
        # 2 Phi(mu/2) - 1 = delta  <=>  mu = 2 Phi^{-1}((1 + delta) / 2)
        for delta in (1e-3, 0.1, 0.5, 0.9):
            assert mu_from_epsilon_delta(0.0, delta) == pytest.approx(2 * norm.ppf((1 + delta) / 2), rel=1e-9)

    def test_eps_zero_tiny_delta(self):
        # 2 Phi(mu/2) - 1 = delta; for tiny delta, mu ~ delta * sqrt(2 pi) ~ 2.5066e-14
        expected = 1e-14 * math.sqrt(2 * math.pi)
        assert mu_from_epsilon_delta(0.0, 1e-14) == pytest.approx(expected, rel=1e-6, abs=0)

    def test_monotone(self):
        m_eps = [mu_from_epsilon_delta(e, 1e-5) for e in (0.1, 0.5, 1.0, 2.0, 8.0)]
        assert all(a < b for a, b in zip(m_eps, m_eps[1:]))
        m_delta = [mu_from_epsilon_delta(1.0, d) for d in (1e-9, 1e-6, 1e-3, 0.1)]
        assert all(a < b for a, b in zip(m_delta, m_delta[1:]))

    @pytest.mark.parametrize("eps,delta", [(1.0, 0.0), (1.0, 1.0), (1.0, -0.1), (1.0, 2.0), (1.0, math.nan),
                                           (-1.0, 1e-5), (math.nan, 1e-5), (math.inf, 1e-5)])
    def test_bad_inputs(self, eps, delta):
        with pytest.raises(ValueError):
            mu_from_epsilon_delta(eps, delta)
