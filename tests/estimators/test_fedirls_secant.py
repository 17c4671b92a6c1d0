"""FedIRLS's Newton matrix against the slope the released gradients show: the secant's raise of a too flat matrix
(:func:`~privfedstat.algorithms.fedirls.rounds.secant_scale`) and the error the last step's matrix leaves in the
estimate (:func:`~privfedstat.algorithms.fedirls.rounds.newton_error`)."""

import numpy as np
import pytest

from privfedstat import FedIRLS
from privfedstat._linalg import vec_to_sym
from privfedstat.algorithms.fedirls.rounds import newton_error, secant_scale
from privfedstat.families import get_family
from privfedstat.federation.protocol import Setup


def test_the_secant_raises_a_too_flat_newton_matrix_by_the_measured_slope():
    """On a quadratic with Hessian A, a matrix A / 3 gives back 3 from noise-free gradients; a slope within the
    gradient noise, or a matrix at least as steep as the slope, gives 1 (the step is never lengthened)."""
    A = np.array([[2.0, 0.5], [0.5, 1.0]])
    s = np.array([0.4, -1.0])
    plan = FedIRLS(family="poisson").plan_schedule(get_family("poisson"), np.array([100.0, 200.0]), Setup(1.0, 1.0, 2.0), 2)
    assert plan.secant_noise_sds == 3.0
    assert secant_scale(s, A @ s, A / 3, 0.0, 3.0) == pytest.approx(3.0)
    assert secant_scale(s, A @ s, 2 * A, 0.0, 3.0) == 1.0
    assert secant_scale(s, A @ s, A / 100, 0.0, 3.0) == pytest.approx(100.0)  # the measured ratio, uncapped
    assert secant_scale(s, A @ s, A / 1.2, 0.01, 3.0) == 1.0  # the slope 1.2 +- 0.42 times N's along s: contracts
    # a slope between the curvatures at the step's two ends (the previous round's matrix steeper) is no evidence
    assert secant_scale(s, A @ s, A / 3, 0.0, 3.0, behind=2 * A) == 1.0
    assert secant_scale(s, A @ s, A / 3, 0.0, 3.0, behind=A / 2) == pytest.approx(3.0)


def test_the_secant_contracts_for_every_slope_its_noise_allows():
    """Measured ratio 1.9 with noise sd 0.3 (RAND HIE, mu = 2: a rare dummy's rows' Hessians clipped at C_H): the true
    ratio kappa lies anywhere in 1.9 +- 3 x 0.3. A step with the matrix c N multiplies the error along the step by
    1 - kappa / c. The lower bound 1.0 (the rule before) left c = 1, whose factor reaches -1.8 (the error grows); the
    midpoint shrinks it for every kappa in the interval (worst 0.47)."""
    N = np.diag([1.0, 2.0])
    s = np.array([1.0, 0.5])
    sd = 0.3 * float(s @ N @ s) / np.linalg.norm(s)  # the gradient change's noise sd giving 0.3 on the ratio
    c = secant_scale(s, 1.9 * N @ s, N, sd**2, 3.0)
    assert c == pytest.approx(1.9)
    kappas = np.linspace(1.0, 2.8, 19)
    assert np.max(np.abs(1.0 - kappas / c)) == pytest.approx(0.9 / 1.9)
    assert np.max(np.abs(1.0 - kappas / 1.0)) > 1.0


def test_the_last_steps_newton_error_is_the_matrix_error_times_the_step():
    """The estimate after a step s_R with the matrix N is off by J^-1 (J - N) s_R. Where N is too flat along the
    step before (J = N + (kappa - 1) N u u^T N / u^T N u, the released gradients' change along s measuring kappa
    without noise) the covariance is exactly that error's outer product; the released matrix's noise Xi adds
    N^-1 E[Xi s_R s_R^T Xi] N^-1, checked against draws of symmetric noise (sd s on the diagonal, s / sqrt(2) off)."""
    rng = np.random.default_rng(3)
    p = 4
    A = rng.normal(size=(p, p))
    N = A @ A.T + p * np.eye(p)
    s_before, s_last = rng.normal(size=p), rng.normal(size=p)
    u = s_before / np.linalg.norm(s_before)
    J = N + 0.9 * np.outer(N @ u, N @ u) / (u @ N @ u)  # kappa = 1.9 along s_before
    error = np.linalg.solve(J, (J - N) @ s_last)
    cov = newton_error(s_last, N, 0.0, (s_before, J @ s_before, 0.0), 3.0)
    np.testing.assert_allclose(cov, np.outer(error, error), atol=1e-12)
    # unresolved slope (its noise 1000 sds): only the Hessian-noise part, here 0
    assert np.all(newton_error(s_last, N, 0.0, (s_before, J @ s_before, 1e6), 3.0) == 0.0)
    var = 0.04
    noise = vec_to_sym(np.sqrt(var) * rng.standard_normal((20000, p * (p + 1) // 2)), p)
    draws = np.linalg.solve(N, (noise @ s_last).T).T
    predicted = newton_error(s_last, N, var, None, 3.0)
    np.testing.assert_allclose(predicted, draws.T @ draws / len(draws), atol=0.04 * np.max(np.abs(predicted)))
