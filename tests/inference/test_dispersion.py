"""The Pearson dispersion a count model's inference releases, and the warning when the counts are overdispersed."""

import math
import warnings

import numpy as np
import pytest
import statsmodels.api as sm
from conftest import simulate

from privfedstat import FederatedData, FedIRLS, OverdispersionWarning
from privfedstat.families import get_family
from privfedstat.federation.oracle import make_oracle
from privfedstat.fitting.verdict import SCORE_SHARE
from privfedstat.inference.core import DISPERSION_NOISE, DISPERSION_SHARE, PEARSON_BOUND

BETA = [0.5, 0.4, -0.3]


def _negative_binomial(n: int, sites: int, phi: float, seed: int) -> FederatedData:
    """Counts with mean exp(x^T beta) and variance phi times it (a gamma-Poisson mixture, constant phi)."""
    rng = np.random.default_rng(seed)
    X = np.column_stack([np.ones(n), rng.standard_normal((n, 2))])
    mean = np.exp(X @ np.array(BETA))
    shape = mean / (phi - 1.0)  # gamma(shape, scale = phi - 1): mean `mean`, Poisson variance mean (1 + (phi - 1))
    y = rng.poisson(rng.gamma(shape, phi - 1.0)).astype(float)
    return FederatedData.from_pooled(X, y, sizes=[n // sites] * sites)


def _fit(data, mu, seed=0):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        est = FedIRLS(family="poisson", mu=mu, random_state=seed).fit(data)
    return est, [w for w in caught if w.category is OverdispersionWarning]


def test_without_noise_it_is_statsmodels_pearson_chi2_over_the_residual_df():
    data = _negative_binomial(6000, 6, 3.0, seed=1)
    est, warned = _fit(data, math.inf)
    ref = sm.GLM(data.y, data.X, family=sm.families.Poisson()).fit()
    phi, sd = est.inference_.dispersion
    assert phi == pytest.approx(ref.pearson_chi2 / ref.df_resid, rel=1e-8) and sd == 0.0
    assert 2.5 < phi < 3.5 and len(warned) == 1 and "sandwich" in str(warned[0].message)
    assert "Pearson dispersion" in est.summary().header
    assert any("Pearson dispersion" in n for n in est.inference_.notes)


def test_poisson_counts_do_not_warn_with_or_without_noise():
    data = simulate("poisson", [2000] * 10, BETA, seed=4)
    for mu, seed in [(math.inf, 0), (4.0, 0), (4.0, 1), (2.0, 2)]:
        est, warned = _fit(data, mu, seed)
        phi, sd = est.inference_.dispersion
        assert not warned and abs(phi - 1.0) < 0.1 + 4 * sd


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_private_release_is_capped_accounted_and_finds_overdispersion(seed):
    data = _negative_binomial(20000, 10, 3.0, seed=seed)
    est, warned = _fit(data, 4.0, seed)
    phi, sd = est.inference_.dispersion
    assert len(warned) == 1 and 1.5 < phi < 3.2  # the cap lowers it; never above the uncapped value, up to noise
    (release,) = [r for r in est.privacy_.releases if r.stage == "inference-dispersion"]
    cap = float(np.max(release.sensitivity))
    assert cap >= PEARSON_BOUND and np.all(release.sensitivity == cap)
    # the cap is the largest whose noise sd on phi is DISPERSION_NOISE: sqrt(m) cap / (mu_d (N - p))
    mu_d = float(np.max(release.sensitivity / release.sigma))  # a Gaussian mechanism's mu
    df = data.n_samples - 3
    assert sd == pytest.approx(math.sqrt(10) * cap / mu_d / df, rel=1e-12)
    assert cap == pytest.approx(max(PEARSON_BOUND, DISPERSION_NOISE * mu_d * df / math.sqrt(10)), rel=1e-12)
    total = math.sqrt(sum(float(np.max(r.sensitivity / r.sigma)) ** 2 for r in est.privacy_.releases
                          if r.stage.startswith("inference")))
    # of what the score at the estimate (the convergence verdict) leaves
    assert mu_d == pytest.approx(math.sqrt(DISPERSION_SHARE * (1 - SCORE_SHARE)) * total, rel=0.05)


def test_each_clients_sum_moves_by_at_most_the_cap_for_any_finite_row():
    rng = np.random.default_rng(0)
    X = np.column_stack([np.ones(40), rng.standard_normal((40, 2))])
    y = rng.poisson(2.0, 40).astype(float)
    extreme = y.copy()
    extreme[[0, 25]] = 1e300  # one row of each client replaced by a huge count
    X2 = X.copy()
    X2[[0, 25], 1] = -1e3  # with a linear predictor whose mean underflows to 0 (zero curvature)
    theta = np.array([0.1, 0.5, -0.2])
    family = get_family("poisson")
    for cap in (PEARSON_BOUND, 1e6):
        base = make_oracle(FederatedData.from_pooled(X, y, sizes=[20, 20]), family).pearson_sums(theta, cap)
        for Xn, yn in ((X, extreme), (X2, y), (X2, extreme)):
            other = make_oracle(FederatedData.from_pooled(Xn, yn, sizes=[20, 20]), family).pearson_sums(theta, cap)
            assert np.all(np.isfinite(other)) and np.all(np.abs(other - base) <= cap)


def test_families_that_cannot_be_overdispersed_release_none():
    data = simulate("logistic", [500] * 4, BETA, seed=2)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        est = FedIRLS(mu=4.0, random_state=0).fit(data)
    assert est.inference_.dispersion is None
    assert not [r for r in est.privacy_.releases if r.stage == "inference-dispersion"]


def test_a_fit_short_of_the_optimum_does_not_blame_the_counts():
    """Short of the optimum the residuals carry the distance left (here a dispersion of about 4 on counts of 3), and
    the fit reports no interval: it warns that it did not converge, not that the counts are overdispersed."""
    data = _negative_binomial(20000, 10, 3.0, seed=0)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        est = FedIRLS(family="poisson", mu=4.0, max_step=0.05, random_state=0).fit(data)
    assert est.converged_ is False and est.inference_.dispersion[0] > 3.5
    assert not [w for w in caught if w.category is OverdispersionWarning]


def test_a_private_dispersion_is_reported_as_a_lower_bound_with_the_remedy_glm_takes():
    """Each row's squared Pearson residual is capped, so the released dispersion sits below the uncapped one
    (Ecdat OFP, 4 regions, mu = 8: 5.3 +- 0.1 against 6.85 at the MLE): the warning, the note and the summary say
    "at least", the remedy is a value of the ``inference`` parameter, and the note's degrees of freedom are written
    out (not 2.33e+03)."""
    data = _negative_binomial(8000, 4, 8.0, seed=3)
    est, warned = _fit(data, 8.0, 0)
    ref = sm.GLM(data.y, data.X, family=sm.families.Poisson()).fit()
    phi, sd = est.inference_.dispersion
    assert phi + 3 * sd < ref.pearson_chi2 / ref.df_resid  # the cap bites: the private value is a lower bound
    assert len(warned) == 1 and "at least" in str(warned[0].message)
    assert "inference='sandwich'" in str(warned[0].message) and "cov_type" not in str(warned[0].message)
    assert "lower bound" in est.summary().header["Pearson dispersion"]
    assert any("Pearson dispersion at least" in n for n in est.inference_.notes)
    df_note = next(n for n in est.inference_.notes if "Student's t" in n)
    assert np.min(est.inference_.df) > 1000 and "e+" not in df_note
