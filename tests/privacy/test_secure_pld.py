"""Exact accounting of one-coordinate secure releases: the Skellam pair's PLD against independent references."""

import math

import numpy as np
import pytest
from scipy import optimize, stats
from scipy.special import logsumexp

from privfedstat.privacy.gdp import epsilon_from_mu
from privfedstat.privacy.ledger import PrivacyLedger, Release
from privfedstat.privacy.secure_noise import IntegerNoise, skellam_spec
from privfedstat.privacy.secure_pld import skellam_delta, skellam_pld


def _poisson_convolution_log_pmf(lam: float, x: np.ndarray) -> np.ndarray:
    """Independent pmf: log P(Sk = x) = log sum_j P(Pois = j + |x|) P(Pois = j), from scipy's Poisson pmf."""
    j = np.arange(0, int(lam + 40 * math.sqrt(lam) + 40))
    lp = stats.poisson.logpmf(j, lam)
    return np.array([logsumexp(lp[a:] + lp[:j.size - a]) if a < j.size else -np.inf for a in np.abs(x)])


def _reference_pld(lam: float, shift: int, vdi: float):
    """dp-accounting's numerical PLD (privacy buckets, pessimistic: epsilon above by at most ``vdi``) of the
    Poisson-convolution pmf against its shift, where both pmfs are above 1e-40 (under 1000 points: a sparse PLD)."""
    from dp_accounting.pld.privacy_loss_distribution import from_two_probability_mass_functions

    reach = int(40 * math.sqrt(2 * lam)) + shift
    x = np.arange(-reach, reach + shift + 1)
    log_p = _poisson_convolution_log_pmf(lam, x)
    log_q = _poisson_convolution_log_pmf(lam, x - shift)
    keep = (log_p > -92.0) & (log_q > -92.0)
    return from_two_probability_mass_functions(dict(zip(x[keep].tolist(), log_q[keep].tolist())),
                                               dict(zip(x[keep].tolist(), log_p[keep].tolist())),
                                               value_discretization_interval=vdi)


@pytest.mark.parametrize("lam, shift", [(0.5, 1), (3.0, 2), (50.0, 7), (300.0, 30)])
@pytest.mark.parametrize("delta", [1e-3, 1e-5, 1e-8])
def test_one_coordinate_pld_matches_an_independent_numerical_pld_to_1e_6(lam, shift, delta):
    ours = skellam_pld(lam, [shift]).get_epsilon_for_delta(delta)
    ref = _reference_pld(lam, shift, 1e-8).get_epsilon_for_delta(delta)
    assert ref - 1e-8 <= ours + 1e-12  # the reference is above the exact epsilon by at most its interval
    assert ours == pytest.approx(ref, abs=1e-6)
    # below the GDP bound by about 1 / Lambda relative (more at small Lambda): what the exact accounting gains
    noise = IntegerNoise(1.0, lam, float(shift), float(shift), 1, 1)
    assert ours < epsilon_from_mu(noise.gdp_mu, delta)


@pytest.mark.parametrize("lam, shift", [(4.0, 3), (300.0, 20)])
def test_profile_is_the_hockey_stick_sum_and_the_pld_never_below_it(lam, shift):
    eps = np.linspace(-1.0, 4.0, 41)
    reach = int(40 * math.sqrt(2 * lam)) + shift
    x = np.arange(-reach, reach + shift + 1)
    p, q = stats.skellam.pmf(x, lam, lam), stats.skellam.pmf(x - shift, lam, lam)
    direct = np.array([np.sum(np.maximum(q - math.exp(e) * p, 0.0)) for e in eps])
    np.testing.assert_allclose(skellam_delta(lam, shift, eps), direct, rtol=1e-9, atol=1e-15)
    pld = skellam_pld(lam, [shift], value_discretization_interval=1e-3)  # a coarse grid: the interpolation shows
    ours = np.array([pld.get_delta_for_epsilon(e) for e in eps])
    assert np.all(ours >= direct * (1 - 1e-9))  # pessimistic at every epsilon, on or between its grid points
    assert np.all(ours - direct < 1e-3)


def test_exact_shift_is_the_most_a_rounded_coordinate_moves():
    spec = skellam_spec(0.3, 5.0, 1, 0.5, 4, 3)
    noise = spec.noise(3)
    assert noise.dim == 1 and noise.exact_shift == math.floor(noise.l2) >= math.ceil(0.3 / spec.quantum)
    assert skellam_spec(0.3, 5.0, 4, 0.5, 4, 3).noise(3).exact_shift is None  # d > 1: no exact worst shift known
    # the worst shift is the largest: the pair's epsilon increases with it (monotone likelihood ratio)
    eps = [skellam_pld(50.0, [k]).get_epsilon_for_delta(1e-5) for k in (5, 6, 7)]
    assert eps[0] < eps[1] < eps[2]


def _mixed_reference_epsilon(lam: float, shift: int, mu: float, delta: float) -> float:
    """Independent reference for one Skellam pair composed with a mu-GDP mechanism: delta(eps) = sum_x q(x)
    delta_G(eps - L(x)), L the pair's privacy loss at x (Q = Sk + shift), delta_G the Gaussian's closed-form profile."""
    reach = int(40 * math.sqrt(2 * lam)) + shift
    x = np.arange(-reach, reach + shift + 1)
    log_p = _poisson_convolution_log_pmf(lam, x)
    log_q = _poisson_convolution_log_pmf(lam, x - shift)
    keep = np.isfinite(log_p) & np.isfinite(log_q)
    q, loss = np.exp(log_q[keep]), log_q[keep] - log_p[keep]

    def excess(eps):
        e = eps - loss
        gauss = stats.norm.cdf(-e / mu + mu / 2) - np.exp(e) * stats.norm.cdf(-e / mu - mu / 2)
        return float(np.sum(q * gauss)) - delta

    return optimize.brentq(excess, 0.0, 30.0, xtol=1e-12)


def _ledger(noise: IntegerNoise, sigma: float, gaussian_mu: float) -> PrivacyLedger:
    ledger = PrivacyLedger(3)
    sens = np.full(3, noise.l2 * noise.quantum)
    ledger.record(Release("gradient", 0, "aggregated", sens, np.full(3, sigma), np.ones(3), integer=noise))
    ledger.record(Release("hessian", 0, "aggregated", np.array([gaussian_mu, 0.5 * gaussian_mu, 0.0]), np.ones(3),
                          np.ones(3)))
    return ledger


@pytest.mark.parametrize("lam, shift, gaussian_mu", [(50.0, 7, 0.6), (800.0, 30, 0.3)])
def test_ledger_composes_a_one_coordinate_secure_release_exactly(lam, shift, gaussian_mu):
    noise = IntegerNoise(1.0, lam, float(shift), float(shift), 3, 1)
    ledger = _ledger(noise, math.sqrt(2 * lam), gaussian_mu)
    ref = _mixed_reference_epsilon(lam, shift, gaussian_mu, 1e-5)
    assert ledger.epsilon(1e-5) == pytest.approx(ref, abs=1e-6)
    assert ledger.epsilon(1e-5) < epsilon_from_mu(ledger.mu, 1e-5)  # mu (GDP) is an upper bound
    assert ledger.delta(ledger.epsilon(1e-5)) == pytest.approx(1e-5, rel=1e-6)


def test_ledger_keeps_the_gdp_conversion_for_multi_coordinate_secure_releases():
    noise = IntegerNoise(1.0, 50.0, 7.0, 12.0, 3, 4)
    ledger = _ledger(noise, 10.0, 0.6)
    assert ledger.epsilon(1e-5) == epsilon_from_mu(ledger.mu, 1e-5)
