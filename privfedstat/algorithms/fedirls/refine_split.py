"""The refine rounds' Hessian share, derived from the noise model after the locate rounds (post-processing).

The refine phase of a phased FedIRLS fit is one round from the located point with its own fresh Hessian, then the
rounds of the estimate's combination (:meth:`.schedule.IRLSSchedule.combination`): a fresh Hessian and the gradients
that reuse it, their Newton targets weighted by precision. To first order in the noise the estimate's privacy
variance, as a trace in the sampling metric, is

    V(h) = (gamma / G) (1 + 3 y) + y (pi_f^2 T_f + (gamma / G) sum_(r > f) pi_r^2 / pi_(r-1)),   y = rho / h,

G = L - h the combined rounds' gradient shares (in the table's proportions pi_r), h their Hessian's share, L what the
first round leaves, gamma the gradient noise's and rho the Hessian's relative noise at share 1, and T_f the error
the combined rounds start from: the located point's T_a through the first round, ``T_f = (rho / h_1) T_a + (gamma /
g_1)(1 + 3 rho / h_1)``. V is convex in h on (0, L): its minimum is the derived share. The first round's shares and
the gradient proportions stay the table's: the first round brings the located point to where the linearisation holds,
which the linear model cannot price (docs/algorithms/fedirls.md, "Schedule: the refine Hessian's share").
"""

from __future__ import annotations

import numpy as np

__all__ = ["combined_variance", "derived_refine_split"]


def _parts(table: np.ndarray, gamma: float, rho: float, located: float) -> tuple[int, float, np.ndarray, float, float]:
    """``(f, L, pi, T_f, c)`` of the module docstring for the shares ``table`` (rows: rounds; summing to 1)."""
    f = int(np.flatnonzero(table[:, 1] > 0)[-1])  # the last fresh Hessian: the combination's first round
    T = located
    for g, h in table[:f]:
        y = rho / h
        T = y * T + gamma / g * (1.0 + 3.0 * y)
    pi = table[f:, 0] / np.sum(table[f:, 0])
    return f, 1.0 - float(np.sum(table[:f])), pi, T, float(np.sum(pi[1:] ** 2 / pi[:-1]))


def combined_variance(table: np.ndarray, gamma: float, rho: float, located: float) -> float:
    """V of the module docstring for the shares ``table`` (rows: rounds, (gradient, Hessian); summing to 1): the
    planned privacy variance of the combined estimate, a trace in the sampling metric.

    Parameters
    ----------
    table : ndarray of shape (R, 2)
    gamma : float
        tr(N^-1) times the per-coordinate gradient noise variance with the whole refine budget (share 1).
    rho : float
        The relative Hessian noise with share 1, ``s^2 (tr(N^-1)^2 + tr(N^-2)) / (2 p)`` (``s^2 (p + 1) / 2`` for
        N = I), s the released Hessian's diagonal noise sd.
    located : float
        T_a: the located point's planned error, ``tr(N C_a)``.
    """
    f, _, pi, T, c = _parts(table, gamma, rho, located)
    G, y = float(np.sum(table[f:, 0])), rho / float(table[f, 1])
    return gamma / G * (1.0 + 3.0 * y) + y * (pi[0] ** 2 * T + gamma / G * c)


def derived_refine_split(table: np.ndarray, gamma: float, rho: float, located: float, least: float = 0.0
                         ) -> np.ndarray:
    """``table``'s shares (rows: rounds, (gradient, Hessian)) with the combined rounds' Hessian share h minimising
    :func:`combined_variance` over ``h >= least`` (the first round's shares and the combined gradients' proportions
    kept; the same sum as ``table``); ``gamma`` and ``rho`` with share 1 of the estimation mu^2, as ``table``'s shares
    are. V is convex in h, so the constrained minimum is the larger of the free one and ``least``."""
    total = float(np.sum(table))
    unit = np.asarray(table, dtype=np.float64) / total
    f, L, pi, _, _ = _parts(unit, 1.0, 1.0, 0.0)

    def split(h: float) -> np.ndarray:
        out = unit.copy()
        out[f:, 0], out[f, 1] = (L - h) * pi, h
        return out

    from scipy.optimize import minimize_scalar  # here, not at module level: scipy.optimize is slow to import
    best = minimize_scalar(lambda u: combined_variance(split(L / (1.0 + np.exp(-u))), gamma / total, rho / total,
                                                       located), bounds=(-40.0, 40.0), method="bounded",
                           options={"xatol": 1e-9})
    return split(max(L / (1.0 + np.exp(-best.x)), least / total)) * total
