"""FedIRLS's Newton matrix against the slope the released gradients show: the secant's raise of a too flat matrix
(:func:`~privfedstat.algorithms.fedirls.secant.secant_scale`) and the error the last step's matrix leaves in the
estimate (:func:`~privfedstat.algorithms.fedirls.secant.newton_error`)."""

import numpy as np
import pytest

from privfedstat import FedIRLS
from privfedstat.algorithms.fedirls.secant import newton_error, secant_scale, secant_update
from privfedstat.families import get_family
from privfedstat.federation.protocol import Setup


def test_the_secant_raises_a_too_flat_newton_matrix_by_the_measured_slope():
    """On a quadratic with Hessian A, a matrix A / 3 gives back 3 from noise-free gradients; a slope within the
    gradient noise, or a matrix at least as steep as the slope, gives 1 (the step is never lengthened)."""
    A = np.array([[2.0, 0.5], [0.5, 1.0]])
    s = np.array([0.4, -1.0])
    plan = FedIRLS(family="poisson").plan_schedule(get_family("poisson"), np.array([100.0, 200.0]), Setup(1.0, 1.0, 2.0), 2)
    z = plan.secant_noise_sds
    assert z == pytest.approx(3.0902, abs=1e-4)  # z_(1 - DIAGNOSTIC_ALPHA), one-sided
    assert secant_scale(s, A @ s, 0.0, A / 3, z) == pytest.approx(3.0)
    assert secant_scale(s, A @ s, 0.0, 2 * A, z) == 1.0
    assert secant_scale(s, A @ s, 1.0, A / 3, z) == 1.0  # slope 0.92 against noise sd 1.08 x 3.09
    assert secant_scale(s, A @ s, 0.0, A / 100, z) == pytest.approx(100.0)  # the measured ratio, uncapped
    # a slope between the curvatures at the step's two ends (the previous round's matrix steeper) is no evidence
    assert secant_scale(s, A @ s, 0.0, A / 3, z, behind=2 * A) == 1.0
    assert secant_scale(s, A @ s, 0.0, A / 3, z, behind=A / 2) == pytest.approx(3.0)



def test_the_secant_corrects_the_matrix_along_the_measured_step_alone_where_the_clipped_rows_are_few():
    """J differs from N along one direction only (the clipped rows'): the BFGS correction from ``y = J s`` gives
    ``N' s = y``, keeps ``N' v = N v`` for v orthogonal to N s and y, and stays positive definite; without that knowledge the
    whole matrix is raised by c, and c = 1 keeps N (the step is never lengthened)."""
    rng = np.random.default_rng(0)
    N = np.array([[2.0, 0.3, 0.0], [0.3, 1.0, 0.2], [0.0, 0.2, 1.5]])
    u = np.array([1.0, 0.5, 0.0])
    J = N + 4.0 * np.outer(u, u)  # the score steeper along u alone
    s = rng.normal(size=3)
    y = J @ s
    c = secant_scale(s, y, 0.0, N, 3.09)
    assert c > 1.0
    corrected = secant_update(N, s, y, c, confined=True)
    np.testing.assert_allclose(corrected @ s, y, rtol=1e-12)
    v = np.cross(N @ s, y)  # orthogonal to both
    np.testing.assert_allclose(corrected @ v, N @ v, rtol=1e-10, atol=1e-12)
    assert np.all(np.linalg.eigvalsh(corrected) > 0)
    np.testing.assert_allclose(secant_update(N, s, y, c, confined=False), c * N)
    assert secant_update(N, s, y, 1.0, confined=True) is N

def test_the_noise_a_step_shares_with_the_next_gradient_change_is_its_mean_product():
    """At the root (J = N, every step pure noise) the step s = -N^-1 xi and the gradients' change N s + xi' - xi
    share xi: the raw slope s^T y is twice the model's s^T N s on average (RAND HIE, mu = 2: 1.99 +- 0.29 against
    1.42 from the exact curvature); less ``shared = v tr N^-1`` (what the rounds hand :func:`newton_error`) it is
    the model's, as a noise-free slope gives, and newton_error counts nothing."""
    rng = np.random.default_rng(5)
    p, v, n = 5, 0.3, 40000
    A = rng.normal(size=(p, p))
    N = A @ A.T + np.eye(p)
    xi, xi_next = np.sqrt(v) * rng.standard_normal((2, n, p))
    s = -np.linalg.solve(N, xi.T).T
    y = s @ N + xi_next - xi
    slope, model = np.mean(np.sum(s * y, axis=1)), np.mean(np.sum((s @ N) * s, axis=1))
    shared = v * np.trace(np.linalg.inv(N))
    assert slope / model == pytest.approx(2.0, rel=0.03)
    assert (slope - shared) / model == pytest.approx(1.0, abs=0.03)
    # a change along s0 exceeding the model's by exactly what the two share: no error of N (nearly noise-free v)
    s0, excess = s[0], 0.3
    change = N @ s0 + excess * s0 / (s0 @ s0)
    assert np.all(newton_error(s[1], N, (s0, change, 1e-12, excess), 3.0) == 0.0)
    assert np.any(newton_error(s[1], N, (s0, change, 1e-12, 0.0), 3.0) != 0.0)


def test_the_last_steps_newton_error_is_the_matrix_error_times_the_step():
    """The estimate after a step s_R with the matrix N is off by J^-1 (J - N) s_R. Where N is too flat along the
    step before (J = N + (kappa - 1) N u u^T N / u^T N u, the released gradients' change along s measuring kappa
    without noise) the covariance is exactly that error's outer product; a slope within its noise of N's counts
    nothing (the recursion carries the matrix's noise)."""
    rng = np.random.default_rng(3)
    p = 4
    A = rng.normal(size=(p, p))
    N = A @ A.T + p * np.eye(p)
    s_before, s_last = rng.normal(size=p), rng.normal(size=p)
    u = s_before / np.linalg.norm(s_before)
    J = N + 0.9 * np.outer(N @ u, N @ u) / (u @ N @ u)  # kappa = 1.9 along s_before
    error = np.linalg.solve(J, (J - N) @ s_last)
    cov = newton_error(s_last, N, (s_before, J @ s_before, 0.0, 0.0), 3.0)
    np.testing.assert_allclose(cov, np.outer(error, error), atol=1e-12)
    # the slope 1.9 times N's with noise sd 0.5 of the ratio: not resolved from 1
    v = (0.5 * float(s_before @ N @ s_before) / np.linalg.norm(s_before)) ** 2
    assert np.all(newton_error(s_last, N, (s_before, J @ s_before, v, 0.0), 3.0) == 0.0)
    assert np.all(newton_error(s_last, N, None, 3.0) == 0.0)
