"""Damped Newton-Raphson for linear-predictor losses on raw (pooled or one client's) data.

Used by the non-private baselines :class:`~privfedstat.algorithms.PooledMLE` and
:class:`~privfedstat.algorithms.LocalFit`.
"""

from __future__ import annotations

import math

import numpy as np

from ..exceptions import DivergenceError
from ..families import Family

__all__ = ["newton_fit", "separated", "n_outputs"]

#: step halvings tried before a Newton iteration is declared stuck
MAX_HALVINGS = 50
#: eigenvalues below this fraction of the largest are treated as zero curvature
RCOND = 1e-12


def n_outputs(family: Family) -> int:
    return int(getattr(family, "n_outputs", 1))


def _eta(X, theta, q, offset) -> np.ndarray:
    """Linear predictor(s) ``X theta + o`` ((n,) for q = 1; (n, q) otherwise, where there is no offset)."""
    Z = X @ (theta if q == 1 else theta.reshape(X.shape[1], q))
    return Z if offset is None else Z + offset


def _objective(family: Family, X, y, theta, alpha, q, offset) -> float:
    return float(np.mean(family.loss(y, _eta(X, theta, q, offset))) + 0.5 * alpha * (theta @ theta))


def _grad_hess(family: Family, X, y, theta, alpha, q, offset) -> tuple[np.ndarray, np.ndarray]:
    """Gradient and Hessian of ``mean loss + alpha/2 ||theta||^2`` (theta flattened in C order)."""
    n, d = X.shape
    if q == 1:
        z = _eta(X, theta, q, offset)
        g = X.T @ family.deriv(y, z) / n
        H = (X.T * (family.deriv2(y, z) / n)) @ X
    else:  # parameter matrix (d, q): gradient X^T R, Hessian sum_s C_s kron x_s x_s^T
        Z = X @ theta.reshape(d, q)
        g = (X.T @ family.residual(y, Z) / n).ravel()
        C = family.curvature(Z)
        H4 = np.empty((d, q, d, q))
        for k in range(q):  # block (k, m) is X^T diag(C[:, k, m]) X; 50x faster than one einsum
            for m in range(k, q):
                block = (X.T * C[:, k, m]) @ X
                H4[:, k, :, m] = block
                H4[:, m, :, k] = block
        H = H4.reshape(d * q, d * q) / n
    if alpha:
        g = g + alpha * theta
        H = H + alpha * np.eye(H.shape[0])
    return g, H


def _newton_direction(H: np.ndarray, g: np.ndarray, design_scale) -> np.ndarray:
    """``H^{-1} g``; for a (near-)singular ``H``: pseudo-inverse on the curved directions plus a
    gradient step ``g / L`` on the flat ones (rank-deficient X, Huber with no residual inside the
    threshold), with ``L = max(lambda_max(H), design_scale())`` (``design_scale``: a callable
    giving lambda_max(X^T X / n), evaluated only here)."""
    import scipy.linalg  # here, not at module level: slow to import

    try:
        L, lower = scipy.linalg.cho_factor(H, lower=True, check_finite=False)
        piv = np.diag(L) ** 2
        if piv.min() > RCOND * piv.max():
            return scipy.linalg.cho_solve((L, lower), g, check_finite=False)
    except np.linalg.LinAlgError:
        pass
    vals, vecs = np.linalg.eigh(H)
    top = max(float(vals.max()), 0.0)
    curved = vals > RCOND * top if top > 0 else np.zeros(vals.size, dtype=bool)
    coef = vecs.T @ g
    lipschitz = max(top, design_scale())
    lipschitz = lipschitz if lipschitz > 0 else 1.0
    scale = np.where(curved, 1.0 / np.where(curved, vals, 1.0), 1.0 / lipschitz)
    return vecs @ (scale * coef)


def newton_fit(X: np.ndarray, y: np.ndarray, family: Family, *, alpha: float = 0.0, tol: float = 1e-10,
               max_iter: int = 100, where: str = "the fit",
               offset: np.ndarray | None = None) -> tuple[np.ndarray, list[np.ndarray], bool]:
    """Minimise ``mean_j ell(y_j, x_j^T theta + o_j) + alpha/2 ||theta||^2`` by damped Newton-Raphson.

    Starts at 0, or for families with ``start_at_least_squares`` (Huber) at the least-squares fit,
    where Newton on the piecewise-quadratic loss needs only a few steps, rather than at 0, where
    every residual may lie beyond the threshold and the Hessian vanishes. Each iteration takes the
    Newton step ``-H^{-1} g`` and halves it until the objective does not increase (up to rounding).
    Converged when the accepted step satisfies ``max|step| <= tol * (1 + max|theta|)``. A singular
    Hessian is handled by a pseudo-inverse (the minimum-norm step, as statsmodels' IRLS does with
    ``pinv``), with a gradient step on directions without curvature.

    Parameters
    ----------
    X : ndarray of shape (n, d)
    y : ndarray of shape (n,)
    family : Family
    alpha : float, default 0
        Ridge penalty on all coefficients (including an intercept column).
    tol : float, default 1e-10
    max_iter : int, default 100
    where : str
        Names the fit in error messages.
    offset : ndarray of shape (n,), optional
        Offsets ``o_j`` of the linear predictor (scalar-response families); None for none.

    Returns
    -------
    theta : ndarray of shape (d * q,)
        ``q`` = ``family.n_outputs`` (1 except for the multinomial family).
    path : list of ndarray
        Iterates theta^(0), ..., theta^(T).
    converged : bool

    Raises
    ------
    DivergenceError
        If the objective or the iterates become non-finite.
    """
    q = n_outputs(family)
    n, d = X.shape
    theta = np.zeros(d * q)
    if family.start_at_least_squares:
        theta = np.linalg.lstsq(np.vstack([X, math.sqrt(n * alpha) * np.eye(d)]),
                                np.concatenate([y if offset is None else y - offset, np.zeros(d)]), rcond=None)[0]
    path = [theta]
    f = _objective(family, X, y, theta, alpha, q, offset)
    cache: list[float] = []

    def design_scale() -> float:
        if not cache:
            cache.append(float(np.linalg.eigvalsh(X.T @ X / n).max()) + alpha)
        return cache[0]

    for _ in range(max_iter):
        g, H = _grad_hess(family, X, y, theta, alpha, q, offset)
        if not (np.all(np.isfinite(g)) and np.all(np.isfinite(H))):
            raise DivergenceError(f"Newton-Raphson diverged in {where}: non-finite gradient or Hessian. "
                                  "Standardise the covariates or set alpha > 0.")
        step = _newton_direction(H, g, design_scale)
        slack = 1e-13 * max(1.0, abs(f))
        t = 1.0
        for _ in range(MAX_HALVINGS):
            cand = theta - t * step
            fc = _objective(family, X, y, cand, alpha, q, offset)
            if math.isfinite(fc) and fc <= f + slack:
                break
            t *= 0.5
        else:  # no decrease along the Newton direction: at the optimum up to rounding, or stuck
            return theta, path, bool(np.max(np.abs(g)) <= math.sqrt(tol))
        theta, f = cand, fc
        path.append(theta)
        if not np.all(np.isfinite(theta)):
            raise DivergenceError(f"Newton-Raphson diverged in {where}: non-finite coefficients. Set alpha > 0.")
        if np.max(np.abs(t * step)) <= tol * (1.0 + np.max(np.abs(theta))):
            return theta, path, True
    return theta, path, False


def separated(family: Family, X, y, theta, q, offset=None) -> int:
    """Number of observations with fitted probabilities numerically 0 or 1 (classifier families)."""
    if family.class_labels is None:
        return 0
    P = family.class_probabilities(_eta(X, theta, q, offset))
    return int(np.sum(P.max(axis=1) > 1.0 - 1e-10))
