"""Multinomial (softmax) logistic regression: a family with a parameter matrix.

Identifiability: class 0 is the reference (its linear predictor is fixed at 0), as in
statsmodels' ``MNLogit``. The parameter is a matrix Theta of shape (d, K - 1); estimators keep it
flattened in C order (``Theta.ravel()``), so element (j, k) sits at ``j * (K - 1) + k``.

Per sample, with ``z = x^T Theta`` (K - 1 values) and ``p_k = e^{z_k} / (1 + sum_l e^{z_l})``:

* loss ``ell(y, z) = log(1 + sum_k e^{z_k}) - z_y`` (``z_0 = 0``);
* gradient in Theta: ``x r^T`` with ``r = p - e_y`` (``e_0 = 0``), so its norm is ``||r|| ||x||``
  and per-sample clipping again needs no per-sample gradient matrix;
* Hessian: ``(diag(p) - p p^T) kron x x^T``, Frobenius norm ``||diag(p) - p p^T||_F ||x||^2``.
"""

from __future__ import annotations

import numpy as np

from .base import Family

__all__ = ["Multinomial"]


class Multinomial(Family):
    """Multinomial logistic regression with K classes (labels 0, ..., K - 1; class 0 is the reference).

    Parameters
    ----------
    n_classes : int
        Number of classes K >= 2. It must be given (it is part of the public model specification;
        inferring it from the labels would release a data-dependent quantity).
    """

    name = "multinomial"
    link = "logit"  # generalised: log(p_k / p_0) = z_k
    likelihood = True
    response_levels = True
    code = 4

    def __init__(self, n_classes: int | None = None) -> None:
        if n_classes is None:
            raise ValueError("the multinomial family needs n_classes, e.g. get_family('multinomial', n_classes=10).")
        if isinstance(n_classes, bool) or not isinstance(n_classes, (int, np.integer)) or n_classes < 2:
            raise ValueError(f"n_classes must be an integer >= 2, got {n_classes!r}.")
        self.n_classes = int(n_classes)
        self.param = float(n_classes)
        self.curvature_at_zero = 1.0 / self.n_classes  # smallest eigenvalue scale of diag(p) - p p^T at p = 1/K
        self.max_curvature = 0.5  # lambda_max(diag(p) - p p^T) <= 1/2: Gershgorin, row k sums to 2 p_k (1 - p_k)

    @property
    def n_outputs(self) -> int:
        """Columns of the parameter matrix (K - 1)."""
        return self.n_classes - 1

    def _full(self, Z: np.ndarray) -> np.ndarray:
        Z = np.asarray(Z, dtype=np.float64)
        Z = Z.reshape(-1, self.n_outputs) if Z.ndim < 2 else Z  # K = 2: one predictor per row, a flat (n,) array
        return np.concatenate([np.zeros((Z.shape[0], 1)), Z], axis=1)

    def loss(self, y, Z):
        """Per-sample loss for linear predictors ``Z`` of shape (n, K - 1)."""
        from scipy.special import logsumexp  # scipy.special: imported here, not at module level (slow to import)

        F = self._full(Z)
        return logsumexp(F, axis=1) - F[np.arange(F.shape[0]), np.asarray(y, dtype=np.int64)]

    def mean(self, Z):
        """Class probabilities, shape (n, K)."""
        F = self._full(Z)
        F = F - F.max(axis=1, keepdims=True)
        E = np.exp(F)
        return E / E.sum(axis=1, keepdims=True)

    @property
    def class_labels(self):
        return np.arange(float(self.n_classes))

    def class_probabilities(self, Z):
        return self.mean(Z)

    def predict_class(self, Z):
        return np.argmax(self.mean(Z), axis=1).astype(np.float64)

    def simulate(self, Z, rng, scale=None):
        """Categorical draws: the number of cumulative class probabilities below one uniform per row
        (``rng.random((n, 1))``)."""
        P = self.mean(Z)
        y = np.sum(rng.random((P.shape[0], 1)) > np.cumsum(P, axis=1), axis=1)
        return np.minimum(y, self.n_classes - 1).astype(np.float64)  # rounding of the cumulative sum

    def residual(self, y, Z):
        """``p - e_y`` for classes 1..K-1, shape (n, K - 1): the gradient is ``x r^T``."""
        P = self.mean(Z)[:, 1:]
        y = np.asarray(y, dtype=np.int64)
        R = P.copy()
        rows = np.flatnonzero(y > 0)
        R[rows, y[rows] - 1] -= 1.0
        return R

    def curvature(self, Z):
        """Per-sample ``diag(p) - p p^T`` over classes 1..K-1, shape (n, K - 1, K - 1)."""
        P = self.mean(Z)[:, 1:]
        C = -P[:, :, None] * P[:, None, :]
        k = np.arange(P.shape[1])
        C[:, k, k] += P
        return C

    def check_y(self, y):
        bad = (y < 0) | (y >= self.n_classes) | (y != np.floor(y))
        if np.any(bad):
            raise ValueError(
                f"multinomial family with {self.n_classes} classes needs labels 0..{self.n_classes - 1}; "
                f"found {int(bad.sum())} row(s) with another value."
            )

    def __repr__(self) -> str:
        return f"Multinomial(n_classes={self.n_classes})"
