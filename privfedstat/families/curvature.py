"""Public curvature rules of a family: the step size ``eta = 1 / L`` and FedNewton's eigenvalue floor.

Both are functions of the family's data-independent curvature constants
(:attr:`Family.max_curvature`, :attr:`Family.curvature_at_zero`), the number of columns and mu only,
so they cost no privacy budget. The estimators resolve their ``"auto"`` settings with them and the
MSE predictor (:mod:`privfedstat.theory`) resolves the same settings the same way.
"""

from __future__ import annotations

import math

import numpy as np

from .base import Family

__all__ = ["auto_step_size", "resolve_hessian_floor", "UNBOUNDED_CURVATURE_AT"]

#: Linear predictor at which ``step_size="auto"`` evaluates the curvature of a family whose
#: curvature is unbounded (Poisson: ``ell''(1) = e``, i.e. fitted means up to e on average).
UNBOUNDED_CURVATURE_AT = 1.0


def auto_step_size(family: Family, n_features: int) -> float:
    """The public step size ``eta = 1 / L`` of ``step_size="auto"``.

    The Hessian of the (size-weighted, clipped or not) empirical loss is
    ``sum_i w_i mean_j ell''(y_j, x_j^T theta) x_j x_j^T`` (for the multinomial family the factor
    ``ell''`` is the matrix ``diag(p) - p p^T``), so its largest eigenvalue is at most
    ``L = kappa * mean_j ||x_j||^2`` with ``kappa = sup ell''`` (:attr:`Family.max_curvature`:
    logistic 1/4, Gaussian and Huber 1, multinomial 1/2; clipping a per-sample gradient is a
    projection and does not increase it). For columns on the unit scale (standardised, as
    ``scaling="private"`` and ``glm()`` make them, each column's mean square is about 1)
    ``mean ||x||^2 <= d``, the number of columns, so ``L = kappa d`` uses only public quantities
    and gradient descent with ``eta = 1 / L`` decreases the loss at every step (descent lemma).
    Families with unbounded curvature (Poisson) use ``ell''`` at linear predictor
    :data:`UNBOUNDED_CURVATURE_AT` instead (fitted means up to e on average); if that is too
    optimistic the iterates blow up and :class:`~privfedstat.DivergenceError` says so.
    The bound ``tr >= lambda_max`` is loose by up to a factor d on uncorrelated designs
    (slower, never unstable); on collinear designs it is nearly tight.

    Parameters
    ----------
    family : Family
    n_features : int
        d, the number of columns of the (scaled) design, intercept included.

    Returns
    -------
    float
    """
    kappa = float(family.max_curvature)
    if not math.isfinite(kappa):
        z = np.full(1, UNBOUNDED_CURVATURE_AT)
        kappa = float(family.deriv2(np.zeros(1), z)[0])
    return 1.0 / (kappa * n_features)


def resolve_hessian_floor(value: float | str, family: Family, mu: float) -> float:
    """FedNewton's eigenvalue floor lambda: ``value``, or for ``"auto"`` the family's ``curvature_at_zero``.

    With ``mu`` infinite the ``"auto"`` floor is 1e-8 of ``curvature_at_zero``: it then only keeps
    the Hessian invertible (no sensitivity needs bounding, and a high floor would damp the step).

    Parameters
    ----------
    value : float or "auto"
        The estimator's ``hessian_floor``.
    family : Family
    mu : float
        GDP budget per client (inf: no privacy).

    Returns
    -------
    float
    """
    if value != "auto":
        return float(value)
    return float(family.curvature_at_zero) * (1e-8 if math.isinf(mu) else 1.0)
