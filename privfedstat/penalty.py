"""The elastic-net penalty ``phi(x) = nu1 ||x||_1 + nu2 ||x||^2`` of the composite problems ``min f + phi``.

Pure functions of public quantities (the penalty's parameters and a point): the value, the proximal
map, the natural map and the proximal Newton step. The clients use the proximal map in their local
steps (:mod:`privfedstat.federation.clients`), the estimators in their server steps
(:mod:`privfedstat.algorithms.fednmap`), the diagnostics and metrics the natural map and the Newton
step.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from numbers import Real

import numpy as np

__all__ = ["ElasticNet"]


@dataclass(frozen=True, eq=False)
class ElasticNet:
    """``phi(x) = nu1 sum_{j in P} |x_j| + nu2 sum_{j in P} x_j^2`` over the penalised coordinates P.

    The scaling of glmnet and scikit-learn's ``ElasticNet``: with a penalty strength ``alpha`` and
    mixing ``l1_ratio`` (:meth:`from_alpha`), ``nu1 = alpha * l1_ratio`` and
    ``nu2 = alpha * (1 - l1_ratio) / 2``, so ``f + phi`` is the mean loss plus
    ``alpha (l1_ratio ||x||_1 + (1 - l1_ratio) ||x||^2 / 2)``.

    Parameters
    ----------
    l1 : float
        nu1 >= 0, the weight of the l1 norm.
    l2 : float
        nu2 >= 0, the weight of the squared l2 norm (not halved: the paper's ``nu2 ||x||^2``).
    mask : ndarray of bool of shape (n_params,)
        True for the penalised coordinates (an intercept is not penalised).
    """

    l1: float
    l2: float
    mask: np.ndarray

    def __post_init__(self) -> None:
        for name in ("l1", "l2"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, Real) or not (math.isfinite(value) and value >= 0):
                raise ValueError(f"the penalty's {name} weight must be a finite number >= 0, got {value!r}.")
        mask = np.asarray(self.mask)
        if mask.dtype != bool or mask.ndim != 1:
            raise ValueError(f"the penalty's mask must be a 1-d boolean array, got {mask.dtype} of shape {mask.shape}.")
        object.__setattr__(self, "mask", mask.copy())

    @classmethod
    def from_alpha(cls, alpha: float, l1_ratio: float, mask: np.ndarray) -> ElasticNet:
        """The penalty ``alpha (l1_ratio ||x||_1 + (1 - l1_ratio) ||x||^2 / 2)`` (glmnet's and scikit-learn's scaling)."""
        return cls(float(alpha) * float(l1_ratio), float(alpha) * (1.0 - float(l1_ratio)) / 2.0, mask)

    def value(self, x: np.ndarray) -> float:
        """phi(x)."""
        v = np.asarray(x, dtype=np.float64)[self.mask]
        return float(self.l1 * np.sum(np.abs(v)) + self.l2 * np.sum(v * v))

    def prox(self, z: np.ndarray, step: float) -> np.ndarray:
        """``prox_{step phi}(z) = sign(z) max(|z| - step nu1, 0) / (1 + 2 step nu2)`` on the penalised coordinates.

        ``z`` of shape (..., n_params) (one point per row); the other coordinates are left as they
        are; ``step = 0`` is the identity.
        """
        out = np.array(z, dtype=np.float64)
        whole = bool(self.mask.all())  # a network's every weight: in place, no gather / scatter of millions
        v = out if whole else out[..., self.mask]
        shrunk = np.maximum(np.abs(v) - step * self.l1, 0.0)
        np.copysign(shrunk, v, out=shrunk)  # = sign(v) * shrunk (shrunk >= 0)
        if self.l2:
            shrunk /= 1.0 + 2.0 * step * self.l2
        shrunk += 0.0  # a thresholded coefficient is 0, not -0
        if whole:
            return shrunk
        out[..., self.mask] = shrunk
        return out

    def natural_map(self, x: np.ndarray, gradient: np.ndarray, gamma: float) -> np.ndarray:
        """``F_nat^gamma(x) = (x - prox_{gamma phi}(x - gamma grad f(x))) / gamma``.

        It is 0 exactly at the stationary points of f + phi.
        """
        x = np.asarray(x, dtype=np.float64)
        return (x - self.prox(x - gamma * np.asarray(gradient, dtype=np.float64), gamma)) / gamma

    def newton_step(self, x: np.ndarray, gradient: np.ndarray, hessian: np.ndarray, *, tol: float = 1e-13,
                    max_sweeps: int = 10_000) -> np.ndarray:
        """The proximal Newton step ``s = argmin_s g^T s + s^T H s / 2 + phi(x + s)``, by cyclic coordinate descent.

        For a convex f near its composite optimum ``x*``, ``x + s`` approximates ``x*`` as the
        Newton step does without a penalty (``-H^-1 g``). Coordinate j minimises exactly over
        ``u_j = x_j + s_j``: ``u_j <- prox_{phi_j / H_jj}(u_j - r_j / H_jj)``, ``r = g + H s``; the
        sweeps stop when no coordinate moves by more than ``tol (1 + max |u|)``.

        Parameters
        ----------
        x, gradient : ndarray of shape (n_params,)
        hessian : ndarray of shape (n_params, n_params)
            Positive definite.

        Returns
        -------
        ndarray of shape (n_params,)
            NaN where H has a non-positive diagonal entry.
        """
        x = np.asarray(x, dtype=np.float64)
        H = np.asarray(hessian, dtype=np.float64)
        diag = np.diag(H)
        if np.any(diag <= 0):
            return np.full(x.shape, np.nan)
        u, r = x.copy(), np.asarray(gradient, dtype=np.float64).copy()
        l1 = np.where(self.mask, self.l1, 0.0) / diag
        shrink = 1.0 + 2.0 * np.where(self.mask, self.l2, 0.0) / diag
        for _ in range(max_sweeps):
            biggest = 0.0
            for j in range(u.size):
                v = u[j] - r[j] / diag[j]
                new = math.copysign(max(abs(v) - l1[j], 0.0), v) / shrink[j]
                move = new - u[j]
                if move != 0.0:
                    r += H[:, j] * move
                    u[j] = new
                    biggest = max(biggest, abs(move))
            if biggest <= tol * (1.0 + float(np.max(np.abs(u)))):
                break
        return u - x
