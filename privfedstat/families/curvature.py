"""Public curvature rules of a family: the step size ``eta = 1 / L``, FedNewton's eigenvalue floor and tau_1.

Both are functions of the family's data-independent curvature constants
(:attr:`Family.max_curvature`, :attr:`Family.curvature_at_zero`), the number of columns and mu only,
so they cost no privacy budget. The estimators resolve their ``"auto"`` settings with them and the
MSE predictor (:mod:`privfedstat.theory`) resolves the same settings the same way.
"""

from __future__ import annotations

import math

import numpy as np

from .base import Family

__all__ = ["auto_step_size", "resolve_hessian_floor", "resolve_tau1", "UNBOUNDED_CURVATURE_AT", "INVERTIBILITY_FLOOR",
           "TAU1_SHARE", "MIN_RELEASED_FLOOR"]

#: Linear predictor at which ``step_size="auto"`` evaluates the curvature of a family whose
#: curvature is unbounded (Poisson: ``ell''(1) = e``, i.e. fitted means up to e on average).
UNBOUNDED_CURVATURE_AT = 1.0


def auto_step_size(family: Family, n_features: int, square_norm: float | None = None) -> float:
    """The public step size ``eta = 1 / L`` of ``step_size="auto"``.

    The Hessian of the (size-weighted, clipped or not) empirical loss is
    ``sum_i w_i mean_j ell''(y_j, x_j^T theta) x_j x_j^T`` (for the multinomial family the factor
    ``ell''`` is the matrix ``diag(p) - p p^T``), so its largest eigenvalue is at most
    ``L = kappa * mean_j ||x_j||^2`` with ``kappa = sup ell''`` (:attr:`Family.max_curvature`:
    logistic 1/4, Gaussian and Huber 1, multinomial 1/2; clipping a per-sample gradient is a
    projection and does not increase it). ``mean ||x||^2`` is ``square_norm`` where the fit's
    rescaling gives one (:meth:`~privfedstat.fitting.scaling.Scaler.square_norm`: a private scale, the 90%
    quantile of ``|x_j - c_j|``, leaves a column a mean square of about ``1 / z_0.95^2 = 0.37``, not 1),
    and otherwise ``d``, the number of columns, for columns on the unit scale (each column's mean square at
    most 1), so ``L`` uses only public quantities and gradient descent with ``eta = 1 / L`` decreases the
    loss at every step (descent lemma; see docs/algorithms/fedsgd.md, "The step on privately scaled columns").
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
    square_norm : float or None, default None
        A public bound on ``mean_j ||x_j||^2`` on the fitting scale; None: ``d``.

    Returns
    -------
    float
    """
    kappa = float(family.max_curvature)
    if not math.isfinite(kappa):
        z = np.full(1, UNBOUNDED_CURVATURE_AT)
        kappa = float(family.deriv2(np.zeros(1), z)[0])
    return 1.0 / (kappa * (n_features if square_norm is None else square_norm))


#: ``hessian_floor="auto"`` where no sensitivity needs bounding (mu = inf) and in Algorithm 4 as printed
#: (``newton_noise="paper"``): this multiple of ``ell''(0)``, only to keep the Hessian invertible
INVERTIBILITY_FLOOR = 1e-8
#: ``tau1="auto"``: this multiple of ``ell''(0)`` (see :func:`resolve_tau1`)
TAU1_SHARE = 0.5
#: the lowest released floor, as a multiple of ``ell''(0)`` (see :func:`~privfedstat.privacy.calibration.released_floor`)
MIN_RELEASED_FLOOR = 0.01


def resolve_hessian_floor(value: float | str, family: Family, mu: float, newton_noise: str = "private") -> float | None:
    """FedNewton's eigenvalue floor lambda: ``value``, or what ``"auto"`` means; None when it is released.

    ``"auto"`` is :data:`INVERTIBILITY_FLOOR` times ``curvature_at_zero`` with ``mu`` infinite (no
    sensitivity needs bounding, and a high floor would damp the step) and for Algorithm 4 as printed
    (``newton_noise="paper"``: its noise is calibrated with ``tau1``, not the floor). Otherwise
    (private, finite mu) None: the floor is then derived from a private release of the clients'
    Hessians at the FedAvg point (:class:`~privfedstat.FedNewton`), so it follows the data's
    curvature instead of a family constant.

    Parameters
    ----------
    value : float or "auto"
        The estimator's ``hessian_floor``.
    family : Family
    mu : float
        GDP budget per client (inf: no privacy).
    newton_noise : {"private", "paper"}

    Returns
    -------
    float or None
    """
    if value != "auto":
        return float(value)
    if math.isinf(mu) or newton_noise == "paper":
        return INVERTIBILITY_FLOOR * float(family.curvature_at_zero)
    return None


def resolve_tau1(value: float | str, family: Family) -> float:
    """The strong-convexity constant tau_1 of Algorithm 4's calibration: ``value``, or for ``"auto"``
    :data:`TAU1_SHARE` times the family's ``curvature_at_zero`` (logistic 0.125, Poisson 0.5).

    tau_1 bounds the smallest eigenvalue of the population Hessian (Assumption 2). For columns on the
    unit scale that Hessian is ``E[ell''(x^T theta) x x^T]`` with ``ell''`` at most ``ell''(0)`` for
    logistic (it falls as ``|x^T theta|`` grows); half of it is a public guess below the curvature of
    moderate effects (the Fig. 5 design's eigenvalues at the truth are 0.13-0.21), not a bound that holds
    for any data, which is why ``newton_noise="paper"`` warns.
    """
    return float(value) if value != "auto" else TAU1_SHARE * float(family.curvature_at_zero)
