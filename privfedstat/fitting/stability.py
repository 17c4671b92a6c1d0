"""Whether a gradient protocol's step can be stable, from public quantities only (derivations:
docs/guide/convergence.md, "A step the public bound does not show stable" and "A step too large for the start's
curvature").

A gradient step multiplies the error along the Hessian's top eigenvector by ``1 - eta lambda_max``. Two public bounds
on ``lambda_max`` judge a step: from above, ``L = kappa mean ||x||^2`` (the bound behind ``step_size="auto"``), so a
step ``eta <= 2 / L`` is stable everywhere (:func:`stable_step`); from below at the path's start ``theta_0 = 0``,
``ell''(0)`` times the largest column mean square (:func:`start_curvature`), so a step above ``2`` over it cannot be
stable there (:func:`start_unstable`). :mod:`~privfedstat.fitting.verdict` raises where the latter meets a released
curvature within noise of zero; :func:`unjudged` warns where nothing is released at the estimate.
"""

from __future__ import annotations

import numpy as np

from .._warn import warn
from ..exceptions import ConvergenceWarning
from ..families.curvature import auto_step_size

__all__ = ["gradient_steps", "stable_step", "start_curvature", "column_scale", "start_unstable", "columns", "unjudged"]


def gradient_steps(noise_model) -> bool:
    """Whether the protocol moves by gradient steps of a step size (its noise model has an ``error_transport``:
    FedSGD, FedHybrid, FedAvg, SCAFFOLD), whose path a too large step sends back and forth or away."""
    return getattr(noise_model, "error_transport", None) is not None


def stable_step(est) -> float:
    """``2 / L``, the largest gradient step that the public bound ``L >= lambda_max(H)`` shows stable anywhere: ``L``
    is the bound behind ``step_size="auto"`` (``1 / L``, :func:`~privfedstat.families.curvature.auto_step_size`),
    ``kappa`` times the fitting scale's public mean squared row norm (the rescaling's, else d for columns on the unit
    scale); a step multiplies the error along the top eigenvector by ``1 - eta lambda_max`` (docs/guide/convergence.md)."""
    scaler = getattr(est, "scaler_", None)
    return 2.0 * auto_step_size(est.family_, est.n_features_in_, None if scaler is None else scaler.square_norm())


def columns(est) -> str:
    """The scale the public curvature bound assumes of the fitting scale's columns, in words."""
    return "privately scaled columns" if getattr(est, "scaler_", None) is not None else "columns on the unit scale"


def start_unstable(est, eta: float) -> str:
    """Why a gradient step ``eta`` could not be stable at the path's start ``theta_0 = 0`` (each step there multiplies
    the error along the top eigenvector by ``|1 - eta lambda_max(H(0))|``, above 1 where ``eta`` times
    :func:`start_curvature` exceeds 2), in words; "" where it could be."""
    start = start_curvature(est)
    if eta * start <= 2.0:
        return ""
    if _intercept(est):
        where = (f"the curvature along the intercept is the family's {start:.3g} (public: every row's fitted value is 0 "
                 "there)")
    else:
        scale = ("the rescaling's" if getattr(est, "scaler_", None) is not None else
                 "the unit scale that the public bound assumes; if the columns are far below it, standardise them")
        where = (f"every row's fitted value is 0, so the largest curvature is at least the family's "
                 f"{start / column_scale(est):.3g} times the largest column mean square, {column_scale(est):.3g} "
                 f"({scale})")
    return (f"at its start, theta = 0, {where}, so each gradient step there multiplied the error along the top "
            f"eigenvector by at least {eta * start - 1.0:.3g} (no step above 2 / {start:.3g} = {2.0 / start:.3g} is "
            "stable there): its first steps threw the path out")


def start_curvature(est) -> float:
    """A lower bound on the largest eigenvalue of the loss's Hessian at the path's start ``theta_0 = 0``, for a
    canonical GLM (its curvature depends on the linear predictor only, ``family.likelihood``) with no offset and no
    initial value: there every row's linear predictor is 0, so ``H(0) = ell''(0) (x) Sigma`` (:func:`_top_at_zero`) with
    ``Sigma = sum_i w_i mean_j x_j x_j^T`` and ``lambda_max(Sigma) >= max_k Sigma_kk``, the largest column mean
    square: 1 for a formula's ``Intercept`` (a column of ones: public whatever the data), else the largest that the
    fit's public scale gives a column (:func:`column_scale`); 0 where the family or the start rule it out
    (docs/guide/convergence.md)."""
    family = getattr(est, "family_", None)
    if (family is None or not family.likelihood or getattr(est, "has_offset_", True)
            or getattr(est, "init", None) is not None):
        return 0.0
    return _top_at_zero(family) * (1.0 if _intercept(est) else column_scale(est))


def _top_at_zero(family) -> float:
    """The largest eigenvalue of ``ell''`` at a zero linear predictor: the family's curvature at 0 for one predictor
    per row; for the multinomial (K - 1 predictors, class 0 the reference) that of ``diag(p) - p p^T`` at
    ``p = 1 / K``, ``1 / K`` for K > 2 and ``1 / 4`` for K = 2. ``H(0) = ell''(0) (x) Sigma``
    then has the product of the two largest eigenvalues as its own."""
    if family.name == "multinomial":
        return 1.0 / family.n_classes if family.n_classes > 2 else 0.25
    return float(family.curvature_at_zero) if family.n_outputs == 1 else 0.0


def _intercept(est) -> bool:
    """Whether the design has a public column of ones (a formula's ``Intercept``)."""
    names = getattr(est, "feature_names_in_", None)
    return names is not None and "Intercept" in list(names)


def column_scale(est) -> float:
    """The largest column mean square on the fitting scale that the fit's public scale gives: the rescaling's
    (:attr:`~privfedstat.fitting.scaling.Scaler.mean_square`: 1 for the intercept and a column left as it is),
    else 1, the unit scale that ``step_size="auto"`` assumes of every column."""
    scaler = getattr(est, "scaler_", None)
    return 1.0 if scaler is None else float(np.max(scaler.mean_square))


def unjudged(est, noise_model, converged):
    """``converged_`` of a private fit that releases no score at its estimate (``inference=None``, or the bootstrap):
    False, with a ConvergenceWarning, where a gradient protocol's step could not be stable at its start
    (:func:`start_unstable`), since then nothing released shows that its path settled (its released updates and
    gradients are noise-dominated draws scaled by the step, whatever it is); else ``converged`` as it was. Not a
    ``DivergenceError``: a path thrown out at the start can settle where the curvature is smaller, and without a release
    at the estimate nothing shows whether it did (docs/guide/convergence.md)."""
    if not gradient_steps(noise_model) or converged is False:
        return converged
    eta = float(getattr(noise_model, "step_size", None) or 0.0)
    thrown = start_unstable(est, eta)
    if not thrown:
        return converged
    warn(f"{est.method} did not converge as far as its releases show: {thrown}, and it releases nothing at its "
         "estimate (inference=None or 'bootstrap') that could show it settled after all. A step that the "
         f"public bound shows stable is step_size <= {stable_step(est):.3g} (or step_size='auto'); with "
         "inference on (other than 'bootstrap') the score released at the estimate judges the fit.",
         ConvergenceWarning)
    return False
