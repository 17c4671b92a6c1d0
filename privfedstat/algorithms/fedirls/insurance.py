"""The whitened refine bound's insurance (stage ``insure``): a blind raise the planned noise allows, then a raise a
released test of the clipped excess asks for.

The refine search (stage ``research``) targets the 99.9% quantile of the whitened per-sample norms at the located
point, leaning below it, and clipping the few rows above the bound moves the root of the clipped estimating equation
away from the MLE by a distance the search's counts cannot resolve. Two raises of the gradient bound B follow:

* :func:`blind_raise`: up to ``insurance_steps`` points of the search's grid while the estimate's planned gradient
  noise stays below ``insurance_sd`` sampling sds (public: the released bound and dispersion, sizes and budgets);
* :func:`tested_raise`: at the located point the clients release the clipped excess between B and a wider bound B'
  (:func:`~privfedstat.inference.clipping_bias.measure`, ``mu_insurance``-GDP, sensitivity ``2 (B' - B) / n_i``, on the
  ledger as ``irls-insure``); where it moves the root by more than its own noise in some coordinate (Bonferroni over
  the coordinates at ``DIAGNOSTIC_ALPHA``), the refine rounds clip at B' instead.

A resolved raise lowers the error it is taken for: the test's window is at least B wide
(:func:`~privfedstat.inference.clipping_bias.outer_bound`), so its noise is at least ``sqrt(g / s) / 2`` times the
refine gradients' noise at B' (g and s the refine gradients' and the test's shares of mu^2), and a displacement beyond
``z`` of the test's noise sds exceeds the whole noise the raise adds, ``z sqrt(g / s) / 2 > 1`` for any share the
schedule gives the test. The test runs, and its budget leaves the refine rounds, only where its narrowest window
resolves the intervals' tolerated bias (:func:`runs_test`). With mu large the window reaches past every row (the fit
then clips nothing and lands on the MLE); on the natural sites at mu = 2-8 the test does not run and the bound stays
the blind raise's (docs/algorithms/fedirls.md, "Insurance of the refine bound").
"""

from __future__ import annotations

import math
from dataclasses import replace
from typing import TYPE_CHECKING

import numpy as np

from ...federation.protocol import Setup
from ...federation.session import Session
from ...inference.clipping_bias import measure
from ...inference.config import Inference, critical_value, tolerated_bias
from ...privacy.calibration import aggregated_noise_sd
from .site_weights import located_heterogeneity, weighed_sd

if TYPE_CHECKING:  # the schedule and the rounds import the insurance
    from .rounds import _Rounds
    from .schedule import IRLSSchedule

__all__ = ["insure", "blind_raise", "resolution", "runs_test", "tested_raise", "INSURE_STAGE"]

#: the ledger's stage of the tested raise's release
INSURE_STAGE = "irls-insure"


def insure(schedule: IRLSSchedule, session: Session, newton: _Rounds, found: dict[str, float],
           dispersion: tuple[float, float] | None) -> tuple[dict[str, float], IRLSSchedule]:
    """The refine rounds' bounds from those ``found`` by the search at the located point of the rounds ``newton`` (its
    point, released Hessian, basis and per-site messages): :func:`blind_raise` (a fit that re-weighs at the tau^2 of
    :func:`.site_weights.located_heterogeneity`), then :func:`tested_raise`; and the schedule it leaves."""
    tau2 = located_heterogeneity(schedule, newton.messages, session.sizes, newton.basis, dispersion)
    found = schedule.insured_bounds(found, dispersion, tau2)
    return tested_raise(schedule, session, newton.theta, newton.H_floored, found, dispersion)


def blind_raise(schedule: IRLSSchedule, found: dict[str, float], dispersion: tuple[float, float] | None = None,
                tau2: float | None = None) -> dict[str, float]:
    """``found`` by the search at the located point, the gradient bound raised by ``j <= insurance_steps`` points of the
    search's public grid (x1.245 each), the largest ``j`` at which the estimate's planned gradient noise sd
    (:meth:`~.schedule.IRLSSchedule.combined_sd`) with per-site noise stays at most ``insurance_sd s / sqrt(N)``, s the
    :meth:`~.schedule.IRLSSchedule.score_sd` of the released ``dispersion`` (None: 1) (post-processing of the released
    bound and dispersion and public sizes and budgets).

    Insurance against the bias of the clipped estimating equation where the clipped gradients' tail is
    asymmetric: the search leans below its 99.9% target, and the root moves by a distance its counts cannot
    resolve. In whitened coordinates the sampling sd of a coordinate is about ``s / sqrt(N)``, so the raise is
    taken only while the privacy noise stays a small part of the error (docs/algorithms/fedirls.md, "Insurance of
    the refine bound"). Under secure aggregation the search's counts, and so its lean in rows, are the per-site
    fit's (:func:`~privfedstat.fitting.stages.count_precision`), and the raise is judged on the noise these releases
    would carry with per-site noise: the per-site fit's raise, the secure sum's lower noise kept as precision. It is
    judged on the curvature class's table split (:attr:`~.schedule.CurvatureRules.refine_split`), with which
    ``insurance_sd`` was chosen: the derived Hessian share (:meth:`~.schedule.IRLSSchedule.refine_shares`) lowers the
    combined gradients' noise by moving budget from the Hessian, whose noise that sd does not count, so judged on it
    the raise would spend the gain on a larger bound (injury, mu = 2: privacy variance +26%, benchmarks/RESULTS.md,
    "FedIRLS: the refine Hessian's share derived from the noise model"). A fit that re-weighs (``reweigh``) judges
    the noise under its weights at the located ``tau2`` and ``dispersion``
    (:func:`.site_weights.located_heterogeneity`, :func:`.site_weights.weighed_sd`).
    """
    if "gradient" not in found:
        return found
    grid = schedule.search.grid
    i = int(np.argmin(np.abs(grid - found["gradient"])))
    bounds = Setup(found["gradient"], found.get("hessian", schedule.setup.hessian_clip), schedule.setup.mu)
    plain = replace(schedule, min_surviving=None, located=None)  # the table's split: the ceiling was chosen with it
    ceiling = schedule.insurance_sd * schedule.score_sd(dispersion) / math.sqrt(float(np.sum(schedule.sizes)))
    j, tau2 = 0, tau2 if schedule.reweigh else None
    while (j < schedule.insurance_steps and i + j + 1 < grid.size and weighed_sd(
            plain, replace(bounds, clip=found["gradient"] * grid[i + j + 1] / grid[i]), tau2, dispersion) <= ceiling):
        j += 1
    return dict(found, gradient=float(grid[i + j]))


def resolution(schedule: IRLSSchedule, clip: float, newton_matrix: np.ndarray,
               dispersion: tuple[float, float] | None = None) -> float:
    """The planned noise sd of the tested raise's displacement measured over a window of width ``clip`` (the narrowest
    it takes), in planned sampling sds ``s sqrt(diag(N^-1) / N)`` of the refine rounds' coordinates (N the located
    ``newton_matrix``, s the :meth:`~.schedule.IRLSSchedule.score_sd`), the largest over the coordinates: with per-site
    noise (under secure aggregation too, as :func:`blind_raise` judges) at ``mu_insurance`` (public)."""
    sizes, inverse = schedule.sizes, np.linalg.inv(newton_matrix)
    sd = aggregated_noise_sd(2.0 * clip / sizes, schedule.mu_insurance, schedule.weights)
    se = schedule.score_sd(dispersion) * np.sqrt(np.diag(inverse) / float(np.sum(sizes)))
    return float(np.max(sd * np.sqrt(np.sum(inverse * inverse, axis=1)) / se))


def runs_test(schedule: IRLSSchedule, found: dict[str, float], newton_matrix: np.ndarray,
              dispersion: tuple[float, float] | None = None) -> bool:
    """Whether the tested raise runs: a gradient bound searched, and its narrowest window's measurement resolving the
    intervals' tolerated bias, ``z resolution <= tolerated_bias`` (z Bonferroni over the coordinates at
    ``DIAGNOSTIC_ALPHA``; :func:`resolution`). Where it cannot, the test would settle no displacement the intervals
    tolerate and its budget stays with the refine rounds (the inference's measurement at the estimate still
    reports what clipping moves)."""
    if not schedule.mu_insurance or "gradient" not in found:
        return False
    z = critical_value(newton_matrix.shape[0])
    return z * resolution(schedule, found["gradient"], newton_matrix, dispersion) <= tolerated_bias(Inference.alpha)


def tested_raise(schedule: IRLSSchedule, session: Session, theta: np.ndarray, newton_matrix: np.ndarray,
                 found: dict[str, float], dispersion: tuple[float, float] | None = None
                 ) -> tuple[dict[str, float], IRLSSchedule]:
    """``found`` (the blind raise's bounds), its gradient bound B raised to B' where a released test shows that
    clipping between B and B' moves the root of the clipped equation by more than the test's own noise; and the
    schedule with the test's budget decided (:meth:`~.schedule.IRLSSchedule.tested`).

    Where :func:`runs_test`, at the located point ``theta`` (the refine rounds' coordinates, whose rows the session
    holds mapped), the clients release their mean clipped excess ``clip_B'(g) - clip_B(g)`` (``mu_insurance``-GDP,
    sensitivity ``2 (B' - B) / n_i``: each row's term has norm at most ``B' - B`` for every finite input; a secure sum
    in a secure fit); one Newton step with the located ``newton_matrix`` N turns it into the displacement ``N^-1 e``
    of the clipped root (:func:`~privfedstat.inference.clipping_bias.measure`). B' is that function's window: the
    widest whose noise still resolves the intervals' tolerated bias in the planned sampling sds
    (:func:`resolution`'s), and at least B wide. Where some coordinate's displacement lies beyond the Bonferroni
    critical value of its noise, the refine rounds clip at B'; otherwise at B. Post-processing of the release, the
    located matrix and public sizes and budgets.
    """
    runs = runs_test(schedule, found, newton_matrix, dispersion)
    schedule = schedule.tested(runs)
    if not runs:
        return found, schedule
    clip, n = found["gradient"], float(np.sum(session.sizes))
    sampling = schedule.score_sd(dispersion) ** 2 * np.linalg.inv(newton_matrix) / n
    test = measure(session, theta, clip, newton_matrix, np.eye(theta.size), schedule.weights, schedule.mu_insurance,
                   sampling, Inference.alpha, INSURE_STAGE)
    return (dict(found, gradient=float(test.outer)) if np.any(test.resolved) else found), schedule
