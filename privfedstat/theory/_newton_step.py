"""Moments of FedNewton's private Newton step given the moments of its FedAvg stage.

Client i moves from the common theta_1 = theta* + e_1 by ``-Ht_i^-1 proj_{G_i}(g_i)`` plus noise,
where g_i = psi_i2(theta_1) ~ H e_1 + T[e_1, e_1]/2 + xi_i is its mean clipped gradient on the second
half, xi_i = psi_i2(theta*) + D_i2 e_1 with covariance (Sigma + E[(Hdot - H) e_1 e_1^T (Hdot - H)])/n2_i,
and proj_G shortens vectors longer than G (the private calibration of the estimator).

Without projection (G = inf) the moments are computed in closed form. With a finite G the mean and
covariance of the projected gradient are computed by Monte Carlo over moment-matched Gaussian draws
of e_1 (from the FedAvg-stage prediction) and xi (per client group); the draws have exactly the
target mean and covariance, so the unprojected parts carry no Monte-Carlo error.
"""

from __future__ import annotations

import numpy as np

__all__ = ["newton_moments"]


def _matched_normals(rng, n: int, d: int) -> np.ndarray:
    z = rng.standard_normal((max(1, n // 2), d))
    z = np.concatenate([z, -z])
    L = np.linalg.cholesky(z.T @ z / z.shape[0])
    return np.linalg.solve(L, z.T).T


def _sqrtm(C: np.ndarray) -> np.ndarray:
    ev, vec = np.linalg.eigh((C + C.T) / 2)
    return vec * np.sqrt(np.clip(ev, 0.0, None))


def _curv(lin, E):
    """T:E, E of shape (..., d, d) -> (..., d)."""
    Et = lin.U.T @ E @ lin.U
    return np.einsum("ljk,...jk->...l", lin.T3, Et)


def _hess_var(lin, Q):
    """E[(Hdot - H) Q (Hdot - H)] with Hdot the per-sample clipped-score Jacobian k2 x x^T."""
    X = lin.pop.X
    q = np.einsum("nj,jk,nk->n", X, Q, X)
    return (X * (lin.k22 * q)[:, None]).T @ X / lin.pop.n - lin.H @ Q @ lin.H


def _inverse_sandwich(lin, Hti, S, n1):
    """E[Ht_i^-1 S Ht_i^-1] for a local Newton matrix Ht_i = Ht + Delta, Cov(Delta) from n1 samples.

    Second-order expansion of the inverse, H^-1 - H^-1 D H^-1 + H^-1 D H^-1 D H^-1:
    Ht^-1 S Ht^-1 + (1/n1) [Ht^-1 hv(Ht^-1 S Ht^-1) Ht^-1 + 2 sym(Ht^-1 hv(Ht^-1) Ht^-1 S Ht^-1)], with
    hv(A) = E[(Hdot - H) A (Hdot - H)] (for d = 1 and Hdot ~ chi^2_1 this is the exact 1 + 6/n of
    E[(chi^2_n/n)^-2]).
    """
    base = Hti @ S @ Hti
    cross = Hti @ _hess_var(lin, Hti) @ base
    return base + (Hti @ _hess_var(lin, base) @ Hti + cross + cross.T) / n1


def newton_moments(lin, out1, w, n1, n2, Ht, G, noise_var, seed, *, n_outer: int = 1000, n_inner: int = 400,
                   max_groups: int = 12) -> tuple[dict, list[str]]:
    """Second-moment pieces of theta_New - theta* (see the module docstring).

    Returns ``(out, caveats)`` with ``out`` in the format of ``_engine.propagate``: the stage-1 error
    surviving the Newton step is split between ``sampling`` and ``privacy`` in proportion to the
    stage-1 traces; its mean goes to ``optimisation`` (the transported error of the noise-free path)
    and ``drift`` (the rest, including the curvature term) -- with a finite G all of it to ``drift``.
    """
    H, Sigma = lin.H, lin.Sigma
    d = H.shape[0]
    Hti = np.linalg.inv(Ht)
    mean1 = out1["optimisation"] + out1["drift"]
    cov1 = out1["sampling"] + out1["privacy"]
    E1 = cov1 + np.outer(mean1, mean1)
    tr_s, tr_p = np.trace(out1["sampling"]), np.trace(out1["privacy"])
    share = tr_s / (tr_s + tr_p) if tr_s + tr_p > 0 else 1.0
    caveats: list[str] = []
    MD = _hess_var(lin, E1)
    newton_noise = float(np.sum(w**2 * noise_var)) * np.eye(d)
    if np.all(np.isinf(G)):
        PN = np.eye(d) - Hti @ H
        data = (sum(float(np.sum(w[n1 == v] ** 2 / n2[n1 == v])) * _inverse_sandwich(lin, Hti, Sigma, v)
                    for v in np.unique(n1))
                + float(np.sum(w**2 * (1 / n1 + 1 / n2))) * Hti @ MD @ Hti)
        resid = PN @ cov1 @ PN.T
        out = {"sampling": data + share * resid, "privacy": newton_noise + (1 - share) * resid,
               "optimisation": PN @ out1["optimisation"],
               "drift": PN @ out1["drift"] - 0.5 * Hti @ _curv(lin, E1), "contraction": out1["contraction"]}
        return out, caveats
    rng = np.random.default_rng(seed)
    e1 = mean1 + _matched_normals(rng, n_outer, d) @ _sqrtm(cov1).T
    zx = _matched_normals(rng, n_inner, d)
    e_t = e1 @ lin.U
    center = e1 @ H.T + 0.5 * np.einsum("ljk,nj,nk->nl", lin.T3, e_t, e_t)  # (n_outer, d)
    # client groups: identical (n1, n2, G); beyond max_groups, quantile bins of n2 with mean values
    keys = np.stack([n1, n2, G], axis=1)
    uniq, inv = np.unique(keys, axis=0, return_inverse=True)
    inv = inv.ravel()
    if uniq.shape[0] > max_groups:
        edges = np.quantile(n2, np.linspace(0, 1, max_groups + 1))
        inv = np.clip(np.searchsorted(edges, n2, side="right") - 1, 0, max_groups - 1)
        present = np.unique(inv)
        inv = np.searchsorted(present, inv)
        uniq = np.array([[n1[inv == g].mean(), n2[inv == g].mean(), G[inv == g].mean()] for g in range(present.size)])
    mu_agg = np.zeros((n_outer, d))
    C_agg = np.zeros((d, d))
    pp_mismatch = np.zeros((d, d))
    projected = 0.0
    inflation = np.zeros((d, d))
    for g, (g1, g2, Gg) in enumerate(uniq):
        sel = inv == g
        wg, w2g = float(np.sum(w[sel])), float(np.sum(w[sel] ** 2))
        xi = zx @ _sqrtm((Sigma + MD) / g2).T  # (n_inner, d)
        grad = center[:, None, :] + xi[None, :, :]
        norm = np.linalg.norm(grad, axis=2, keepdims=True)
        fac = np.minimum(1.0, Gg / np.maximum(norm, 1e-300))
        p = grad * fac
        projected += float(np.sum(w[sel])) * float(np.mean(fac < 1))
        mu_g = p.mean(axis=1)
        mu_agg += wg * mu_g
        pp = np.einsum("abi,abj->ij", p, p) / (n_outer * n_inner)
        C_agg += w2g * (pp - mu_g.T @ mu_g / n_outer)
        pp_mismatch += float(np.sum(w[sel] ** 2 / n1[sel])) * pp
        inflation += w2g * (_inverse_sandwich(lin, Hti, Sigma, g1) - Hti @ Sigma @ Hti) / g2
    resid = e1 - mu_agg @ Hti.T
    r_mean = resid.mean(axis=0)
    r_cov = np.cov(resid.T, bias=True).reshape(d, d)
    Q = Hti @ pp_mismatch @ Hti
    data = Hti @ C_agg @ Hti + Hti @ _hess_var(lin, Q) @ Hti + inflation
    out = {"sampling": data + share * r_cov, "privacy": newton_noise + (1 - share) * r_cov,
           "optimisation": np.zeros(d), "drift": r_mean, "contraction": out1["contraction"]}
    if projected > 0.05:
        caveats.append(f"the Newton gradient is projected onto the ball of radius G_i in {100 * projected:.0f}% of "
                       "the (weighted) draws; the projection is modelled by Monte Carlo over Gaussian e_1.")
    return out, caveats
