"""Refuse early: after FedIRLS's locate rounds, whether its refine rounds can reach an optimum at this mu.

The refine rounds converge along a direction only where its curvature is above their Hessian's eigenvalue
floor (``floor_noise_sds`` noise sds, :meth:`~.schedule.IRLSSchedule.floor`): below it each floored step removes
only ``lambda / floor`` of the error there, and a fit whose last phase keeps more than ``damped_kept`` of it ends
not converged with its intervals withheld (:func:`.rounds.damped`). The last locate round's released Hessian
bounds every direction's curvature from above (its eigenvalue plus ``NOISE_SDS`` noise sds); where even that bound
leaves the direction damped at the refine phase's public floors, the rest of the budget cannot produce an answer,
and the fit stops there with the numbers: the planned privacy sd of each coefficient next to its sampling SE (the
schedule's own noise model, :meth:`~.schedule.IRLSSchedule.planned_noise`, the machinery of
:func:`~privfedstat.planning.power.plan_study`), and the mu, rows per site or number of sites that would bring the
floors under the curvature. Everything is post-processing of released values and public settings. Derivation:
docs/guide/convergence.md, "Refuse early".
"""

from __future__ import annotations

import math

import numpy as np

from ..._linalg import floor_eigenvalues
from ...exceptions import UnsupportedModelError
from .schedule import IRLSSchedule

__all__ = ["check_support", "floor_factor", "noise_edge", "predicted_kept"]

#: the largest factor on mu (or the rows per site) the message computes; beyond it the direction is not identified
MAX_FACTOR = 1e6
#: the check runs for multinomial models of at least this many non-reference classes (four classes): there its
#: refusals were all right on the stand-ins; with fewer outputs (logistic, three classes, Poisson) it refused 13 of
#: 84 fits that, run to the end, converged (docs/guide/convergence.md, "Refuse early")
MIN_OUTPUTS = 3


def _kept(curvature: np.ndarray, floors: np.ndarray) -> np.ndarray:
    """The share of the error each direction of curvature ``curvature`` keeps over rounds with ``floors``."""
    c = np.maximum(curvature, 0.0)[:, None]
    return np.prod(1.0 - c / np.maximum(c, floors[None, :]), axis=1)


def noise_edge(n_params: int, sd: float) -> float:
    """The spectral norm of a released Hessian's symmetric noise, ``sqrt(2 p) s``: the edge of the semicircle law
    for a p x p Gaussian symmetric matrix whose quadratic forms ``v^T Xi v`` (unit v) have sd s (off-diagonal
    entries of sd ``s / sqrt(2)``). Released eigenvalues spread over ``lambda +- sqrt(2 p) s``, so the smallest
    curvature shows about that far below its value."""
    return math.sqrt(2.0 * n_params) * sd


def predicted_kept(curvature: np.ndarray, edge: float, floors: np.ndarray) -> np.ndarray:
    """The share of the error each direction of true curvature ``curvature`` keeps over the refine rounds, as the
    fit's own verdict will see it: on their last released Hessian, whose smallest eigenvalues show ``edge`` below
    the curvature, floored at ``floors``."""
    return _kept(np.maximum(curvature - edge, 0.0), floors)


def floor_factor(curvature: float, edge: float, floors: np.ndarray, kept: float) -> float:
    """The least c >= 1 such that the refine rounds with c times their budget per client (noise edge and floors
    ``/ c``) keep at most ``kept`` of the error along ``curvature`` (inf where no c up to ``MAX_FACTOR`` does: no
    curvature to find)."""
    def fails(c: float) -> bool:
        return predicted_kept(np.array([curvature]), edge / c, floors / c)[0] > kept

    if fails(MAX_FACTOR):
        return math.inf
    lo, hi = 1.0, MAX_FACTOR
    for _ in range(60):
        mid = math.sqrt(lo * hi)
        lo, hi = (mid, hi) if fails(mid) else (lo, mid)
    return hi


def _coefficient(j: int, n_outputs: int) -> str:
    return f"column {j // n_outputs}" + (f", class {j % n_outputs + 1}" if n_outputs > 1 else "")


def check_support(schedule: IRLSSchedule, H: np.ndarray, spent: float) -> None:
    """Raise :class:`~privfedstat.UnsupportedModelError` when the refine rounds cannot converge along some direction.

    Parameters
    ----------
    schedule : IRLSSchedule
        The fit's schedule (phased): its refine phase's floors with the first phase's bounds (the search at the
        located point may move them by a few grid points; whitening reshapes the noise; both inferred to change
        the verdict little next to the factors it reports).
    H : ndarray of shape (p, p)
        The last locate round's released Hessian (fitting scale, unfloored).
    spent : float
        The mu per client the fit has spent so far (for the message).
    """
    if schedule.family.n_outputs < MIN_OUTPUTS:
        return  # measured: wrong too often with fewer classes (docs/guide/convergence.md, "Refuse early")
    locate, refine = schedule.phase(0), schedule.phase(1)
    p = H.shape[0]
    edge_refine = noise_edge(p, math.sqrt(float(np.min(refine.hessian_var))))
    vals, vecs = np.linalg.eigh(0.5 * (H + H.T))
    # the curvature behind each released eigenvalue: the low end of the spectrum shows the noise edge below it
    curvature = np.maximum(vals + noise_edge(p, math.sqrt(float(locate.hessian_var[-1]))), 0.0)
    bad = np.flatnonzero(predicted_kept(curvature, edge_refine, refine.floors) > schedule.damped_kept)
    if not bad.size:
        return
    factor = max(floor_factor(float(curvature[i]), edge_refine, refine.floors, schedule.damped_kept) for i in bad)
    q = schedule.family.n_outputs
    loads = np.max(np.abs(vecs[:, bad]), axis=1)
    worst = [int(j) for j in np.argsort(-loads)[:4] if loads[j] > 0.3]
    Hf = floor_eigenvalues(H, float(locate.floors[-1]))
    V = schedule.planned_noise(Hf).covariance(Hf)
    se = np.sqrt(np.diag(np.linalg.inv(Hf)) / float(np.sum(schedule.sizes)))
    ratio = np.sqrt(np.maximum(np.diag(V), 0.0)) / se
    mu, m, n = schedule.setup.mu, schedule.sizes.size, float(np.mean(schedule.sizes))
    need = ("no mu or site size brings them above it (their curvature is within noise of zero: collinear or empty "
            "columns or classes)") if math.isinf(factor) else (
        f"a mu about {factor:.3g} times larger (the estimation rounds' {mu:.3g} -> {factor * mu:.3g}), or about "
        f"{factor:.3g} times the rows per site (>= {math.ceil(factor * n)} rows on each of the {m} sites), or the same "
        f"rows on about {max(1, math.floor(m / factor**2))} merged sites")
    raise UnsupportedModelError(
        f"the data cannot support this model at this mu: after the first rounds (mu = {spent:.3g} per client "
        f"spent), the released curvature along {bad.size} direction(s) (mostly {', '.join(_coefficient(j, q) for j in worst)}"
        f"; fitting order) is about {float(np.max(curvature[bad])):.3g}, which the remaining rounds' Hessians (noise "
        f"edge {edge_refine:.3g}, eigenvalue floor {float(np.min(refine.floors)):.3g}) would not resolve, so they would "
        "end short of the optimum with their intervals withheld. By the schedule's noise model the privacy sd of the "
        f"coefficients is {float(np.min(ratio)):.3g} to {float(np.max(ratio)):.3g} times their sampling SE. Needed: "
        f"{need}. What the data can support now: fewer parameters (drop or merge the columns or classes named, or "
        "pool rare levels), larger or merged sites, or a larger mu; the rest of the budget was not spent.",
        privacy_sd_ratio=ratio, mu_factor=factor)
