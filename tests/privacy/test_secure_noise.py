"""Skellam noise shares for secure aggregation: calibration, modular arithmetic and accounting against references."""

import math

import numpy as np
import pytest
from scipy import optimize, stats

from privfedstat.privacy.gdp import epsilon_from_mu
from privfedstat.privacy.secure_noise import (
    SLACK,
    WRAP_PROBABILITY,
    IntegerNoise,
    SkellamSpec,
    decode,
    encode,
    skellam_gdp_mu,
    skellam_gdp_step,
    skellam_spec,
    skellam_steps,
)
from privfedstat.privacy.secure_pld import skellam_pld
from privfedstat.privacy.secure_rdp import RDP_ORDERS, gaussian_rdp, rdp_epsilon, skellam_rdp


def _hockey_stick_epsilon(lam: float, shift: int, delta: float) -> float:
    """Independent reference: epsilon at delta of Sk(lam) against Sk(lam) + shift, summed over scipy's Skellam pmf."""
    reach = int(40 * math.sqrt(2 * lam)) + shift
    x = np.arange(-reach, reach + 1)
    p = stats.skellam.pmf(x, lam, lam)
    q = stats.skellam.pmf(x - shift, lam, lam)

    def excess(eps):
        return float(np.sum(np.maximum(p - math.exp(eps) * q, 0.0))) - delta

    return optimize.brentq(excess, 0.0, 50.0, xtol=1e-12)


@pytest.mark.parametrize("lam, shift", [(50.0, 1), (800.0, 3), (2000.0, 5)])
def test_skellam_pld_matches_an_independent_hockey_stick_to_1e_6(lam, shift):
    pld = skellam_pld(lam, [shift])
    assert pld.get_epsilon_for_delta(1e-5) == pytest.approx(_hockey_stick_epsilon(lam, shift, 1e-5), abs=1e-6)


def test_pld_of_a_shift_pattern_composes_its_coordinates():
    lam = 400.0
    one = skellam_pld(lam, [2], value_discretization_interval=1e-6).compose(
        skellam_pld(lam, [1], value_discretization_interval=1e-6))
    both = skellam_pld(lam, [2, 0, 1], value_discretization_interval=1e-6)
    assert both.get_epsilon_for_delta(1e-5) == pytest.approx(one.get_epsilon_for_delta(1e-5), abs=1e-9)


@pytest.mark.parametrize("shifts", [[6], [1] * 36, [3, 3, 3, 3], [4, 2, 2, 1, 1, 1, 1]])
def test_rdp_bound_holds_against_the_exact_pld_of_every_shift_pattern(shifts):
    """The ledger's bound (Agarwal et al. 2021, at the pattern's L2 / L1 norms) is never below the exact epsilon."""
    lam = 300.0
    l2 = math.sqrt(sum(s * s for s in shifts))
    noise = IntegerNoise(1.0, lam, l2, float(sum(shifts)), 1)
    bound = rdp_epsilon(skellam_rdp(RDP_ORDERS, noise), 1e-5)
    exact = skellam_pld(lam, shifts, value_discretization_interval=1e-5).get_epsilon_for_delta(1e-5)
    assert exact <= bound
    # and the exact Skellam is at most the Gaussian of the same variance here (no worse than GDP at Delta / sd)
    assert exact <= epsilon_from_mu(l2 / math.sqrt(2 * lam), 1e-5) + 1e-3


def _gaussianised_steps(lam: float) -> np.ndarray:
    """Independent reference: the steps F(x) - F(x - 1), x >= 1, of the Gaussianised tail F(x) = Phi^-1(1 - P(Sk >= x))
    (F(0) = -F(1) by symmetry; the steps at x <= 0 mirror those at 2 - x), with the Skellam pmf summed from Poisson
    pmfs (P(Sk = x) = sum_j P(Pois = j + x) P(Pois = j)), wherever P(Sk >= x) > 1e-300. The tradeoff curve of Sk
    against Sk + k lies above G_{k D} exactly when every k-step rise of F is at most k D (threshold tests, log-concave
    pmf)."""
    from scipy.special import logsumexp, ndtri_exp

    reach = int(lam + 40 * math.sqrt(lam) + 40)  # the Poisson's mass beyond is below 1e-300
    j = np.arange(0, 2 * reach)
    lp_j = stats.poisson.logpmf(j, lam)
    x = np.arange(0, reach)
    log_pmf = np.array([logsumexp(lp_j[k:] + lp_j[:j.size - k]) for k in x])
    log_tail = np.logaddexp.accumulate(log_pmf[::-1])[::-1][1:]  # log P(Sk >= x), x = 1, 2, ...
    F = -ndtri_exp(log_tail[log_tail > -690.0])
    return np.diff(np.concatenate([[-F[0]], F]))


@pytest.mark.parametrize("lam", [0.005, 0.5, 3.0, 40.0, 2e3])
def test_gdp_mu_is_the_steepest_step_of_the_gaussianised_skellam(lam):
    steps = _gaussianised_steps(lam)
    D = skellam_gdp_mu(lam)
    assert steps[0] == pytest.approx(D, rel=1e-8)  # the reference's own summation error
    assert steps.max() <= D * (1 + 1e-8)
    assert skellam_gdp_step(lam) == pytest.approx(steps.max(), rel=1e-8)
    assert steps.size > 37 * math.sqrt(2 * lam)  # the check reaches beyond 37 sds
    if lam >= 3:  # above the Gaussian of the same variance by about 1 / (12 Lambda)
        assert D * math.sqrt(2 * lam) - 1 == pytest.approx(1 / (12 * lam), rel=0.1 if lam >= 40 else 1.0)


@pytest.mark.parametrize("lam, shifts", [(300.0, [6]), (300.0, [3, 3, 3, 3]), (300.0, [4, 2, 2, 1, 1, 1, 1]),
                                         (5e4, [150])])
def test_gdp_bound_holds_against_the_exact_pld_and_is_tight_in_one_dimension(lam, shifts):
    l2 = math.sqrt(sum(s * s for s in shifts))
    noise = IntegerNoise(1.0, lam, l2, float(sum(shifts)), 1)
    bound = epsilon_from_mu(noise.gdp_mu, 1e-5)
    exact = skellam_pld(lam, shifts, value_discretization_interval=1e-5).get_epsilon_for_delta(1e-5)
    assert exact <= bound
    if len(shifts) == 1:  # a single coordinate: the pair's own curve up to its lighter tails (about 1 / Lambda)
        assert bound - exact < 2.0 / lam * bound
    assert bound < rdp_epsilon(skellam_rdp(RDP_ORDERS, noise), 1e-5) / 1.05


def _recurrence_steps(lam: float) -> np.ndarray:
    """Independent reference for large Lambda: the steps F(x) - F(x - 1), x >= 1, wherever P(Sk >= x) > 1e-290, with the
    pmf from P(Sk = 0) and the Bessel ratios I_k / I_(k-1) of the backward recurrence I_(k-1) / I_k = 2k / z + I_(k+1) /
    I_k (Miller's algorithm: the ratios are its minimal solution), in log space (no underflow: no missing tail)."""
    from scipy.special import ive, ndtri_exp

    z = 2.0 * lam
    top = int(45 * math.sqrt(z)) + 200
    log_ratio, r = np.empty(top), 0.0
    for k in range(top, 0, -1):
        r = 1.0 / (2.0 * k / z + r)
        log_ratio[k - 1] = math.log(r)
    p0 = float(ive(0, z)) if z < 1e4 else (1 + 1 / (8 * z) + 9 / (128 * z * z)) / math.sqrt(2 * math.pi * z)
    log_pmf = math.log(p0) + np.concatenate([[0.0], np.cumsum(log_ratio)])
    log_tail = np.logaddexp.accumulate(log_pmf[::-1])[::-1][1:]
    F = -ndtri_exp(log_tail[log_tail > math.log(1e-290)])
    return np.diff(np.concatenate([[-F[0]], F]))


@pytest.mark.parametrize("lam", [40.0, 3e4, 2e6, 1e8])
def test_gdp_step_is_the_largest_step_of_an_independent_gaussianised_tail(lam):
    reference = _recurrence_steps(lam)
    D = skellam_gdp_step(lam)
    assert D == pytest.approx(reference.max(), rel=1e-9)
    assert reference.argmax() == 0 and D >= skellam_gdp_mu(lam)  # the central step is the steepest here
    assert skellam_steps(lam).size >= 36.4 * math.sqrt(2 * lam)  # every step out to 36.4 sds is checked
    # the checked steps bound the reference's from above (up to float summation), out to the end of the check
    steps = skellam_steps(lam)
    assert np.all(steps >= reference[:steps.size] * (1 - 1e-9))


def test_calibration_puts_the_sums_gdp_mu_at_the_budget_never_above():
    for lam in (5e3, 1e9, 1e13):  # the closed-form central step, beyond scipy's ive (nan from 2 Lambda = 2e9)
        assert skellam_gdp_mu(lam) * math.sqrt(2 * lam) - 1 == pytest.approx(1 / (12 * lam), rel=1e-3, abs=1e-15)
    for mu in (0.05, 0.7, 3.0, 40.0):
        spec = skellam_spec(2e-3, 0.25, 5, mu, 8, 6)
        assert mu * (1 - 1e-12) <= spec.noise(6).gdp_mu <= mu
    with pytest.raises(ValueError, match=r"fewer rounds \(n_rounds, n_iter\) or aggregation='local' give the round"):
        skellam_spec(2e-3, 0.25, 5, 1e-4, 8, 6)  # Lambda about 4e12, or a slack of 1.6 (was: no parameter named)


@pytest.mark.parametrize("mu", [4e-3, 1e-2])
def test_a_budget_needing_lambda_beyond_the_check_gets_a_coarser_quantum(mu):
    d = 78
    fine = SLACK * 2e-3 / math.sqrt(d)
    assert ((2e-3 / fine + math.sqrt(d)) / mu) ** 2 / 2 > 1e8  # the usual quantum would need Lambda above the check
    spec = skellam_spec(2e-3, 0.25, d, mu, 8, 6)
    noise = spec.noise(6)
    assert 0.99 * 1e8 < noise.lam <= 1e8 and spec.quantum > fine
    assert mu * (1 - 1e-12) <= noise.gdp_mu <= mu
    assert spec.l2 == pytest.approx(2e-3 / spec.quantum + math.sqrt(d))
    assert math.sqrt(d) <= spec.l2 / 5  # the rounding slack costs at most a quarter of the sensitivity
    # every site surviving: more noise than the check reaches, accounted as the checked noise plus more (post-processing)
    assert spec.noise(8).lam > 1e8 and spec.noise(8).gdp_mu == pytest.approx(spec.l2 * skellam_gdp_step(1e8))
    assert spec.noise(8).gdp_mu <= mu


@pytest.fixture
def steep_tail(monkeypatch):
    """Skellam steps with one non-central step 1% above the central one (as if the lemma failed at every Lambda)."""
    import privfedstat.privacy.secure_noise as secure_noise

    def steps(lam):
        out = np.array(skellam_steps(lam))
        out[3] = 1.01 * out[0]
        return out

    skellam_gdp_step.cache_clear()
    monkeypatch.setattr(secure_noise, "skellam_steps", steps)
    yield
    skellam_gdp_step.cache_clear()


def test_a_steeper_non_central_step_is_the_gdp_constant_and_the_calibration_adds_noise_for_it(steep_tail):
    assert skellam_gdp_step(5e4) == pytest.approx(1.01 * skellam_gdp_mu(5e4), rel=1e-9)
    spec = skellam_spec(2e-3, 0.25, 5, 0.7, 8, 6)
    noise = spec.noise(6)
    assert noise.gdp_mu == pytest.approx(noise.l2 * 1.01 * skellam_gdp_mu(noise.lam), rel=1e-9)
    assert 0.7 * (1 - 1e-12) <= noise.gdp_mu <= 0.7
    assert noise.gdp_factor == pytest.approx(1.01 * skellam_gdp_mu(noise.lam) * math.sqrt(2 * noise.lam), rel=1e-9)


def test_rdp_bound_is_the_gaussian_curve_up_to_its_skellam_terms():
    spec = skellam_spec(1e-3, 0.5, 10, 0.1, 10, 10)
    noise = spec.noise(10)
    gaussian = gaussian_rdp(RDP_ORDERS, noise.l2 / math.sqrt(2 * noise.lam))
    excess = skellam_rdp(RDP_ORDERS, noise) - gaussian
    assert np.all(excess >= 0) and np.all(excess <= 1e-6 * gaussian)


def test_spec_calibrates_the_sum_of_min_surviving_shares():
    sens, d, mu, m, k = 2e-3, 7, 0.3, 12, 9
    spec = skellam_spec(sens, 0.25, d, mu, m, k)
    assert spec.quantum == pytest.approx(SLACK * sens / math.sqrt(d))
    assert spec.l2 == pytest.approx((1 + SLACK) * sens / spec.quantum)
    assert spec.noise(k).gdp_mu == pytest.approx(mu)
    assert spec.noise(m).gdp_mu < mu  # more survivors: more noise
    assert spec.noise(k).colluding(1).gdp_mu == pytest.approx(mu * math.sqrt(k / (k - 1)))
    assert math.isinf(spec.noise(k).colluding(k).gdp_mu)
    # the modulus holds the messages' bound plus the Bernstein tail of every site's noise
    lam_max = m * spec.lam
    L = math.log(2 * d / WRAP_PROBABILITY)
    assert m * (0.25 / spec.quantum + 1) + L / 3 + math.sqrt(L * L / 9 + 4 * L * lam_max) < 2 ** (spec.bits - 1)


@pytest.mark.parametrize("bad", [dict(mu=math.inf), dict(min_surviving=0), dict(min_surviving=11),
                                 dict(sensitivity=0.0), dict(bound=1e30)])
def test_spec_refuses_what_it_cannot_calibrate(bad):
    args = dict(sensitivity=1e-3, bound=1.0, dim=3, mu=0.5, n_clients=10, min_surviving=10) | bad
    with pytest.raises(ValueError):
        skellam_spec(**args)


def test_encode_decode_is_the_sum_of_stochastically_rounded_messages_plus_skellam():
    rng = np.random.default_rng(0)
    spec = SkellamSpec(quantum=0.01, lam=0.0, bits=20, min_surviving=1, l2=1.0, l1=1.0)
    u = rng.uniform(-3, 3, size=(5, 4))
    rngs = [np.random.default_rng(i) for i in range(5)]
    total = decode(encode(u, spec, rngs), spec)
    # without noise: each coordinate within one quantum per site of the true sum, on the grid
    assert np.all(np.abs(total - u.sum(axis=0)) < 5 * spec.quantum)
    # with noise, over many rounds: unbiased, variance 2 n lam gamma^2 plus at most n / 4 gamma^2 of rounding
    noisy = SkellamSpec(quantum=0.01, lam=30.0, bits=20, min_surviving=1, l2=1.0, l1=1.0)
    gens = [np.random.default_rng(100 + i) for i in range(5)]
    draws = np.array([decode(encode(u, noisy, gens), noisy) for _ in range(4000)])
    err = draws - u.sum(axis=0)
    sd = math.sqrt(2 * 5 * 30.0) * 0.01
    assert np.all(np.abs(err.mean(axis=0)) < 4 * sd / math.sqrt(4000))
    assert np.all(err.var(axis=0) <= noisy.variance(5) * 1.1) and np.all(err.var(axis=0) >= 2 * 5 * 30 * 1e-4 * 0.9)


def test_decode_recovers_negative_sums_across_the_modulus():
    spec = SkellamSpec(quantum=1.0, lam=0.0, bits=8, min_surviving=1, l2=1.0, l1=1.0)
    u = np.array([[-100.0, 60.0], [-27.0, 67.0]])  # sums -127 and 127: the edges of the signed range
    out = decode(encode(u, spec, [np.random.default_rng(0), np.random.default_rng(1)]), spec)
    np.testing.assert_array_equal(out, [-127.0, 127.0])


def test_stochastic_rounding_coupling_keeps_the_integer_sensitivity():
    """Neighbouring messages rounded with the same uniforms differ by at most Delta / gamma + sqrt(d) in L2."""
    rng = np.random.default_rng(3)
    d, gamma, delta = 9, 0.05, 1.0
    spec = SkellamSpec(quantum=gamma, lam=0.0, bits=30, min_surviving=1, l2=1.0, l1=1.0)
    for trial in range(200):
        x = rng.uniform(-5, 5, size=(1, d))
        step = rng.normal(size=d)
        x2 = x + delta * rng.uniform() * step / np.linalg.norm(step)
        a = decode(encode(x, spec, [np.random.default_rng(trial)]), spec) / gamma
        b = decode(encode(x2, spec, [np.random.default_rng(trial)]), spec) / gamma
        v = a - b
        assert np.linalg.norm(v) <= delta / gamma + math.sqrt(d) + 1e-9
        assert np.abs(v).sum() <= math.sqrt(d) * delta / gamma + d + 1e-9
