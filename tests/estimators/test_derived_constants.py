"""Constants derived from the noise model, each checked against an independent computation (a simulation of the
null distribution it controls, or scipy's normal quantiles); derivations in docs/guide/constants.md (issue 42, item 5)."""

import numpy as np
import pytest
from scipy.stats import norm

from privfedstat import FedIRLS
from privfedstat.algorithms.fedirls.rounds import _noise
from privfedstat.algorithms.fedirls.schedule import CURVATURE_RULES
from privfedstat.algorithms.fedirls.secant import secant_scale
from privfedstat.families import get_family
from privfedstat.federation.protocol import Run, Setup
from privfedstat.fitting.diagnostics import last_period, oscillation, oscillation_noise_sds
from privfedstat.inference.config import DIAGNOSTIC_ALPHA, critical_value
from privfedstat.inference.core import DISPERSION_SDS


def _plan():
    return FedIRLS(family="poisson").plan_schedule(get_family("poisson"), np.array([100.0, 200.0]),
                                                   Setup(1.0, 1.0, 2.0), 2)


def test_critical_values_are_the_normal_quantiles_of_the_diagnostic_level():
    assert _plan().secant_noise_sds == pytest.approx(norm.isf(DIAGNOSTIC_ALPHA), rel=1e-12)  # one-sided, one normal
    assert DISPERSION_SDS == pytest.approx(norm.isf(DIAGNOSTIC_ALPHA), rel=1e-12)
    for p in (1, 7, 20, 100):  # two-sided per coordinate, Bonferroni over p
        assert oscillation_noise_sds(p) == pytest.approx(norm.isf(DIAGNOSTIC_ALPHA / (2 * p)), rel=1e-12)
    for tests, sides, alpha in ((1, 1, 0.05), (3, 2, 0.01), (40, 2, 1e-4)):
        assert critical_value(tests, sides, alpha) == pytest.approx(norm.isf(alpha / (sides * tests)), rel=1e-9)
    assert oscillation_noise_sds(1) == pytest.approx(3.29, abs=0.01)
    assert oscillation_noise_sds(20) == pytest.approx(4.06, abs=0.01)  # the factor 4 it replaced, at p = 20


def test_quadratic_forms_of_unit_trace_have_no_heavier_tail_than_one_chi_square():
    """The bound behind :func:`oscillation_noise_sds` (Szekely & Bakirov 2003, for thresholds above 1.54): random
    weights of two chi2_1 summing to 1, simulated; the tail at the critical value stays below chi2_1's."""
    rng = np.random.default_rng(0)
    x = rng.standard_normal((400_000, 2)) ** 2
    for alpha in (0.05, 0.01):
        t = norm.isf(alpha / 2) ** 2
        for lam in (0.5, 0.7, 0.9, 1.0):
            tail = float(np.mean(lam * x[:, 0] + (1 - lam) * x[:, 1] > t))
            assert tail <= alpha + 3 * np.sqrt(alpha / x.shape[0])


@pytest.mark.parametrize("rules,p", [("bounded", 1), ("unbounded", 1), ("bounded", 4)])
def test_the_last_period_of_a_converged_refine_path_exceeds_the_critical_size_at_most_alpha(rules, p):
    """Converged FedIRLS refine rounds: each round's estimate is the root plus its own gradient noise through the
    Newton matrix (sds from the schedule's refine shares, coordinates unequally noisy); the package's
    :func:`last_period` against ``oscillation_noise_sds(p, alpha)`` flags at most alpha of them (at alpha = 0.05,
    where a simulation resolves it), and with one coordinate not far less (the bound is tight to a factor of 1.5)."""
    alpha = 0.05
    shares = CURVATURE_RULES[rules].refine_split[:, 0]
    sd = 0.05 / np.sqrt(shares)  # per-round gradient noise sd: larger shares, less noise
    scale = np.linspace(1.0, 0.4, p)  # the coordinates' sds through the Newton matrix (the rule uses the largest)
    _, last, each = _noise(1.0, np.diag(1.0 / scale), sd)
    rng = np.random.default_rng(p)
    n, flagged = 6000, 0
    crit = oscillation_noise_sds(p, alpha)
    start = rng.standard_normal(p)  # the located point, far away: the first update travels
    for _ in range(n):
        path = [start] + [rng.standard_normal(p) * s * scale for s in sd]
        size, noise = last_period(path, Run(path[-1], path, len(sd), update_noise_sd=last, update_noise_sds=each), last)
        flagged += size > crit * noise
    rate, mc = flagged / n, np.sqrt(alpha / n)
    assert rate <= alpha + 3 * mc
    assert p > 1 or rate >= alpha / 2


def test_the_secant_raises_a_correct_newton_matrix_at_the_diagnostic_level():
    """With the Newton matrix equal to the curvature, the measured slope exceeds it only by its noise: the secant
    raises the matrix (c > 1) in DIAGNOSTIC_ALPHA of the rounds (one-sided normal tail at secant_noise_sds)."""
    plan, A = _plan(), np.array([[2.0, 0.5], [0.5, 1.0]])
    s, var = np.array([0.4, -1.0]), 0.3
    rng = np.random.default_rng(1)
    n = 40_000
    noise = rng.standard_normal((n, 2)) * np.sqrt(var)
    raised = sum(secant_scale(s, A @ s + e, var, A, plan.secant_noise_sds) > 1.0 for e in noise)
    expected = DIAGNOSTIC_ALPHA * n  # 40
    assert abs(raised - expected) <= 4 * np.sqrt(expected)


def test_the_lag_one_correlation_names_the_cause_but_cannot_bound_false_alarms():
    """Facts docs/guide/constants.md rests OSCILLATION_CORRELATION on: a steady 2-cycle of k updates gives
    -(k - 1) / k; a converged Newton path (the root plus independent noise each round) has updates whose lag-1
    correlation is -1/2 on average, and below -0.6 in a share of paths far above any diagnostic level."""
    for k in (3, 4, 8):
        cycle = [np.array([1.0, -2.0]) * (-1) ** r for r in range(k + 1)]
        assert oscillation(cycle, k)[0] == pytest.approx(-(k - 1) / k)
        for q in (-1.5, -0.7, 0.5):  # a geometric path: updates change by q, r = q (1 - q^(2k-2)) / (1 - q^(2k))
            path = np.cumsum([np.zeros(2)] + [np.array([1.0, 0.5]) * q**r for r in range(k)], axis=0)
            assert oscillation(list(path), k)[0] == pytest.approx(q * (1 - q ** (2 * k - 2)) / (1 - q ** (2 * k)))
    # at FedIRLS's window of 3 updates, -0.6 flags cycles with q between -1.43 and -0.70
    r3 = [q * (1 + q**2) / (1 + q**2 + q**4) for q in (-1.45, -1.40, -0.71, -0.69)]
    assert r3[0] > -0.6 > r3[1] and r3[2] < -0.6 < r3[3]
    rng = np.random.default_rng(2)
    long = [oscillation(list(rng.standard_normal((51, 3))), 50)[0] for _ in range(2000)]
    assert np.mean(long) == pytest.approx(-0.5, abs=0.03)
    short = np.array([oscillation(list(rng.standard_normal((4, 1))), 3)[0] for _ in range(4000)])
    assert np.mean(short < -0.6) > 0.10  # 15% of converged 3-update paths: the size test bounds the false alarms
