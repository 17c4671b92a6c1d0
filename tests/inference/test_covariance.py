"""Covariance algebra of private inference against Monte Carlo and direct computation."""

import numpy as np
import pytest

from privfedstat._linalg import sym_to_vec, vec_to_sym
from privfedstat.fitting.scaling import Scaler
from privfedstat.inference.covariance import (
    original_scale_map,
    original_scale_origin,
    sampling_covariance,
    variance_df,
    weighted_factor,
)
from privfedstat.theory.noise_maps import symmetric_noise_sandwich


def symmetric_noise(rng, p: int, s: float, n: int) -> np.ndarray:
    """n draws of the noise a sym_to_vec release with per-coordinate sd s puts on a (p, p) matrix."""
    return vec_to_sym(s * rng.standard_normal((n, p * (p + 1) // 2)), p)


def random_spd(rng, p: int, smallest: float = 0.5) -> np.ndarray:
    A = rng.standard_normal((p, p))
    return A @ A.T / p + smallest * np.eye(p)


def test_symmetric_noise_moment_matches_monte_carlo():
    """E[Xi C Xi] = (s^2/2)(C + tr(C) I) for the noise of a sym_to_vec release (diagonal s^2, off-diagonal s^2/2)."""
    rng = np.random.default_rng(0)
    p, s, n = 4, 0.7, 40_000
    C = random_spd(rng, p)
    Xi = symmetric_noise(rng, p, s, n)
    np.testing.assert_allclose(Xi[:, 0, 0].var(), s**2, rtol=0.02)
    np.testing.assert_allclose(Xi[:, 0, 1].var(), s**2 / 2, rtol=0.02)
    mc = np.einsum("nij,jk,nkl->il", Xi, C, Xi) / n
    se = np.einsum("nij,jk,nkl->nil", Xi, C, Xi).std(axis=0) / np.sqrt(n)
    assert np.all(np.abs(mc - symmetric_noise_sandwich(C, s**2)) < 5 * se + 1e-12)


@pytest.mark.parametrize("sandwich", [False, True])
def test_bias_correction_removes_most_of_the_noisy_inverse_bias(sandwich):
    """Mean over noise draws of the covariance from H + Xi: uncorrected it is biased upwards (E[(H+Xi)^-1] > H^-1);
    the second-order correction removes most of that bias. Antithetic pairs (Xi, -Xi) cancel the first-order
    term of the Monte Carlo error."""
    rng = np.random.default_rng(1)
    p, s, n, c = 3, 0.08, 1500, 1e-3
    H = random_spd(rng, p)
    Sigma = random_spd(rng, p) if sandwich else None
    exact = sampling_covariance(H, c, Sigma)[0]
    raw, corrected = np.zeros((p, p)), np.zeros((p, p))
    for Xi in symmetric_noise(rng, p, s, n):
        for sign in (1.0, -1.0):
            raw += sampling_covariance(H + sign * Xi, c, Sigma)[0] / (2 * n)
            corrected += sampling_covariance(H + sign * Xi, c, Sigma, s**2, bias_correction=True)[0] / (2 * n)
    bias_raw, bias_corrected = np.abs(np.diag(raw - exact)), np.abs(np.diag(corrected - exact))
    assert np.all(np.diag(raw - exact) > 0)  # inverting noise inflates on average
    assert np.all(bias_corrected < 0.25 * bias_raw)


def test_correction_that_is_not_positive_definite_falls_back_and_says_so():
    H = np.diag([1.0, 0.05])
    cov, notes = sampling_covariance(H, 1.0, None, 0.2**2, bias_correction=True)
    np.testing.assert_allclose(cov, np.diag([1.0, 20.0]))
    assert notes and "not positive definite" in notes[0]
    assert sampling_covariance(H, 1.0, None, 0.0, bias_correction=True) == (pytest.approx(cov), [])


def test_model_and_sandwich_formulas():
    rng = np.random.default_rng(2)
    H, S = random_spd(rng, 3), random_spd(rng, 3)
    Hi = np.linalg.inv(H)
    np.testing.assert_allclose(sampling_covariance(H, 0.1)[0], 0.1 * Hi, rtol=1e-12)
    np.testing.assert_allclose(sampling_covariance(H, 0.1, S)[0], 0.1 * Hi @ S @ Hi, rtol=1e-12)


def test_weighted_factor():
    sizes = np.array([10.0, 30.0, 60.0])
    c, v = weighted_factor(sizes / 100, sizes)
    assert c == pytest.approx(0.01) and v == pytest.approx(sizes / 100)
    w = np.array([0.5, 0.25, 0.25])
    c, v = weighted_factor(w, sizes)
    assert c == pytest.approx(np.sum(w**2 / sizes)) and v.sum() == pytest.approx(1.0)
    assert v == pytest.approx(w**2 / sizes / c)


@pytest.mark.parametrize("response", [False, True])
@pytest.mark.parametrize("q", [1, 3])
def test_original_scale_map_and_origin_are_the_scalers_affine_map_in_F_order(q, response):
    rng = np.random.default_rng(3)
    d = 4
    located = (612.5, 37.0) if response and q == 1 else (0.0, 1.0)  # a location family's response (scalar)
    scaler = Scaler(center=rng.standard_normal(d), scale=rng.uniform(0.5, 3, d), intercept=0, response_center=located[0],
                    response_scale=located[1])
    scaler.center[0], scaler.scale[0] = 0.0, 1.0  # the intercept, as every Scaler has it
    G = original_scale_map(scaler.coef_to_original, d, q)
    origin = original_scale_origin(scaler.coef_to_original, d, q)
    for _ in range(3):
        theta = rng.standard_normal(d * q)  # oracle order: flat C order of the (d, q) matrix
        coef = scaler.coef_to_original(theta.reshape(d, q) if q > 1 else theta)
        np.testing.assert_allclose(G @ theta + origin, coef.ravel(order="F"), rtol=1e-12, atol=1e-10)
    # the constant: the response's centre on the intercept, less its share through the columns' centres
    assert origin[0] == pytest.approx(located[0]) and np.all(origin[1:] == 0.0)
    P = original_scale_map(None, d, q)  # no scaler: the permutation to equation-major order
    theta = np.arange(d * q, dtype=float)
    np.testing.assert_array_equal(P @ theta, theta.reshape(d, q).ravel(order="F") if q > 1 else theta)


def test_sym_to_vec_round_trip_keeps_noise_symmetric():
    rng = np.random.default_rng(4)
    Xi = symmetric_noise(rng, 3, 1.0, 2)
    np.testing.assert_array_equal(Xi, np.swapaxes(Xi, 1, 2))
    np.testing.assert_allclose(vec_to_sym(sym_to_vec(Xi), 3), Xi)


@pytest.mark.parametrize("sandwich", [False, True])
def test_variance_df_matches_the_spread_of_variances_computed_from_noisy_releases(sandwich):
    """Monte Carlo: the variance c g^T (H + Xi_H)^-1 (Sigma + Xi_S) (H + Xi_H)^-1 g over draws of the symmetric release
    noise has the spread the Satterthwaite degrees of freedom say (``Var = 2 total^2 / df``), within 12%."""
    rng = np.random.default_rng(8)
    p, c, s_H, s_S = 4, 1e-3, 0.02, 0.03
    H, Sigma = random_spd(rng, p), random_spd(rng, p) if sandwich else None
    G = rng.standard_normal((3, p))
    v_p = np.full(3, 2e-4)  # an exact privacy part adds to the total, not to the noise
    exact = np.diag(G @ sampling_covariance(H, c, Sigma)[0] @ G.T)
    df = variance_df(G, H, Sigma, s_H, s_S, c, exact + v_p)
    n = 40000
    XH, XS = symmetric_noise(rng, p, s_H, n), symmetric_noise(rng, p, s_S, n)
    Hi = np.linalg.inv(H + XH)
    M = Hi if Sigma is None else Hi @ (Sigma + XS) @ Hi
    draws = c * np.einsum("jp,npq,jq->nj", G, M, G)
    np.testing.assert_allclose(draws.var(axis=0), 2 * (exact + v_p) ** 2 / df, rtol=0.12)
    assert np.all(np.isinf(variance_df(G, H, Sigma, 0.0, 0.0, c, exact)))  # nothing noised: the normal interval
