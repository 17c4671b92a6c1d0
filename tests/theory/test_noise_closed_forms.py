"""protocol_noise_covariance's exact (non-Monte-Carlo) pieces against naive loops, closed forms, a full
state-space recursion (SCAFFOLD) and a simulation of the linearised FedIRLS rounds."""

import math

import numpy as np
import pytest
from test_noise_covariance import _random_spd
from theory_fixtures import one_numba_thread  # noqa: F401  (a fixture, used by name)

from privfedstat._linalg import vec_to_sym
from privfedstat.simulations import GLMDesign
from privfedstat.theory import protocol_noise_covariance
from privfedstat.theory._engine import Linearisation, Stage, privacy_transport, propagate
from privfedstat.theory._population import Population, make_spec
from privfedstat.theory.noise import (
    GradientNoise,
    IRLSNoise,
    NewtonNoise,
    ScaffoldNoise,
    fedavg_noise,
    fedhybrid_noise,
    fedsgd_noise,
)
from privfedstat.theory.noise_maps import symmetric_noise_sandwich

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("one_numba_thread")]


def test_privacy_transport_is_the_naive_sum_of_transported_noises():
    rng = np.random.default_rng(0)
    S, d = 7, 3
    jac = np.eye(d) + 0.3 * rng.standard_normal((S, d, d))  # not symmetric
    var = rng.uniform(0, 1, S)
    covs = np.array([_random_spd(rng, d) for _ in range(S)])
    naive_scalar, naive_matrix = np.zeros((d, d)), np.zeros((d, d))
    for s in range(S):
        P = np.eye(d)
        for t in range(s + 1, S):  # the noise of step s goes through steps s+1, ..., S-1
            P = jac[t] @ P
        naive_scalar += var[s] * P @ P.T
        naive_matrix += P @ covs[s] @ P.T
    np.testing.assert_allclose(privacy_transport(jac, var), naive_scalar, rtol=1e-12)
    np.testing.assert_allclose(privacy_transport(list(jac), covs), naive_matrix, rtol=1e-12)
    with pytest.raises(ValueError, match="one noise term per step"):
        privacy_transport(jac, var[:-1])


def test_gradient_schemes_match_closed_forms():
    """FedSGD: eta^2 sum_i w_i^2 sigma_i^2 sum_k A^2k with sigma_i = 2 B sqrt(K)/(mu n_i); FedAvg: the
    same over R K steps with s_i = 2 B eta sqrt(R K)/(mu n_i); FedHybrid: stage I (K1 local steps,
    weights n_i/N, budget mu/sqrt 2) carried through the K2 server steps of stage II."""
    rng = np.random.default_rng(1)
    H = _random_spd(rng, 3)
    ev, U = np.linalg.eigh(H)
    sizes = np.array([100.0, 300.0, 600.0])
    u = sizes / sizes.sum()
    w = np.array([0.2, 0.3, 0.5])
    B, mu, eta = 1.7, 1.3, 0.8
    a = 1 - eta * ev

    def geo(k, start=0):  # sum_{t<k} A^(2t), times A^(2 start)
        return (U * (np.sum(a[None, :] ** (2 * np.arange(k))[:, None], axis=0) * a ** (2 * start))) @ U.T

    K = 40
    sig = 2 * B * math.sqrt(K) / (mu * sizes)
    model = fedsgd_noise(clip=B, sizes=sizes, mu=mu, n_iter=K, step_size=eta, weights=w)
    np.testing.assert_allclose(protocol_noise_covariance(model, H), eta**2 * np.sum(w**2 * sig**2) * geo(K), rtol=1e-10)
    R, K = 3, 20
    s = 2 * B * eta * math.sqrt(R * K) / (mu * sizes)
    model = fedavg_noise(clip=B, sizes=sizes, mu=mu, n_rounds=R, n_local_steps=K, step_size=eta, weights=w)
    np.testing.assert_allclose(protocol_noise_covariance(model, H), np.sum(w**2 * s**2) * geo(R * K), rtol=1e-10)
    K1, K2 = 15, 10
    s1 = 2 * B * eta * math.sqrt(K1) / (mu / math.sqrt(2) * sizes)
    s2 = 2 * B * math.sqrt(K2) / (mu / math.sqrt(2) * sizes)
    model = fedhybrid_noise(clip=B, sizes=sizes, mu=mu, n_local_steps=K1, n_server_iter=K2, step_size=eta, weights=w)
    expected = np.sum(u**2 * s1**2) * geo(K1, start=K2) + eta**2 * np.sum(w**2 * s2**2) * geo(K2)
    np.testing.assert_allclose(protocol_noise_covariance(model, H), expected, rtol=1e-10)


def test_predict_mse_privacy_term_is_the_same_transport():
    """predict_mse's privacy term (target linearisation) and the fit's noise covariance are one computation."""
    spec = make_spec(GLMDesign("logistic", beta=(0.5, -0.5, 0.5)))
    eta = 0.7
    lin = Linearisation(Population(spec, 2**12, 0), 6.0, eta)
    sizes = np.array([200.0, 300.0, 500.0])
    model = fedavg_noise(clip=6.0, sizes=sizes, mu=2.0, n_rounds=2, n_local_steps=10, step_size=eta, weights=sizes / 1000)
    out = propagate(lin, list(model.stages), sizes, np.zeros(3), path=False)
    np.testing.assert_allclose(out["privacy"], protocol_noise_covariance(model, lin.H), rtol=1e-12)


def _scaffold_state_space(H, sigma, w, eta, eta_g, K, R):
    """Exact covariance of x after R rounds of the linearised SCAFFOLD recursion on the full state
    (x, c, c_1..c_m, y_1..y_m), every client's control variate kept (no cancellation assumed)."""
    p, m = H.shape[0], len(w)
    dim = (2 * m + 2) * p
    X, C = slice(0, p), slice(p, 2 * p)

    def ci(i):
        return slice((2 + i) * p, (3 + i) * p)

    def yi(i):
        return slice((2 + m + i) * p, (3 + m + i) * p)

    I, A = np.eye(p), np.eye(p) - eta * H
    cov = np.zeros((dim, dim))
    for _ in range(R):
        T = np.eye(dim)
        for i in range(m):  # y_i <- x
            T[yi(i), :] = 0
            T[yi(i), X] = I
        cov = T @ cov @ T.T
        for _ in range(K):  # y_i <- A y_i - eta (c - c_i) - eta sigma_i z
            T, Q = np.eye(dim), np.zeros((dim, dim))
            for i in range(m):
                T[yi(i), yi(i)] = A
                T[yi(i), C] = -eta * I
                T[yi(i), ci(i)] = eta * I
                Q[yi(i), yi(i)] = eta**2 * sigma[i] ** 2 * I
            cov = T @ cov @ T.T + Q
        # c_i+ = c_i - c + (x - y_i)/(K eta); x+ = x + eta_g sum w_i (y_i - x); c+ = c + sum w_i (c_i+ - c_i)
        T = np.eye(dim)
        for i in range(m):
            T[ci(i), C] = -I
            T[ci(i), X] = I / (K * eta)
            T[ci(i), yi(i)] = -I / (K * eta)
            T[X, X] -= eta_g * w[i] * I
            T[X, yi(i)] = eta_g * w[i] * I
            T[C, C] -= w[i] * I
            T[C, X] += w[i] * I / (K * eta)
            T[C, yi(i)] = -w[i] * I / (K * eta)
        cov = T @ cov @ T.T
    return cov[X, X]


@pytest.mark.parametrize("eta_g", [1.0, 0.6])
def test_scaffold_model_matches_the_full_state_space_recursion(eta_g):
    rng = np.random.default_rng(2)
    H = _random_spd(rng, 2, 0.2, 0.9)
    sigma, w = np.array([0.3, 0.5, 0.2]), np.array([0.5, 0.3, 0.2])
    eta, K, R = 0.5, 4, 3
    model = ScaffoldNoise(eta**2 * float(np.sum(w**2 * sigma**2)), K, R, eta, eta_g)
    np.testing.assert_allclose(protocol_noise_covariance(model, H),
                               _scaffold_state_space(H, sigma, w, eta, eta_g, K, R), rtol=1e-10, atol=1e-15)
    if eta_g == 1.0:  # then it is FedSGD's transport over R K steps
        sgd = GradientNoise(eta, (Stage(R * K, w, model.step_var),))
        np.testing.assert_allclose(protocol_noise_covariance(model, H), protocol_noise_covariance(sgd, H), rtol=1e-10)


def test_newton_model_carries_the_fedavg_noise_through_the_damped_step():
    rng = np.random.default_rng(3)
    H = _random_spd(rng, 3, 0.1, 0.6)
    w, sizes = np.array([0.5, 0.5]), np.array([200.0, 200.0])
    stage = fedavg_noise(clip=1.0, sizes=sizes, mu=1.0, n_rounds=1, n_local_steps=10, step_size=1.0, weights=w)
    newton_var = np.array([0.01, 0.02])
    C1 = protocol_noise_covariance(stage, H)
    lam = 0.3  # above some eigenvalues of H: (I - floor(H)^-1 H) C1 (.)^T survives
    ev, U = np.linalg.eigh(H)
    D = (U * (1 - ev / np.maximum(ev, lam))) @ U.T
    expected = D @ C1 @ D.T + float(np.sum(w**2 * newton_var)) * np.eye(3)
    got = protocol_noise_covariance(NewtonNoise(stage, newton_var, w, lam), H)
    np.testing.assert_allclose(got, expected, rtol=1e-10, atol=1e-16)
    assert np.any(np.abs(D) > 0.1)  # the carried term is exercised
    # a floor below H's spectrum: the Newton step removes the FedAvg noise, only its own remains
    np.testing.assert_allclose(protocol_noise_covariance(NewtonNoise(stage, newton_var, w, 1e-6), H),
                               float(np.sum(w**2 * newton_var)) * np.eye(3), atol=1e-14)
    # a Newton matrix N other than H: D = I - floor(N)^-1 H
    N = H + 0.05 * np.eye(3)
    D = np.eye(3) - np.linalg.solve(N, H)
    np.testing.assert_allclose(protocol_noise_covariance(NewtonNoise(stage, newton_var, w, 1e-6), H, newton_matrix=N),
                               D @ C1 @ D.T + float(np.sum(w**2 * newton_var)) * np.eye(3), rtol=1e-10)


def test_symmetric_noise_sandwich_by_enumerating_the_noise_basis():
    """E[Xi C Xi] = sum_e Var(e) E_e C E_e over the independent entries e of the symmetric noise."""
    rng = np.random.default_rng(4)
    p, s2 = 4, 0.3
    C = _random_spd(rng, p)
    expected = np.zeros((p, p))
    for j in range(p):
        for k in range(j, p):
            E = np.zeros((p, p))
            E[j, k] = E[k, j] = 1.0
            expected += (s2 if j == k else s2 / 2) * E @ C @ E
    np.testing.assert_allclose(symmetric_noise_sandwich(C, s2), expected, rtol=1e-12)


def _linearised_irls_rounds():
    """e_r = e_{r-1} - (N + Xi_r)^-1 (H e_{r-1} + xi_r) over 40000 replicates (p = 3, R = 4): the generator (for
    further draws), H, N, the round variances and the replicates' final errors."""
    rng = np.random.default_rng(5)
    p, R = 3, 4
    H = _random_spd(rng, p, 0.5, 1.5)
    N = H + 0.2 * _random_spd(rng, p, 0.1, 0.5)
    g_var = np.array([0.4, 0.1, 0.03, 0.01])
    h_var = np.array([0.03, 0.02, 0.01, 0.005])
    reps = 40000
    e = np.zeros((reps, p))
    for r in range(R):
        Xi = vec_to_sym(rng.standard_normal((reps, p * (p + 1) // 2)) * math.sqrt(h_var[r]), p)
        xi = rng.standard_normal((reps, p)) * math.sqrt(g_var[r])
        e = e - np.linalg.solve(N + Xi, (e @ H + xi)[..., None])[..., 0]
    return rng, H, N, g_var, h_var, e


def test_irls_model_matches_a_simulation_of_the_linearised_rounds():
    """e_r = e_{r-1} - (N + Xi_r)^-1 (H e_{r-1} + xi_r), Xi_r symmetric noise as a sym_to_vec release
    (diagonal variance s^2, off-diagonal s^2 / 2) of up to a third of N's eigenvalues, N != H (a
    linearly converging Newton). The model is conditional on the released last Hessian
    Hf_R = N + Xi_R: its average over Xi_R is compared with the simulation's covariance."""
    rng, H, N, g_var, h_var, e = _linearised_irls_rounds()
    p, R = H.shape[0], len(g_var)
    emp = np.cov(e, rowvar=False)
    released = N + vec_to_sym(rng.standard_normal((2000, p * (p + 1) // 2)) * math.sqrt(h_var[-1]), p)
    pred = np.mean([protocol_noise_covariance(IRLSNoise(g_var, h_var, np.zeros(R), 1.0, Hf), H) for Hf in released],
                   axis=0)
    np.testing.assert_allclose(np.diag(emp) / np.diag(pred), 1.0, atol=0.04)  # MC sd ~1%
    # the Hessian noise matters here: without it (and with the noise-free N) the prediction is 5-8% low
    without = protocol_noise_covariance(IRLSNoise(g_var, 0 * h_var, np.zeros(R), 1.0, N), H)
    assert np.trace(without) < 0.97 * np.trace(emp)


def test_irls_expected_covariance_averages_over_the_released_hessian():
    """From the noise-free N, ``expected_covariance`` is the same simulation's covariance (what a plan predicts
    before any Hessian is released), and its stacked recursion is the recursion at each released matrix."""
    rng, H, N, g_var, h_var, e = _linearised_irls_rounds()
    p, R = H.shape[0], len(g_var)
    model = IRLSNoise(g_var, h_var, np.zeros(R), 1.0, N)
    expected = model.expected_covariance(H)
    np.testing.assert_allclose(np.diag(np.cov(e, rowvar=False)) / np.diag(expected), 1.0, atol=0.04)
    released = N + vec_to_sym(rng.standard_normal((4, p * (p + 1) // 2)), p) * 0.05
    stacked = IRLSNoise(g_var, h_var, np.zeros(R), 1.0, released).covariance(H)
    for Hf, C in zip(released, stacked):
        np.testing.assert_allclose(C, IRLSNoise(g_var, h_var, np.zeros(R), 1.0, Hf).covariance(H), rtol=1e-12)
    assert IRLSNoise(g_var, 0 * h_var, np.zeros(R), 1.0, N).expected_covariance(H) == pytest.approx(
        IRLSNoise(g_var, 0 * h_var, np.zeros(R), 1.0, N).covariance(H))
