"""The convergence verdict of a fit without privacy (mu = inf), from the exact score and Hessian of the fit's own,
possibly clipped, objective at the returned point (derivations: docs/guide/convergence.md, "Without privacy"): the
Newton distance to the optimum in model-based standard errors (:func:`stationarity_gap`), an estimate uphill of the
path's start (:func:`uphill`), curvature vanished along the estimate (:func:`saturated`: separation where the score
is zero there, divergence where the path ran away), and a gradient path going back and forth."""

from __future__ import annotations

import math

import numpy as np

from .._warn import warn
from ..exceptions import ConvergenceWarning
from .stability import gradient_steps
from .verdict import TOL_SE, contracts, divergence, remedy

__all__ = ["SATURATED", "away", "uphill", "saturated", "nonprivate_score", "stationarity_gap", "nonprivate_verdict"]

#: curvature along the estimate below this fraction of the family's curvature at 0 counts as vanished (mu = inf):
#: a Newton step along it is then not resolved in double precision (sqrt of machine epsilon)
SATURATED = math.sqrt(np.finfo(np.float64).eps)


def away(path: list[np.ndarray], g: np.ndarray) -> bool:
    """Whether the path went up the score g from where it started (``(theta_K - theta_0) . g > 0``): the root of
    the estimating equation lies back behind its start, where a path of descent steps travels down it. (Its last
    update alone is no guide: a path bouncing between saturated regions moves either way.)"""
    return float(np.ravel(path[-1] - path[0]) @ np.ravel(g)) > 0.0


def uphill(path: list[np.ndarray], start: np.ndarray | None) -> float:
    """``g(theta_0) . (theta_K - theta_0)``, ``g(theta_0)`` the exact gradient of a convex objective at the path's start
    (``start``; 0 where None): by convexity ``f(theta_K) - f(theta_0)`` is at least that, so where it is positive
    the estimate fits worse than the start, whatever the path did in between (a too large step throws it back and
    forth between saturated regions, where its last updates need not alternate)."""
    return 0.0 if start is None else float(np.ravel(start) @ np.ravel(path[-1] - path[0]))


def saturated(theta: np.ndarray, H: np.ndarray, curvature_at_zero: float) -> bool:
    """Whether the curvature ``u^T H u`` along the estimate's direction ``u = theta / ||theta||`` is below
    ``SATURATED`` times the family's curvature at 0 (every row's fitted value saturated along it)."""
    norm_theta = float(np.linalg.norm(theta))
    if norm_theta == 0.0:
        return False
    u = theta / norm_theta
    return float(u @ H @ u) <= SATURATED * curvature_at_zero


def nonprivate_score(g: np.ndarray, n_samples: int, curvature_at_zero: float) -> float:
    """The exact score's size in its sampling sds, ``max_j |g_j| sqrt(N / ell''(0))`` (the sd of a mean score on
    unit-scale columns at theta = 0): above ``TOL_SE`` the score is not zero."""
    return float(np.max(np.abs(g))) * math.sqrt(n_samples / curvature_at_zero)


def stationarity_gap(g: np.ndarray, H: np.ndarray, theta: np.ndarray, n_samples: int, penalty=None) -> float:
    """Distance of ``theta`` from the pooled objective's optimum, in model-based standard errors.

    Only for non-private fits (mu = inf), from the exact gradient g and Hessian H of the fit's own,
    possibly clipped, objective: one Newton step ``s = H^-1 g`` measured against
    ``sqrt(diag(H^-1) / N)``, maximised over coefficients. FedAvg's and SCAFFOLD's local steps can
    settle at a fixed point that is not the pooled optimum without any iterate moving; this sees it. For
    a penalised fit (``penalty``, an :class:`~privfedstat.penalty.ElasticNet`) the step is the proximal
    Newton step of the penalised objective. 0 when H is singular.
    """
    try:
        step = np.linalg.solve(H, g) if penalty is None else penalty.newton_step(theta, g, H)
        var = np.diag(np.linalg.inv(H)) / n_samples
    except np.linalg.LinAlgError:
        return 0.0
    if not (np.all(np.isfinite(step)) and np.all(var > 0)):
        return 0.0
    return float(np.max(np.abs(step) / np.sqrt(var)))


def nonprivate_verdict(est, path: list[np.ndarray], exact: tuple[np.ndarray, np.ndarray], n_samples: int,
                       curvature_at_zero: float, noise_model, oscillating: float | None, settled: bool | None,
                       start: np.ndarray | None = None) -> bool:
    """``converged_`` of a mu = inf fit from its exact score ``exact = (g, H)`` at ``theta``, with the warning
    that names the cause and the remedy.

    In order: an estimate uphill of the path's start (:func:`uphill`) raises; curvature vanished along the estimate
    (:func:`saturated`) raises when the score is not zero there
    and the path went up it (it ran away) and warns of separation when it is zero; otherwise converged when the
    Newton distance is at most ``TOL_SE`` model-based SEs (:func:`stationarity_gap`); if not, a gradient path
    going back and forth raises, gradient steps that expand errors at H say so (:func:`unstable`), and any other
    path is told to take more or longer steps. ``oscillating``: the path's lag-1 correlation where its last updates point back
    and forth (else None); ``settled``: whether its last update was negligible; ``start``: the exact gradient at the
    path's start of an unclipped, unpenalised gradient protocol (else None).
    """
    g, H = exact
    theta = np.ravel(path[-1])
    penalty = getattr(est, "penalty_", None)
    rise = uphill(path, start)
    if rise > 0.0 and stationarity_gap(g, H, theta, n_samples) > TOL_SE:
        raise divergence(est, f"its estimate lies uphill of its start: the start's gradient times the path's travel, "
                              f"a lower bound on how much the (convex) pooled objective rose, is {rise:.3g}, so the "
                              "estimate fits worse than the start and the path moved away from the optimum, not "
                              "towards it.")
    if penalty is None and saturated(theta, H, curvature_at_zero):
        z = nonprivate_score(g, n_samples, curvature_at_zero)
        if z > TOL_SE and not away(path, g):  # heavy clipping flattens the clipped equation: still travelling
            return _not_converged(est, stationarity_gap(g, H, theta, n_samples) or z, oscillating, settled)
        if z > TOL_SE:
            raise divergence(est, f"the curvature along its estimate has vanished (every fitted value saturated) while "
                                  f"the score there is {z:.3g} sampling sds from zero: the path ran away from the "
                                  "optimum instead of towards it.")
        warn(f"{est.method} did not converge: the curvature along its estimate has vanished (every fitted "
             "value is saturated) while the score there is zero, the signature of (quasi-)complete separation; "
             "more rounds only move the estimate further out. " + remedy(est, "separation"),
             ConvergenceWarning)
        return False
    gap = stationarity_gap(g, H, theta, n_samples, penalty)
    if gap <= TOL_SE:
        return True
    if oscillating is not None and not settled and gradient_steps(noise_model):  # settled: rounding errors alternate
        raise divergence(est, f"it stopped {gap:.3g} standard errors (model-based) from the optimum with its last "
                              f"updates pointing back and forth (lag-1 correlation {oscillating:.2f}).")
    if not contracts(est, noise_model, H):
        return False
    return _not_converged(est, gap, oscillating, settled)


def _not_converged(est, gap: float, oscillating: float | None, settled: bool | None) -> bool:
    """The ConvergenceWarning of a mu = inf fit ``gap`` model-based SEs from the optimum, worded by its path."""
    if settled:  # before the sign pattern: the last updates of a settled path are rounding errors
        why = "its last update was negligible: a fixed point that is not the pooled estimate, or steps too short to move"
        advice = est._advice()
    elif oscillating is not None:
        why, advice = (f"its last updates point back and forth (lag-1 correlation {oscillating:.2f})",
                       remedy(est, "oscillating"))
    else:
        why, advice = "its path was still travelling towards it when it stopped", est._advice()
    warn(f"{est.method} {'settled' if settled else 'stopped'} about {gap:.3g} standard errors (model-based) "
         f"away from the optimum of the pooled objective (with mu = inf this is checked on the pooled gradient "
         f"and Hessian at the estimate; tolerance {TOL_SE:.2f} SE): {why}. {advice}",
         ConvergenceWarning)
    return False
