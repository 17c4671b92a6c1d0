"""The bracket around the exact epsilon of vector secure releases: achievable shift patterns against an independent
exact sum, and the ledger's (lower, upper)."""

import math

import numpy as np
import pytest
from scipy import optimize, stats
from scipy.special import logsumexp

from privfedstat.privacy import secure_noise
from privfedstat.privacy.gdp import epsilon_from_mu
from privfedstat.privacy.ledger import PrivacyLedger, Release
from privfedstat.privacy.secure_noise import IntegerNoise, count_spec, skellam_spec
from privfedstat.privacy.secure_pld import achievable_epsilon, achievable_shifts
from privfedstat.privacy.secure_rounding import BRACKET_GAP, gap_lambda, row_spec


def _losses(lam: float, shift: int) -> tuple[np.ndarray, np.ndarray]:
    """Atoms (probability under Q = Sk + shift, privacy loss log q - log p) of one coordinate, from the pmf summed from
    two Poisson pmfs (scipy), where q is above 1e-20 (the rest, below 1e-18 in all, counted as infinite loss)."""
    j = np.arange(0, int(lam + 40 * math.sqrt(lam) + 40))
    lp = stats.poisson.logpmf(j, lam)
    reach = int(40 * math.sqrt(2 * lam)) + shift
    x = np.arange(-reach, reach + shift + 1)

    def log_pmf(z):
        return np.array([logsumexp(lp[a:] + lp[:j.size - a]) if a < j.size else -np.inf for a in np.abs(z)])

    log_p, log_q = log_pmf(x), log_pmf(x - shift)
    keep = log_q > math.log(1e-20)
    return np.exp(log_q[keep]), log_q[keep] - log_p[keep]


def _exact_epsilon(lam: float, shifts: tuple[int, ...], delta: float) -> float:
    """Independent reference: the composed pair's profile ``delta(eps) = sum q (1 - e^(eps - L))_+`` over every
    combination of the coordinates' atoms (no discretization), solved for ``eps``."""
    prob, loss = np.ones(1), np.zeros(1)
    for k in shifts:
        q, ell = _losses(lam, k)
        prob, loss = np.outer(prob, q).ravel(), np.add.outer(loss, ell).ravel()
    missing = 1.0 - prob.sum()

    def excess(eps):
        return float(np.sum(prob * -np.expm1(np.minimum(eps - loss, 0.0)))) + missing - delta

    return optimize.brentq(excess, 0.0, 30.0, xtol=1e-12)


def test_achievable_patterns_lie_within_the_stated_sensitivity():
    spec = skellam_spec(0.3, 5.0, 7, 1.0, 4, 3)
    noise = spec.noise(3)
    reach = 0.3 / spec.quantum  # Delta / gamma, site messages rounded as a whole (the PSD verbs): in quanta
    assert noise.l2 == pytest.approx(reach + math.sqrt(7))
    assert achievable_shifts(noise, "balanced") == (128,) * 7  # 1 / SLACK quanta per coordinate: the norm is Delta
    for pattern in ("balanced", "single", "max-and-ones"):
        v = np.array(achievable_shifts(noise, pattern), dtype=float)
        assert np.linalg.norm(v) <= reach * (1 + 1e-12)
    assert achievable_shifts(noise, "single") == (math.floor(reach),)
    assert achievable_shifts(noise, "max-and-ones")[1:] == (1,) * 6
    counts = count_spec(1.0, 4, 3, 100).noise(3)  # integer messages: no rounding slack, the worst shift is 1
    assert achievable_shifts(counts) == (1,) == (counts.exact_shift,)
    with pytest.raises(ValueError, match="pattern"):
        achievable_shifts(noise, "spread")


def test_achievable_epsilon_matches_an_independent_exact_sum_to_1e_6():
    # three coordinates, Delta / gamma = 6 sqrt(3): balanced (6, 6, 6), single (10,), max-and-ones (10, 1, 1)
    noise = IntegerNoise(1.0, 30.0, 7 * math.sqrt(3), 30.0, 1, 3)
    patterns = {p: achievable_shifts(noise, p) for p in ("balanced", "single", "max-and-ones")}
    assert patterns == {"balanced": (6, 6, 6), "single": (10,), "max-and-ones": (10, 1, 1)}
    refs = {p: _exact_epsilon(30.0, v, 1e-5) for p, v in patterns.items()}
    for p in patterns:
        assert achievable_epsilon([noise], 1e-5, patterns=[p]) == pytest.approx(refs[p], abs=1e-6)
    both = achievable_epsilon([noise, noise], 1e-5, patterns=["single"])  # two releases compose
    assert both == pytest.approx(_exact_epsilon(30.0, (10, 10), 1e-5), abs=1e-6)
    # the largest over the patterns (the balanced one here), below the GDP bound of the stated sensitivity, whose
    # Delta_2 counts the rounding slack sqrt(d)
    assert achievable_epsilon([noise], 1e-5) == pytest.approx(refs["balanced"], abs=1e-6)
    assert refs["balanced"] == max(refs.values()) < epsilon_from_mu(noise.gdp_mu, 1e-5)


def _ledger(*noises: IntegerNoise) -> PrivacyLedger:
    ledger = PrivacyLedger(3)
    for i, n in enumerate(noises):
        sd = n.quantum * math.sqrt(2 * n.lam)
        ledger.record(Release(f"r{i}", i, "aggregated", np.full(3, n.l2 * n.quantum), np.full(3, sd), np.ones(3),
                              integer=n))
    return ledger


def test_the_ledger_brackets_its_epsilon_tight_for_counts_and_by_the_rounding_slack_for_vectors():
    counts = count_spec(0.5, 4, 3, 100).noise(3)
    lower, upper = _ledger(counts, counts).epsilon_bracket(1e-5)
    assert upper == _ledger(counts, counts).epsilon(1e-5)
    assert abs(upper - lower) < 1e-6  # a count's worst shift (1) is achievable: its accounting is exact
    vector = skellam_spec(0.3, 5.0, 7, 0.5, 4, 3).noise(3)
    lower, upper = _ledger(vector).epsilon_bracket(1e-5)
    assert upper == epsilon_from_mu(vector.gdp_mu, 1e-5)
    # the GDP bound counts the slack sqrt(d) of the rounding (1/128 of Delta / gamma); data on the grid reach only
    # Delta / gamma: the gap is about the slack's share of mu times d eps / d mu, far above 1e-6
    slack_gap = epsilon_from_mu(vector.gdp_mu, 1e-5) - epsilon_from_mu(vector.gdp_mu * 128 / 129, 1e-5)
    assert upper - lower == pytest.approx(slack_gap, rel=0.05) and upper - lower > 1e-3
    lower_both, upper_both = _ledger(vector, counts).epsilon_bracket(1e-5)
    assert lower < lower_both < upper_both and upper_both == _ledger(vector, counts).epsilon(1e-5)
    assert _ledger().epsilon_bracket() == (0.0, 0.0)
    assert achievable_epsilon([IntegerNoise(1.0, 0.0, 2.0, 2.0, 3, 1)], 1e-5) == math.inf  # no noise: no privacy


def test_the_bracket_of_a_vector_release_of_rows_rounded_into_a_ball_closes_to_1e_6():
    """Rows rounded into the ball of radius k sqrt(d) (no rounding slack): the balanced pattern (2k, ..., 2k) is the
    stated integer sensitivity itself, and at the calibrated Lambda (the smallest that keeps the bracket) the ledger's GDP
    epsilon is within 1e-6 of the exact epsilon of that achievable pattern (site-level rounding: 5e-3 here)."""
    spec = row_spec(0.3, 5.0, 4, 1.0, 4, 3, 4000)
    noise = spec.noise(3)
    k = spec.row_reach
    assert noise.l2 == pytest.approx(2 * k * 2.0, rel=1e-15) and not noise.rounding
    assert achievable_shifts(noise, "balanced") == (2 * k,) * 4
    upper = _ledger(noise).epsilon(1e-5)
    lower = achievable_epsilon([noise], 1e-5, patterns=["balanced"])  # the bracket's lower end (its worst pattern)
    assert upper == epsilon_from_mu(noise.gdp_mu, 1e-5)
    assert 0.0 <= upper - lower <= 1e-6
    assert upper == pytest.approx(epsilon_from_mu(1.0, 1e-5), abs=1e-9)  # the calibrated budget, mu = 1


@pytest.mark.parametrize("mu, d", [(0.15, 2), (0.3, 7), (0.6, 12)])
def test_the_smallest_row_radius_keeps_each_releases_bracket_within_1e_7(mu, d):
    """row_spec takes the smallest k whose Lambda reaches gap_lambda: the GDP epsilon of the release is within
    BRACKET_GAP (1e-7) of the exact epsilon of its attained balanced pattern (dp-accounting at 1e-5), and one k less
    (a smaller Lambda, the gap growing like 1 / Lambda) would not be chosen: its Lambda is below gap_lambda."""
    spec = row_spec(0.3, 5.0, d, mu, 4, 3, 4000)
    noise, k = spec.noise(3), spec.row_reach
    assert noise.lam >= gap_lambda(mu, d) and spec.noise(3).lam < secure_noise.MAX_CHECKED_LAM
    assert 2.0 * (k - 1) ** 2 * d / mu**2 * (1 + 1e-6) < gap_lambda(mu, d)  # k - 1 falls short: k is the smallest
    upper = epsilon_from_mu(noise.gdp_mu, 1e-5)
    lower = achievable_epsilon([noise], 1e-5, value_discretization_interval=1e-5, patterns=["balanced"])
    assert upper == pytest.approx(epsilon_from_mu(mu, 1e-5), abs=1e-9)
    assert -1e-8 <= upper - lower <= BRACKET_GAP
