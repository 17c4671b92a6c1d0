"""Moments of FedNewton's Newton step given the moments of its FedAvg stage: the fit's policy walked on the population.

The FedAvg stage ends at theta_1 = theta* + e_1. Its error is drawn (moment-matched Gaussian draws with the
stage's predicted mean and covariance) and, at each draw, the step is taken as the fit takes it
(:class:`~privfedstat.privacy.newton_policy.NewtonPolicy`, the object the fit reads), with the population in
place of the clients:

* private mode: C_H re-searched at theta_1 (the search's bisection on the population's count of per-sample
  Hessian norms), the mean Hessian clipped at C_H at theta_1 plus a draw of the release's noise, floored by the
  policy; the step's noise from the floored matrix's smallest eigenvalue (so its randomness is kept);
* paper mode: each client's own first-half Hessian at theta_1, whose sampling error enters to second order
  (the mean of its inverse, and the variance it adds to the step, O(1/n1_i));

and the step itself is exact in e_1: ``e_New = e_1 - M proj_G(g(theta_1) + xi) + noise`` with g the
population's mean clipped gradient at theta_1 and xi the second halves' sampling error (covariance of the
clipped score at theta_1 over n2_i). A finite radius G is averaged by Monte Carlo over xi per client group.
Neglected: the dependence between the FedAvg stage's data and the Hessian release (one datum's share), and
the sampling error of the pooled released Hessian (O(1/N)).
"""

from __future__ import annotations

import numpy as np

from .._linalg import vec_to_sym
from ..privacy.calibration import calibrated_sigma

__all__ = ["newton_moments"]

#: points theta evaluated at once (memory: CHUNK * STEP_ROWS * response nodes floats per array)
CHUNK = 64
#: covariate rows of the population sample on which the Newton step's draws (256) are evaluated: their gradients are
#: corrected at theta*, so the rows' Monte-Carlo error is relative to ||theta - theta*|| (2%); chosen for speed
STEP_ROWS = 2048


def _matched_normals(rng, n: int, d: int) -> np.ndarray:
    z = rng.standard_normal((max(1, n // 2), d))
    z = np.concatenate([z, -z])
    L = np.linalg.cholesky(z.T @ z / z.shape[0])
    return np.linalg.solve(L, z.T).T


def _sqrtm(C: np.ndarray) -> np.ndarray:
    ev, vec = np.linalg.eigh((C + C.T) / 2)
    return vec * np.sqrt(np.clip(ev, 0.0, None))


class _Rows:
    """Population moments on ``n_rows`` of the covariate sample (antithetic pairs kept together) at batches of
    points theta: the clipped gradient, corrected by its value at theta* (0 on the whole sample) so that its
    Monte-Carlo error is relative, the clipped score's covariance, and the per-sample curvature ell''(x^T theta)
    (which does not depend on y for the supported GLM families)."""

    def __init__(self, lin, n_rows: int) -> None:
        pop = lin.pop
        half = pop.n // 2
        k = min(half, max(1, n_rows // 2))
        rows = np.r_[0:k, half:half + k]
        self.X, self.W, self.Y = pop.X[rows], pop.W[rows][:, None, :], pop.Y[rows][:, None, :]
        self.family, self.n = pop.family, rows.size
        self.xnorm2 = np.sum(self.X**2, axis=1)
        self.XX = (self.X[:, :, None] * self.X[:, None, :]).reshape(self.n, -1)
        self.c = (np.inf if lin.clip is None else lin.clip) / np.sqrt(self.xnorm2)[:, None, None]
        self.g_star = 0.0
        self.g_star = self.gradient(lin.theta_star[None, :])[0]

    def _score(self, thetas):
        z = self.X @ thetas.T
        return z, np.clip(self.family.deriv(self.Y, z[:, :, None]), -self.c, self.c)

    def gradient(self, thetas: np.ndarray) -> np.ndarray:
        _, r = self._score(thetas)
        return np.sum(self.W * r, axis=2).T @ self.X / self.n - self.g_star

    def at(self, thetas: np.ndarray):
        """(g, Sigma, k2) at every row of ``thetas``: shapes (b, d), (b, d, d), (n_rows, b)."""
        z, r = self._score(thetas)
        d = self.X.shape[1]
        g = np.sum(self.W * r, axis=2).T @ self.X / self.n
        S = (np.sum(self.W * r * r, axis=2).T @ self.XX / self.n).reshape(-1, d, d)
        return g - self.g_star, S - np.einsum("bd,be->bde", g, g), self.family.deriv2(np.zeros_like(z), z)

    def hessian(self, k2: np.ndarray, hessian_clip: float) -> np.ndarray:
        """E[ell'' x x^T] with per-sample Hessians clipped to norm ``hessian_clip`` (k2: one point's curvature)."""
        d = self.X.shape[1]
        k = k2 * np.minimum(1.0, hessian_clip / np.maximum(k2 * self.xnorm2, 1e-300))
        return (k @ self.XX / self.n).reshape(d, d)

    def hess_var(self, k2: np.ndarray, H: np.ndarray, Q: np.ndarray) -> np.ndarray:
        """E[(Hdot - H) Q (Hdot - H)] for the per-sample Hessians Hdot = ell'' x x^T at one point (curvature k2)."""
        d = self.X.shape[1]
        q = np.einsum("nj,jk,nk->n", self.X, Q, self.X)
        return ((k2**2 * q) @ self.XX / self.n).reshape(d, d) - H @ Q @ H


def _client_paths(pop, clip: float, rows: int, n_paths: int, rng):
    """``n_paths`` simulated clients of ``rows`` rows each (covariates from the population's sample, y | x from its
    response nodes): a function giving each client's mean clipped gradient at its own point (rows of ``thetas``)."""
    idx = np.tile(rng.integers(0, pop.n, (n_paths // 2, rows)), (2, 1))  # pairs of paths share a client's data
    cum = np.cumsum(pop.W[idx], axis=2)
    node = np.minimum((rng.random((n_paths, rows, 1)) > cum).sum(axis=2), pop.W.shape[1] - 1)
    X, y = pop.X[idx], np.take_along_axis(pop.Y[idx], node[..., None], axis=2)[..., 0]
    c = (np.inf if clip is None else clip) / pop.xnorm[idx]

    def gradient(thetas: np.ndarray) -> np.ndarray:
        r = np.clip(pop.family.deriv(y, np.einsum("pnd,pd->pn", X, thetas)), -c, c)
        return np.einsum("pn,pnd->pd", r, X) / rows

    return gradient


def _stage_one(lin, stages, n1: np.ndarray, w: np.ndarray, rng, *,
               max_rows: int = 2**15) -> tuple[np.ndarray, np.ndarray]:
    """Mean and covariance of theta_1 - theta* after the FedAvg stage, simulated on the population.

    Every client group's local iterates run from the common start on simulated clients of the group's size
    (rows drawn from the population), ``theta <- theta - eta g_i(theta) + s z`` with g_i the client's mean clipped
    gradient and s z the noise the step adds to the parameter; as many clients per group as keep
    ``max_rows`` rows (16 to 1024), in pairs that share their data and take opposite noises (antithetic). The
    server averages independent clients: the mean end point is the
    groups' weighted mean, the covariance ``sum_i w_i^2`` times the group's covariance of end points; the next
    round starts at the mean and an earlier round's covariance is carried through the later rounds linearly
    (``A^K`` per round). The second-order expansion of ``_engine.local_drift`` overstates the mean when the
    local iterates wander far (many small clients, small mu: its ``local_nonlinearity``).
    """
    eta = lin.eta
    group, _ = _groups(n1, n1, max_groups=6)
    d = lin.H.shape[0]
    theta, cov = np.zeros(d), np.zeros((d, d))
    for st in stages:
        noise = np.zeros(n1.size) if st.client_noise is None else np.asarray(st.client_noise, dtype=np.float64)
        carry = lin.A_power(st.n_steps)
        end, cov = np.zeros(d), carry @ cov @ carry.T
        for g in range(group.max() + 1):
            sel = group == g
            sd, rows = float(np.sqrt(np.mean(noise[sel]))), max(1, int(round(float(np.mean(n1[sel])))))
            half = int(np.clip(max_rows // rows, 8, 512))
            gradient = _client_paths(lin.pop, lin.clip, rows, 2 * half, rng)
            paths = np.tile(theta, (2 * half, 1))
            for _ in range(st.n_steps):
                z = rng.standard_normal((half, d))
                paths = paths - eta * gradient(paths) + sd * np.concatenate([z, -z])
            end += float(np.sum(w[sel])) * paths.mean(axis=0)
            cov += float(np.sum(w[sel] ** 2)) * np.cov(paths.T).reshape(d, d)
        theta = end
    return theta - lin.theta_star, cov


def _groups(n1: np.ndarray, n2: np.ndarray, max_groups: int = 12):
    """Client groups of equal (n1, n2), or beyond ``max_groups`` quantile bins of n2: (index per client, n2 per group)."""
    uniq, inv = np.unique(n2, return_inverse=True)
    if uniq.size <= max_groups:
        return inv.ravel(), uniq.astype(np.float64)
    edges = np.quantile(n2, np.linspace(0, 1, max_groups + 1))
    inv = np.clip(np.searchsorted(edges, n2, side="right") - 1, 0, max_groups - 1)
    inv = np.searchsorted(np.unique(inv), inv)
    return inv, np.array([n2[inv == g].mean() for g in range(inv.max() + 1)])


def newton_moments(lin, out1, stages, policy, sizes, w, clip: float, hessian_clip: float | None, seed, *,
                   n_outer: int = 256, n_inner: int = 256) -> tuple[dict, list[str], dict]:
    """Second-moment pieces of theta_New - theta* (see the module docstring).

    Returns ``(out, caveats, diagnostics)`` with ``out`` in the format of ``_engine.propagate``: the mean of
    the step's error in ``drift``; its variance over the FedAvg stage's end points split between ``sampling``
    and ``privacy`` in proportion to that stage's parts; the step's own data and noise variances added to them.
    """
    d = lin.H.shape[0]
    n = np.asarray(sizes, dtype=np.float64)
    n1 = np.floor(n / 2)
    n2 = n - n1
    mu_stage = policy.budgets[2]
    tr_s, tr_p = np.trace(out1["sampling"]), np.trace(out1["privacy"])
    share = tr_s / (tr_s + tr_p) if tr_s + tr_p > 0 else 1.0
    rng = np.random.default_rng(seed)
    mean1, cov1 = _stage_one(lin, stages, n1, w, rng)
    rows = _Rows(lin, STEP_ROWS)
    e1 = mean1 + _matched_normals(rng, n_outer, d) @ _sqrtm(cov1).T
    a2, a1, a3 = float(np.sum(w**2 / n2)), float(np.sum(w / n1)), float(np.sum(w**2 / n1))
    a23 = float(np.sum(w**2 / (n1 * n2)))
    projected = np.isfinite(policy.grad_clip)
    if projected:
        group, n2g = _groups(n1, n2)
        wg = np.bincount(group, weights=w)
        w2g = np.bincount(group, weights=w**2)
        zx = _matched_normals(rng, n_inner, d)
    n_total = float(n.sum())
    resid, data, noise_var, floored, ch = [], np.zeros((d, d)), 0.0, 0, []
    search = policy.hessian_search(float(n.sum()), n.size) if policy.research else None
    release = vec_to_sym(rng.standard_normal((n_outer, d * (d + 1) // 2)), d)  # the release's noise, sd 1
    for start in range(0, n_outer, CHUNK):
        gs, Ss, k2s = rows.at(lin.theta_star + e1[start:start + CHUNK])
        for b in range(gs.shape[0]):
            g, S, k2 = gs[b], Ss[b], k2s[:, b]
            if policy.paper:  # each client's own first-half Hessian, floored only for invertibility
                H = rows.hessian(k2, np.inf)
                Mi = np.linalg.inv(policy.newton_matrix(H, 0.0)[0])
                sens = policy.sensitivity(clip, np.nan, n)
            else:  # the shared release: C_H where the fit finds it, the release's noise, the policy's floor
                C = hessian_clip
                if search is not None:
                    norms = np.sort(k2 * rows.xnorm2)
                    C = search(lambda t, s=norms: n_total * np.searchsorted(s, t, side="right") / s.size)
                ch.append(C)
                sd = policy.hessian_sd(C, n, w)
                H = rows.hessian(k2, C) + sd * release[start + b]
                Hf, lam = policy.newton_matrix(H, sd)
                low = float(np.linalg.eigvalsh(Hf)[0])
                floored += int(np.linalg.eigvalsh((H + H.T) / 2)[0] < lam)
                Mi = np.linalg.inv(Hf)
                sens = policy.sensitivity(clip, low, n)
            noise_var += float(np.sum(w**2 * calibrated_sigma(sens, mu_stage) ** 2))
            if projected:
                grads = g + zx[None, :, :] @ np.stack([_sqrtm(S / v).T for v in n2g])  # (groups, n_inner, d)
                norm = np.linalg.norm(grads, axis=2, keepdims=True)
                grads = grads * np.minimum(1.0, policy.grad_clip / np.maximum(norm, 1e-300))
                mg = grads.mean(axis=1)
                step = Mi @ (wg @ mg)
                cov = np.einsum("g,gij->ij", w2g, np.einsum("gai,gaj->gij", grads, grads) / n_inner
                                - np.einsum("gi,gj->gij", mg, mg))
                data += Mi @ cov @ Mi.T
            elif policy.paper:  # E[H_i^-1] and the variance the clients' Hessians add, to O(1/n1_i)
                hv = rows.hess_var(k2, H, Mi)
                step = (Mi + a1 * Mi @ hv @ Mi) @ g
                base = Mi @ S @ Mi
                cross = Mi @ hv @ base
                data += (a2 * base + a23 * (Mi @ rows.hess_var(k2, H, base) @ Mi + cross + cross.T)
                         + a3 * Mi @ rows.hess_var(k2, H, Mi @ np.outer(g, g) @ Mi) @ Mi)
            else:
                step = Mi @ g
                data += a2 * Mi @ S @ Mi
            resid.append(e1[start + b] - step)
    resid = np.asarray(resid)
    r_mean = resid.mean(axis=0)
    r_cov = np.cov(resid.T, bias=True).reshape(d, d)
    out = {"sampling": data / n_outer + share * r_cov,
           "privacy": noise_var / n_outer * np.eye(d) + (1 - share) * r_cov,
           "optimisation": np.zeros(d), "drift": r_mean, "contraction": out1["contraction"]}
    caveats = []
    if floored > 0.05 * n_outer:
        caveats.append(f"the eigenvalue floor is active in {100 * floored / n_outer:.0f}% of the draws of the "
                       "released Hessian: the Newton step is damped there and part of e_1 survives.")
    diagnostics = {"newton_noise_sd": float(np.sqrt(noise_var / n_outer))}  # per coordinate, of the average
    if ch:
        diagnostics["newton_hessian_clip"] = float(np.median(ch))
    return out, caveats, diagnostics
