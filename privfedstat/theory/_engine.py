"""Moment propagation for noisy (clipped) gradient schemes, linearised around the population target.

A scheme is a sequence of S gradient steps of size eta on the clients' (clipped) losses, grouped in
*stages*. Stage ``a`` has per-client data weights omega_a (how client i's mean score enters the
step), a per-coordinate noise variance per step, and a flag saying whether its steps are *local*
(every client runs them on its own data from a common point, as in FedAvg, and the server then
averages with omega_a) or *server* steps (aggregated gradients, as in FedSGD).

Write psi_i(theta) for client i's mean clipped score, G(theta) = E psi, theta* the root of G, and
H = dG/dtheta(theta*), Sigma = E[psi psi^T](theta*). To first order the error theta_S - theta* is
  P_{0->S}-transported deterministic error + sum_s P_{s+1->S} (-eta sum_i omega_{s,i} psi_i(theta*) + noise_s),
with P_{s+1->S} the product of the step Jacobians I - eta H_s after step s. The second moment is
then a sum of exactly computable matrices. Local stages add the O(1/n_i) drift of each client's
local iterates (second-order terms of the local recursion; FedAvg's federation bias).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = ["Stage", "Linearisation", "propagate", "privacy_transport"]


@dataclass
class Stage:
    """``n_steps`` steps sharing data weights ``omega`` (shape (m,)) and noise variance ``noise_var``.

    ``noise_var`` is the per-coordinate variance of the privacy noise that one step adds to the
    server's parameter (isotropic): ``eta^2 sum_i omega_i^2 sigma_i^2`` for a server gradient step
    on messages with noise sd sigma_i, ``sum_i omega_i^2 s_i^2`` for a local step adding noise of
    sd s_i to every client's parameter (averaged with omega after the stage); ``client_noise``
    holds the s_i^2 of local stages.
    """

    n_steps: int
    omega: np.ndarray
    noise_var: float
    local: bool = False
    client_noise: np.ndarray | None = None  # per-client per-step noise variance (local stages)


class Linearisation:
    """Population quantities at the target theta* on a covariate sample (see ``_population``)."""

    def __init__(self, pop, clip, step_size: float) -> None:
        self.pop = pop
        self.clip = clip
        self.eta = float(step_size)
        self.theta_star = pop.root(clip)
        mom = pop.moments(self.theta_star, clip)
        self.H = (mom["J"] + mom["J"].T) / 2
        self.Sigma = (mom["S"] + mom["S"].T) / 2
        self.lam, self.U = np.linalg.eigh(self.H)
        if self.lam[0] <= 0:
            raise ValueError("the population Hessian at the target is not positive definite; the design is degenerate.")
        Hinv = (self.U / self.lam) @ self.U.T
        self.V = Hinv @ self.Sigma @ Hinv
        X = pop.X
        Y = X @ self.U  # covariates in the eigenbasis of H
        n = pop.n
        # E[k3 x y_j y_k] and E[k12 x y_j^2]: the third-derivative tensor and the score-Hessian correlation
        self.T3 = np.einsum("n,nl,nj,nk->ljk", mom["k3"], X, Y, Y, optimize=True) / n
        self.C12 = np.einsum("n,nl,nj->lj", mom["k12"], X, Y * Y, optimize=True) / n
        self.k22 = mom["k22"]
        self.a = 1.0 - self.eta * self.lam  # eigenvalues of A = I - eta H

    def A_power(self, t) -> np.ndarray:
        return (self.U * self.a**t) @ self.U.T

    def local_drift(self, K: int) -> tuple[np.ndarray, np.ndarray]:
        """Per-client mean drift of K local steps from a common point near theta*.

        Returns ``(beta_data, beta_noise)``: client i's local iterate is biased by
        ``beta_data / n_i + s_i^2 beta_noise`` with s_i^2 the per-coordinate variance of the noise
        it adds at each step. From the second-order local recursion
        e_{t+1} = A e_t - eta (psi_i(theta*) + D_i e_t + T[e_t, e_t]/2) + noise:
        beta_data = eta sum_t A^{K-1-t} (c_t - T:W_t/2), beta_noise = -eta/2 sum_t A^{K-1-t} T:N_t,
        with W_t = (I - A^t) V (I - A^t), N_t = sum_{j<t} A^{2j} and c_t = E[D psi (I - A^t) H^-1 psi].
        """
        t = np.arange(K)
        a, lam = self.a, self.lam
        at = a[None, :] ** t[:, None]  # (K, d)
        one_m = 1.0 - at
        Vt = self.U.T @ self.V @ self.U
        # T:W_t in the original coordinates: sum_jk T3[:, j, k] Vt[j, k] (1-a_j^t)(1-a_k^t)
        TW = np.einsum("ljk,jk,tj,tk->tl", self.T3, Vt, one_m, one_m, optimize=True)
        with np.errstate(divide="ignore", invalid="ignore"):
            geo = np.where(np.abs(1 - a**2) > 1e-14, (1 - at**2) / (1 - a**2), t[:, None].astype(float))
        TN = np.einsum("ljj,tj->tl", self.T3, geo, optimize=True)
        ct = np.einsum("lj,tj->tl", self.C12, one_m / lam, optimize=True)
        # apply sum_t A^{K-1-t} to rows: in the eigenbasis, weight a_j^{K-1-t}
        back = a[None, :] ** (K - 1 - t)[:, None]  # (K, d)
        def transport(rows):
            return self.U @ np.sum(back * (rows @ self.U), axis=0)
        return self.eta * transport(ct - TW / 2), -self.eta / 2 * transport(TN)


    def local_spread(self, K: int) -> tuple[float, float]:
        """(trace W_K, trace N_K): a client's local fluctuation after K steps has trace
        trace(W_K)/n_i + s_i^2 trace(N_K)."""
        a = self.a
        Vt = self.U.T @ self.V @ self.U
        with np.errstate(divide="ignore", invalid="ignore"):
            geo = np.where(np.abs(1 - a**2) > 1e-14, (1 - a ** (2 * K)) / (1 - a**2), float(K))
        return float(np.sum(np.diag(Vt) * (1 - a**K) ** 2)), float(np.sum(geo))


def privacy_transport(jac, noise) -> np.ndarray:
    """Covariance that independent per-step noises leave after S linear steps.

    ``sum_{s<S} P_{s+1->S} N_s P_{s+1->S}^T`` with ``P_{s+1->S} = J_{S-1} ... J_{s+1}`` (the
    identity for s = S - 1): the noise of step s is added after that step's map and goes through
    every later one. It is the privacy term of :func:`propagate` (``predict_mse``) and of
    :func:`privfedstat.theory.protocol_noise_covariance`.

    Parameters
    ----------
    jac : sequence of S arrays of shape (d, d)
        Step Jacobians J_s (an array (S, d, d), a broadcast view or a list repeating one matrix).
    noise : array of shape (S,) or (S, d, d)
        Noise of each step: a per-coordinate variance (N_s = noise[s] I) or a covariance matrix.

    Returns
    -------
    ndarray of shape (d, d)
    """
    noise = np.asarray(noise, dtype=np.float64)
    S = len(jac)
    if noise.shape[0] != S:
        raise ValueError(f"one noise term per step is needed: {S} steps, {noise.shape[0]} noise terms.")
    d = np.shape(jac[0])[-1] if S else (noise.shape[-1] if noise.ndim == 3 else 0)
    out = np.zeros((d, d))
    P = np.eye(d)  # P_{s+1->S}, built backwards
    for s in range(S - 1, -1, -1):
        if noise.ndim == 1:
            if noise[s] != 0:
                out += noise[s] * P @ P.T
        else:
            out += P @ noise[s] @ P.T
        P = P @ jac[s]
    return out


def propagate(lin: Linearisation, stages: list[Stage], sizes: np.ndarray, init: np.ndarray, *,
              path: bool) -> dict:
    """Second moment of theta_S - theta* for a scheme; see the module docstring.

    Returns a dict with the matrices ``sampling``, ``privacy``, the vectors ``optimisation``
    (deterministic error of the noise-free path) and ``drift`` (local-stage bias), and the
    diagnostics ``contraction`` (||P_{0->S}||_2), ``path_end`` and ``local_nonlinearity`` (the
    largest ratio, over clients and local stages, of a client's second-order drift to the spread of
    its local iterates; the second-order expansion needs it small -- about < 0.35 in our checks).
    """
    pop, clip, eta = lin.pop, lin.clip, lin.eta
    d = lin.H.shape[0]
    S = sum(st.n_steps for st in stages)
    stage_of = np.concatenate([np.full(st.n_steps, a) for a, st in enumerate(stages)])
    # Jacobians of the step maps and the deterministic path
    if path:
        theta = np.asarray(init, dtype=np.float64).copy()
        jac = np.empty((S, d, d))
        for s in range(S):
            jac[s] = np.eye(d) - eta * pop.jacobian(theta, clip)
            theta = theta - eta * pop.gradient(theta, clip)
        opt = theta - lin.theta_star
        path_end = theta
    else:
        A = lin.A_power(1)
        jac = np.broadcast_to(A, (S, d, d))
        opt = lin.A_power(S) @ (np.asarray(init, dtype=np.float64) - lin.theta_star)
        path_end = lin.theta_star + opt
    # P_{s+1->S} for s = S-1..0 (products of later Jacobians), accumulated backwards
    P = np.empty((S + 1, d, d))
    P[S] = np.eye(d)
    for s in range(S - 1, -1, -1):
        P[s] = P[s + 1] @ jac[s]
    after = P[1:]  # after[s] = P_{s+1->S}
    privacy = privacy_transport(jac, np.array([stages[a].noise_var for a in stage_of], dtype=np.float64))
    M = np.zeros((len(stages), d, d))
    for s in range(S):
        M[stage_of[s]] += eta * after[s]
    sampling = np.zeros((d, d))
    for a, sa in enumerate(stages):
        for b, sb in enumerate(stages):
            c = float(np.sum(sa.omega * sb.omega / sizes))
            sampling += c * M[a] @ lin.Sigma @ M[b].T
    drift = np.zeros(d)
    end = 0
    nonlin = 0.0
    for st in stages:
        end += st.n_steps
        if st.local:
            bd, bn = lin.local_drift(st.n_steps)
            noise = np.zeros_like(sizes, dtype=float) if st.client_noise is None else st.client_noise
            drift += P[end] @ (float(np.sum(st.omega / sizes)) * bd + float(np.sum(st.omega * noise)) * bn)
            # size of each client's second-order drift relative to its local spread (small = expansion valid)
            trW, trN = lin.local_spread(st.n_steps)
            beta_i = np.linalg.norm(bd[None, :] / sizes[:, None] + noise[:, None] * bn[None, :], axis=1)
            spread = np.sqrt(trW / sizes + noise * trN)
            nonlin = max(nonlin, float(np.max(beta_i / np.maximum(spread, 1e-300))))
    return {"sampling": (sampling + sampling.T) / 2, "privacy": privacy, "optimisation": opt, "drift": drift,
            "contraction": float(np.linalg.norm(P[0], 2)), "path_end": path_end, "local_nonlinearity": nonlin}
