"""problem_constants and hessian_norm_quantile: closed forms, quadrature vs Monte Carlo, definitions."""

import math

import numpy as np
import pytest
from scipy.stats import chi2

from privfedstat.simulations import GLMDesign
from privfedstat.theory import hessian_norm_quantile, problem_constants


def test_logistic_beta_zero_closed_form():
    """p = 1/2 everywhere: H = E[x x^T]/4 = I/4 (intercept, sigma_c = 1) and Sigma = H."""
    for d in (1, 2, 4):
        pc = problem_constants(design=GLMDesign("logistic", beta=(0.0,) * d))
        assert pc.hessian == pytest.approx(np.eye(d) / 4, abs=1e-12)
        assert pc.gradient_cov == pytest.approx(np.eye(d) / 4, abs=1e-12)
        assert pc.tau1 == pytest.approx(0.25) and pc.tau2 == pytest.approx(0.25)
        assert pc.trace_sigma == pytest.approx(d / 4)
        assert pc.sandwich_trace == pytest.approx(4 * d)  # trace(H^-1) = 4 d
    # sigma_c = 2: E[x x^T] = diag(1, 4, 4)
    pc = problem_constants(design=GLMDesign("logistic", beta=(0.0, 0.0, 0.0), sigma_c=2.0))
    assert pc.hessian == pytest.approx(np.diag([1, 4, 4]) / 4, abs=1e-12)
    # the Monte-Carlo method agrees (moment-matched sample: exact for this quadratic case)
    mc = problem_constants(design=GLMDesign("logistic", beta=(0.0, 0.0, 0.0)), method="mc", n_mc=4096)
    assert mc.hessian == pytest.approx(np.eye(3) / 4, abs=1e-10)


def test_gaussian_closed_form():
    pc = problem_constants(design=GLMDesign("gaussian", beta=(1.0, -2.0, 0.5), sigma_c=1.5, noise_sd=0.7))
    assert pc.hessian == pytest.approx(np.diag([1.0, 2.25, 2.25]), abs=1e-12)
    assert pc.gradient_cov == pytest.approx(0.49 * np.diag([1.0, 2.25, 2.25]), abs=1e-12)
    assert pc.sandwich_trace == pytest.approx(0.49 * (1 + 2 / 2.25))


def test_logistic_intercept_only_and_poisson_closed_forms():
    # intercept only: H = Sigma = p (1 - p)
    b0 = 0.8
    p = 1 / (1 + math.exp(-b0))
    pc = problem_constants(family="logistic", beta=[b0])
    assert pc.hessian[0, 0] == pytest.approx(p * (1 - p), rel=1e-12)
    # Poisson with one covariate: E[exp(b0 + b1 s z)] = exp(b0 + b1^2 s^2/2), E[e^{..} z] = b1 s E[..]
    b0, b1, s = 0.3, 0.4, 1.2
    pc = problem_constants(design=GLMDesign("poisson", beta=(b0, b1), sigma_c=s))
    m0 = math.exp(b0 + (b1 * s) ** 2 / 2)
    expected = np.array([[m0, s * b1 * s * m0], [s * b1 * s * m0, s**2 * m0 * (1 + (b1 * s) ** 2)]])
    assert pc.hessian == pytest.approx(expected, rel=1e-10)
    assert pc.gradient_cov == pytest.approx(expected, rel=1e-10)  # canonical link: Sigma = H


@pytest.mark.parametrize("family", ["logistic", "poisson", "gaussian"])
def test_quadrature_agrees_with_monte_carlo(family):
    design = GLMDesign(family)
    q = problem_constants(design=design)
    mc = problem_constants(design=design, method="mc", n_mc=2**16, random_state=3)
    scale = np.abs(q.hessian).max()
    assert np.abs(q.hessian - mc.hessian).max() < 0.02 * scale
    assert np.abs(q.gradient_cov - mc.gradient_cov).max() < 0.02 * np.abs(q.gradient_cov).max()
    assert q.tau1 <= q.tau2
    assert q.hessian_norm_q99 > q.tau2  # per-sample Hessians are much larger than the average


def test_clip_fraction_and_overrides():
    design = GLMDesign("logistic", beta=(0.5, -0.5, 0.5))
    # |ell'| < 1 so the per-sample gradient norm is below ||x||: B = 100 never clips
    assert problem_constants(design=design, clip=100.0).clip_fraction == 0.0
    f1 = problem_constants(design=design, clip=1.0).clip_fraction
    f2 = problem_constants(design=design, clip=0.5).clip_fraction
    assert 0 < f1 < f2 < 1
    # family/beta override the design's
    pc = problem_constants(design=design, beta=(0.0, 0.0, 0.0))
    assert pc.hessian == pytest.approx(np.eye(3) / 4, abs=1e-12)
    with pytest.raises(ValueError, match="canonical"):
        problem_constants(family="huber", beta=[0.0, 1.0])
    with pytest.raises(TypeError, match="beta"):
        problem_constants(family="logistic")
    with pytest.raises(ValueError, match="method"):
        problem_constants(design=design, method="simpson")


def test_hessian_norm_quantile_closed_form():
    """Logistic at theta = 0: ell'' = 1/4 and ||x||^2 = 1 + sigma_c^2 chi2_(d-1), so the q-quantile of
    the per-sample Hessian norm is (1 + sigma_c^2 chi2_(d-1)^-1(q)) / 4."""
    design = GLMDesign("logistic", beta=(0.5, -0.5, 0.5, 1.0), sigma_c=1.5)
    for q in (0.5, 0.9):
        expected = (1 + 1.5**2 * chi2.ppf(q, 3)) / 4
        assert hessian_norm_quantile(design, q, n_mc=2**16) == pytest.approx(expected, rel=0.02)
