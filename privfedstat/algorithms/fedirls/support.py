"""Refuse early: before FedIRLS's refine rounds, whether they can reach an optimum at this mu.

The refine rounds converge along a direction only where its released curvature clears their eigenvalue floors:
a floored step removes ``lambda / floor`` of the error, and a fit whose last phase keeps more than
``damped_kept`` of it along some direction ends not converged with its intervals withheld
(:func:`.rounds.damped`). So a direction is lost when the refine phase's last released Hessian shows it below
``r*``, the released curvature at which the phase's public floors keep exactly ``damped_kept``.

The check runs in the refine rounds' coordinates, once their bounds are known (after the whitening and the bound
search at the located point: :meth:`~.schedule.IRLSSchedule.phase` then gives their noise and floors). The last
locate round's released Hessian, mapped there (``P^T H P``), estimates the curvature. For each k, the k smallest
of its eigenvalues sum to the curvature of a k-dimensional subspace (the weak block), less the noise of its trace
(sd ``s ||P U_k U_k^T P^T||_F``, s the locate round's noise sd: exact under the released noise's law) and less the
shift the coupling to the other directions gives the smallest eigenvalues of a noisy matrix (second-order
perturbation, ``sum Var(xi_ij) / (lambda_j - lambda_i)``, counted where the gap exceeds ``NOISE_SDS`` sds of
``xi_ij``, where the series holds). The fit refuses when, for some k, even that sum plus ``NOISE_SDS`` sds
stays below what the refine phase needs: ``k (r* + sqrt(2 (k - 1)) s_R)`` (each of the k directions at ``r*``,
plus the spread of the smallest of k released eigenvalues below their mean: 0 for k = 1, the semicircle radius
of a k x k block of noise of sd ``s_R`` for large k). A one-sided test at ``NOISE_SDS`` sds: the check refuses
only fits whose refine rounds would, beyond their noise, end damped; others run to the end.

The message gives the numbers: the planned privacy sd of each coefficient next to its sampling SE (the schedule's
own noise model, :meth:`~.schedule.IRLSSchedule.planned_noise`, the machinery of
:func:`~privfedstat.planning.power.plan_study`), and the least factor on mu (or the rows per site) at which the
curvature's upper bound would clear the floors. Everything is post-processing of released values and public
settings. The check runs for the families whose decisions were checked against fits run to the end,
:data:`CHECKED_FAMILIES` (logistic, multinomial, Poisson; Gaussian and Huber fits, not measured, run to the end).
With a log link (Poisson) the curvature grows along the path, so the located Hessian predicts the refine rounds'
only where the located point is at the root within the noise of the gradient released with that Hessian
(:func:`at_root`; countymurders at mu = 2: 24-40 noise sds from it, whitened to the identity there, its last refine
Hessian 1 to 23, converged); there each direction may still gain what the gradient left allows
(:func:`curvature_growth`), and elsewhere the fit runs to the end.
Derivation and measurements: docs/guide/convergence.md, "Refuse early".
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ..._linalg import floor_eigenvalues
from ...exceptions import UnsupportedModelError
from ...federation.protocol import Setup
from ...inference.config import DIAGNOSTIC_ALPHA, critical_value
from .schedule import IRLSSchedule, curvature_class

__all__ = ["CHECKED_FAMILIES", "Shortfall", "at_root", "check_support", "curvature_growth", "damping_threshold", "weak_blocks"]

#: the one-sided normal critical value at DIAGNOSTIC_ALPHA, 3.09: a block's trace noise and a coupling ``xi_ij`` are
#: each one normal (docs/guide/constants.md)
NOISE_SDS = critical_value(sides=1)
#: the families whose refusals were checked against the same fits run to the end (docs/guide/convergence.md)
CHECKED_FAMILIES = ("logistic", "multinomial", "poisson")


@dataclass(frozen=True)
class Shortfall:
    """One block of :func:`weak_blocks`: its size k, the released eigenvalue sum with its coupling shift
    and noise sd, the refine phase's need, and the eigenvectors (refine coordinates, columns)."""

    k: int
    released: float
    shift: float
    sd: float
    need: float
    vectors: np.ndarray

    @property
    def upper(self) -> float:
        """The block's curvature sum at most (``NOISE_SDS`` sds above the shifted released sum)."""
        return self.released + self.shift + NOISE_SDS * self.sd

    @property
    def short(self) -> bool:
        return self.upper < self.need

    @property
    def margin(self) -> float:
        """``(upper - need) / sd``: the test's margin in noise sds (negative: refused)."""
        return (self.upper - self.need) / self.sd


def damping_threshold(floors: np.ndarray, kept: float) -> float:
    """``r*``: the released curvature at which rounds with eigenvalue ``floors`` keep exactly ``kept`` of the error
    (``prod_r (1 - r / max(r, floor_r)) = kept``; below it a direction counts as damped)."""
    floors = np.asarray(floors, dtype=np.float64)
    lo, hi = 0.0, float(np.max(floors))
    for _ in range(100):  # the kept share decreases in r
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if float(np.prod(1.0 - mid / np.maximum(mid, floors))) > kept else (lo, mid)
    return hi


def at_root(gradient: np.ndarray, var: float) -> bool:
    """Whether the released gradient is within its noise of zero: ``||g||^2 / v`` (v its noise variance per
    coordinate; chi-square with p degrees of freedom at a root) at most the chi-square quantile at
    ``DIAGNOSTIC_ALPHA``."""
    from scipy.stats import chi2  # at fit time: importing privfedstat loads no scipy.stats

    g = np.asarray(gradient, dtype=np.float64)
    return float(g @ g) / var <= float(chi2.isf(DIAGNOSTIC_ALPHA, g.size))


def curvature_growth(gradient: np.ndarray, basis: np.ndarray, s_gradient: float) -> float:
    """The most a direction's curvature may grow between the located point and the optimum, for a log link: the upper
    bound of ``||P^T g||``, the released gradient's norm in the refine coordinates (its noise's norm at most
    ``s (||P||_F + NOISE_SDS ||P||_2)``: its mean, and a 1-Lipschitz function's normal tail).

    Along a line where the loss is ``A e^t - B t`` (the log link's, one slope), the curvature at the root is
    ``B = A - g``: it grows by the gradient left, ``-g`` (docs/guide/convergence.md, "Refuse early")."""
    g = basis.T @ np.asarray(gradient, dtype=np.float64)
    noise = s_gradient * (float(np.linalg.norm(basis)) + NOISE_SDS * float(np.linalg.norm(basis, 2)))
    return float(np.linalg.norm(g)) + noise


def weak_blocks(H: np.ndarray, basis: np.ndarray, s_locate: float, r_star: float, s_refine: float,
                growth: float = 0.0) -> list[Shortfall]:
    """The blocks of the k = 1..p smallest released eigenvalues, each with its test.

    Parameters
    ----------
    H : ndarray of shape (p, p)
        The last locate round's released Hessian in the refine rounds' coordinates, ``P^T H_theta P``.
    basis : ndarray of shape (p, p)
        P (``theta = P phi``; the identity without whitening).
    s_locate : float
        The sd of that Hessian's diagonal noise in theta (off-diagonal ``s / sqrt(2)``).
    r_star, s_refine : float
        :func:`damping_threshold` of the refine phase, and the sd of its last Hessian's noise (refine coordinates).
    growth : float
        The most each direction's curvature may grow before the refine rounds (:func:`curvature_growth`; 0 for a
        loss of bounded curvature): a block of k may gain ``k growth``.
    """
    vals, vecs = np.linalg.eigh(0.5 * (H + H.T))
    A = basis @ vecs  # the eigenvectors as theta-directions: the locate noise along them is s a_i^T Xi a_j
    norms, gram = np.sum(A**2, axis=0), A.T @ A
    var = 0.5 * s_locate**2 * (np.outer(norms, norms) + gram**2)  # Var(a_i^T Xi a_j), GOE-type noise
    blocks = []
    for k in range(1, vals.size + 1):
        gaps = vals[k:][None, :] - vals[:k][:, None]
        v = var[:k, k:]
        resolved = gaps > NOISE_SDS * np.sqrt(v)
        shift = float(np.sum(np.where(resolved, v / np.where(resolved, gaps, 1.0), 0.0)))
        Ak = A[:, :k]
        blocks.append(Shortfall(k, float(np.sum(vals[:k])) + k * growth, shift, s_locate * float(np.linalg.norm(Ak @ Ak.T)),
                                k * (r_star + math.sqrt(2.0 * (k - 1)) * s_refine), vecs[:, :k]))
    return blocks


def check_support(schedule: IRLSSchedule, H: np.ndarray, basis: np.ndarray | None, refine: Setup | None,
                  design: np.ndarray | None, spent: float, labels: list[str], gradient: np.ndarray | None = None) -> None:
    """Raise :class:`~privfedstat.UnsupportedModelError` when the refine rounds would end damped beyond their noise.

    Parameters
    ----------
    schedule : IRLSSchedule
        The fit's schedule (phased).
    H : ndarray of shape (p, p)
        The last locate round's released Hessian, in the refine rounds' coordinates (unfloored).
    basis : ndarray of shape (p, p) or None
        The parameters' map ``theta = basis phi`` of the refine rounds (None: none).
    refine : Setup or None
        The refine rounds' bounds (None: the first phase's).
    design : ndarray or None
        The row map of the whitening (for the planned noise of the message).
    spent : float
        The mu per client the fit has spent so far.
    labels : list of str
        The coefficients' names in flat fitting order (:func:`~privfedstat.results.labels.fitting_labels`), which the
        message names the weak directions by.
    gradient : ndarray of shape (p,) or None
        The gradient released with ``H`` (the last locate round's, theta; None: a Poisson fit is not checked), which
        tells whether the located point is a root (:func:`at_root`) and how much a log link's curvature may still grow.
    """
    if schedule.family.name not in CHECKED_FAMILIES:
        return  # its refusals were not measured against fits run to the end: such fits run to the end
    locate, last = schedule.phase(0), schedule.phase(1, refine)
    p = H.shape[0]
    P = np.eye(p) if basis is None else basis
    r_star = damping_threshold(last.floors, schedule.damped_kept)
    s_refine = math.sqrt(float(last.hessian_var[-1]))
    growth = 0.0
    if curvature_class(schedule.family) != "bounded":  # the curvature may grow along the path (a log link)
        var = float(locate.gradient_var[-1])
        if gradient is None or not at_root(gradient, var):
            return  # the path ahead is longer than the noise: the located Hessian does not predict the refine rounds'
        growth = curvature_growth(gradient, P, math.sqrt(var))
    blocks = weak_blocks(H, P, math.sqrt(float(locate.hessian_var[-1])), r_star, s_refine, growth)
    block = min(blocks, key=lambda b: b.margin)
    if not block.short:
        return
    # the least factor c on mu: the floored directions' curvature in these coordinates grows like c (their whitening
    # divides by the locate floor, ~ 1/c) and the need falls like 1/c, so every short block needs c^2 upper >= need
    # (a lower bound on c for each; none where no short block's upper bound is above zero)
    bounds = [math.sqrt(b.need / b.upper) for b in blocks if b.short and b.upper > 0]
    factor = max(bounds) if bounds else math.inf
    loads = np.max(np.abs(P @ block.vectors), axis=1)
    loads = loads / max(float(np.max(loads)), 1e-300)
    worst = [int(j) for j in np.argsort(-loads)[:4] if loads[j] > 0.3]
    Hf = floor_eigenvalues(0.5 * (H + H.T), float(last.floors[-1]))
    V = P @ schedule.planned_noise(Hf, refine, design).covariance(Hf) @ P.T
    sampling = P @ np.linalg.inv(Hf) @ P.T / float(np.sum(schedule.sizes))
    ratio = np.sqrt(np.maximum(np.diag(V), 0.0) / np.diag(sampling))
    mu, m, n = schedule.setup.mu, schedule.sizes.size, float(np.mean(schedule.sizes))
    if math.isfinite(factor):
        need = (f"a mu at least {factor:.3g} times larger (the estimation rounds' {mu:.3g} -> {factor * mu:.3g}), or at "
                f"least {factor:.3g} times the rows per site (>= {math.ceil(factor * n)} rows on each of the {m} sites), "
                f"or the same rows on at most {max(1, math.floor(m / factor**2))} merged sites (with the refine rounds' bounds "
                "as searched now: a search on small sites can return a far larger bound than one at a larger mu, and "
                "then less suffices)")
    else:
        guide = max(float(np.max(ratio)), 1.0)
        need = (f"the curvature's upper bound is not above zero, so no factor can be read from it (collinear or empty "
                f"columns or classes, or far too little data for mu); as a guide, the privacy sd falls to the sampling "
                f"SE with a mu about {guide:.3g} times larger ({guide * mu:.3g}) or {guide:.3g} times the rows per site "
                f"(>= {math.ceil(guide * n)} on each of the {m} sites), or the same rows on about "
                f"{max(1, math.floor(m / guide**2))} merged sites")
    grown = (f", with the growth of up to {growth:.3g} per direction that the gradient left at the located point allows "
             "a log link's curvature" if growth > 0 else "")
    raise UnsupportedModelError(
        f"the data cannot support this model at this mu: after the first rounds (mu = {spent:.3g} per client spent), "
        f"the released curvature of {block.k} direction(s) (mostly {', '.join(labels[j] for j in worst)}) "
        f"sums to at most {block.upper:.3g} ({NOISE_SDS:.3g} noise sds above what was released{grown}, in "
        f"the refine rounds' coordinates), below the {block.need:.3g} the remaining rounds' Hessians need (their "
        f"floors keep {schedule.damped_kept:.0%} of the error below {r_star:.3g} each; noise sd {s_refine:.3g}), so "
        "they would end short of the optimum with their intervals withheld. By the schedule's noise model the "
        f"privacy sd of the coefficients is {float(np.min(ratio)):.3g} to {float(np.max(ratio)):.3g} times their "
        "sampling SE (on the floored Hessian: along the weak directions the fit's own would be larger). Needed: "
        f"{need}. What the data can support now: fewer parameters (drop or merge the columns or "
        "classes named, or pool rare levels), larger or merged sites, or a larger mu; the rest of the budget was not "
        "spent.",
        privacy_sd_ratio=ratio, mu_factor=factor, spent=spent)
