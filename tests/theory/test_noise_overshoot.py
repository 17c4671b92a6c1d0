"""FedIRLS's privacy covariance where the released Newton matrix is flatter than the score's Jacobian J: the last
step overshoots and keeps part of the earlier error with its sign flipped. The model keeps that overshoot, with the
noise of the inference's own release of J (``hessian_sd``) taken out (docs/guide/inference.md, "What the privacy
covariance covers")."""

import math

import numpy as np

from privfedstat._linalg import vec_to_sym
from privfedstat.theory import protocol_noise_covariance
from privfedstat.theory.noise import IRLSNoise
from privfedstat.theory.noise_maps import newton_map

P, G_VAR, H_VAR = 3, np.array([0.4, 0.02]), np.array([0.004, 0.004])
N = np.diag([1.0, 1.0, 0.75])  # flatter than J = I along the third axis: the last step overshoots by a third there


def _symmetric_noise(rng, count, sd):
    return vec_to_sym(sd * rng.standard_normal((count, P * (P + 1) // 2)), P)


def _two_rounds(rng, reps=40000):
    """e_r = e_{r-1} - (N + Xi)^-1 (J e_{r-1} + xi_r), J = I, one released Newton matrix for both rounds."""
    Xi = _symmetric_noise(rng, reps, math.sqrt(H_VAR[0]))
    e = np.zeros((reps, P))
    for r in range(2):
        xi = math.sqrt(G_VAR[r]) * rng.standard_normal((reps, P))
        e = e - np.linalg.solve(N + Xi, (e + xi)[..., None])[..., 0]
    return np.cov(e, rowvar=False)


def _predicted(released, jacobians, hessian_sd):
    return np.mean([protocol_noise_covariance(IRLSNoise(G_VAR, H_VAR, np.zeros(2), 1.0, Hf), J, hessian_sd=hessian_sd)
                    for Hf, J in zip(released, jacobians)], axis=0)


def test_newton_map_is_the_newton_steps_map():
    """``I - N^-1 H`` (the error's map), not its transpose ``I - H N^-1``."""
    rng = np.random.default_rng(1)
    A = rng.standard_normal((P, P))
    N_ = A @ A.T + P * np.eye(P)
    H = 0.5 * N_ + 0.3 * np.diag([1.0, 2.0, 3.0])
    np.testing.assert_allclose(newton_map(N_, H, 1.0), np.eye(P) - np.linalg.solve(N_, H), atol=1e-12)


def test_irls_last_map_keeps_the_overshoot_beyond_the_jacobians_noise():
    rng = np.random.default_rng(5)
    emp = _two_rounds(rng)
    released = N + _symmetric_noise(rng, 1000, math.sqrt(H_VAR[-1]))
    exact = np.broadcast_to(np.eye(P), released.shape)
    # an exact J: the overshoot kept (MC sd of the ratios ~1%); clamped to [0, 1] it was 4.3x low on the third axis
    np.testing.assert_allclose(np.diag(emp) / np.diag(_predicted(released, exact, 0.0)), 1.0, atol=0.04)
    assert emp[2, 2] > 3.0 * _predicted(released, exact, None)[2, 2]
    # J released with noise of sd 0.1: the overshoot beyond that noise is kept, right on the third axis; taken as
    # exact, the noise makes overshoot of its own (10% high there). The other axes keep the [0, 1] map's share of
    # the noise: high (22%), never low
    noisy = exact + _symmetric_noise(rng, 1000, 0.1)
    taken_out = np.diag(emp) / np.diag(_predicted(released, noisy, 0.1))
    ignored = np.diag(emp) / np.diag(_predicted(released, noisy, 0.0))
    assert abs(taken_out[2] - 1.0) < 0.05 and ignored[2] < 0.93
    assert np.all(taken_out < 1.04) and np.all(taken_out > ignored)
