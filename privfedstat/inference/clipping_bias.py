"""How far clipping moves the estimate: the displacement of the clipped root, measured at the estimate.

A fit with per-sample gradients clipped at B solves the clipped estimating equation ``S_B(theta) = 0``,
whose root moves away from the unclipped one (the MLE, OLS) by what clipping removes from the score. At
the estimate, every client releases the mean of ``clip_{B'}(g_j) - clip_B(g_j)`` over its rows
(:meth:`~privfedstat.federation.clients.InProcessClients.clipped_excess`, :func:`outer_bound`); their weighted mean
``e`` is ``S_{B'}(theta) - S_B(theta)``, and one Newton step on the B'-clipped equation puts its root at
``theta - J^-1 e`` (J the released Jacobian of the clipped score). The clipped root then sits
``delta = G J^-1 e`` (original scale) from the root at B', with noise covariance ``s_e^2 G J^-2 G^T``
(``s_e`` the aggregated noise sd of e). The derivations and measurements: ``docs/algorithms/fedirls.md``,
"Clipping bias, measured".
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .._warn import warn
from ..exceptions import ClippingBiasWarning
from ..federation.queries import planned_noise_sd, private_mean
from ..federation.session import Session
from .config import COVERAGE_LOSS, critical_value, tolerated_bias

__all__ = ["ClippingDisplacement", "EXCESS_SHARE", "COVERAGE_LOSS", "CLIPPED_WARN", "tolerated_bias", "outer_bound",
           "measure", "note", "warn_clipping", "warn_displacement"]

#: share of the inference's mu^2 for the clipped excess at the estimate (finite B and mu). Chosen, not derived: the
#: Hessian and score releases keep 80% of the rest (their noise sd grows by 1 / sqrt(0.8) = 1.12; interval widths on
#: the natural-sites benchmark at mu >= 2 by at most 2%), and a larger share buys resolution only as its square root
EXCESS_SHARE = 0.2
#: a fit whose private share of clipped per-sample gradients at the estimate exceeds this warns
CLIPPED_WARN = 0.05


@dataclass(frozen=True)
class ClippingDisplacement:
    """The measured displacement of the clipped root (original scale) and what follows from it.

    Attributes
    ----------
    delta : ndarray of shape (p,)
        ``G J^-1 e``: the clipped root minus the root of the equation clipped at B' (original scale).
    noise : ndarray of shape (p, p)
        Covariance of delta's privacy noise.
    se : ndarray of shape (p,)
        The standard errors of the intervals before the displacement (sampling and privacy parts).
    resolved : ndarray of bool, shape (p,)
        ``|delta_j|`` beyond ``z`` noise sds, ``z = Phi^-1(1 - alpha / (2 p))`` (Bonferroni over the p coefficients
        at the intervals' level: a fit whose excess is 0 shows none with probability >= 1 - alpha).
    tolerated : float
        :func:`tolerated_bias` of the intervals' level, in standard errors.
    clip, outer : float
        B and B' (fitting scale, in the basis of the fit's last rounds).
    """

    delta: np.ndarray
    noise: np.ndarray
    se: np.ndarray
    resolved: np.ndarray
    tolerated: float
    clip: float
    outer: float

    @property
    def in_se(self) -> np.ndarray:
        """``delta / se``."""
        return self.delta / self.se

    @property
    def noise_in_se(self) -> np.ndarray:
        """The noise sd of delta in standard errors."""
        return np.sqrt(np.diag(self.noise)) / self.se

    @property
    def widening(self) -> np.ndarray | None:
        """What the intervals add where some displacement is resolved: ``delta delta^T`` plus delta's noise (the
        mean squared error of centring on the clipped root as an estimate of the root at B'); None otherwise."""
        if not np.any(self.resolved):
            return None
        return np.outer(self.delta, self.delta) + self.noise

    @property
    def upper(self) -> np.ndarray:
        """An upper bound on ``|delta|`` in standard errors: ``|delta / se|`` plus the resolution's critical value
        times its noise sd in standard errors (what the measurement cannot rule out)."""
        return np.abs(self.in_se) + critical_value(self.delta.size) * self.noise_in_se

    @property
    def beyond(self) -> np.ndarray:
        """The coefficients whose resolved displacement exceeds the tolerated one."""
        return np.flatnonzero(self.resolved & (np.abs(self.in_se) > self.tolerated))


def outer_bound(clip: float, unit_sd: np.ndarray, alpha: float) -> float:
    """B' of the measurement: ``B + Delta`` with ``Delta = B max(1, b* / (z max_j n_j))``, where ``n_j = B unit_sd_j`` is
    the noise sd, in standard errors, of coefficient j's displacement measured over a window of width B (it grows
    in proportion to the window), b* = :func:`tolerated_bias` and z the resolution's critical value at
    :data:`~privfedstat.inference.config.DIAGNOSTIC_ALPHA`.

    The widest window whose measurement still resolves the tolerated displacement, and at least B (the fit's own
    gradient sensitivity ``2 B / n_i``): a narrower window sees the same clipped rows with the same signal to noise
    (excess and noise both shrink with it) and less of their excess; a wider one than the resolution allows buries
    the displacement in noise. At a large budget the window reaches far values (a gross value), at a small one it is
    B wide (public: post-processing of public sizes and budgets and released matrices)."""
    p = unit_sd.size
    widest = tolerated_bias(alpha) / (critical_value(p) * clip * float(np.max(unit_sd)))
    return clip * (1.0 + max(1.0, widest))


def measure(session: Session, theta: np.ndarray, clip: float, J: np.ndarray, G: np.ndarray, weights: np.ndarray,
            mu: float, cov: np.ndarray, alpha: float, stage: str) -> ClippingDisplacement:
    """Release the clipped excess between B = ``clip`` and B' = :func:`outer_bound` at ``theta`` (``mu``-GDP per
    client, sensitivity ``2 (B' - B) / n_i``, recorded on the ledger under ``stage``) and turn it into the
    displacement of the clipped root (post-processing of it, the released Jacobian ``J`` and the covariance ``cov``
    of the intervals, original scale)."""
    M = G @ np.linalg.inv(J)
    se, spread = np.sqrt(np.diag(cov)), np.sqrt(np.sum(M * M, axis=1))
    # the noise sd of e per unit of window width
    unit = planned_noise_sd(session, "clipped_excess", weights=weights, sensitivity=2.0 / session.sizes, mu=mu)
    outer = outer_bound(clip, unit * spread / se, alpha)
    e, s_e = private_mean(session, "clipped_excess", weights=weights, sensitivity=2.0 * (outer - clip) / session.sizes,
                          bound=outer - clip, mu=mu, stage=stage, theta=theta, clip=clip, outer=outer)
    delta, noise = M @ np.ravel(e), s_e**2 * (M @ M.T)
    resolved = np.abs(delta) > critical_value(delta.size) * np.sqrt(np.diag(noise))
    return ClippingDisplacement(delta, noise, se, resolved, tolerated_bias(alpha), clip, outer)


def note(found: ClippingDisplacement) -> str:
    """The inference's note on the measurement."""
    worst = float(np.max(np.abs(found.in_se)))
    noise = float(np.max(found.noise_in_se))
    if found.widening is not None:
        return (f"clipping at B moves the estimate by up to {worst:.2g} standard errors (+- {noise:.2g}; measured up to "
                f"B' = {found.outer:.3g}): the intervals include that displacement and its noise")
    return (f"no displacement by clipping was found, but at this budget the measurement (clipped excess up to B' = "
            f"{found.outer:.3g}) is coarse: its noise is {noise:.2g} standard errors, so a displacement below about "
            f"{3 * noise:.2g} standard errors would go unseen (the largest measured, {worst:.2g} standard errors, is "
            "within that noise); such a bias comes from the "
            "rows with the largest scores, so a log or a cap of a heavy-tailed covariate or count (an income in "
            "dollars, a length of stay) shrinks it")


def warn_displacement(estimator, found: ClippingDisplacement, names) -> None:
    """ClippingBiasWarning where the measured displacement of some coefficient exceeds the tolerated one."""
    idx = found.beyond
    if not idx.size:
        return
    j = int(idx[np.argmax(np.abs(found.in_se[idx]))])
    shown = ", ".join(str(names[k]) for k in idx[:8]) + (f" and {idx.size - 8} more" if idx.size > 8 else "")
    if getattr(getattr(estimator, "family_", None), "location", True):  # a response that can be skewed and rescaled
        cause = "a skewed or heavy-tailed response, or a few gross values"
        remedy = "raise clip, rescale or transform the response (e.g. its log), or use a robust family (family='huber')"
    else:  # binary, count or class responses: the large gradients come from the covariates
        cause = "covariate values far from the rest (large ||x||), or a clip too small for the covariates' scale"
        remedy = "raise clip, or rescale or cap the covariates (scaling=)"
    warn(
        f"clipping moves the {estimator.method} estimate: for {shown} the clipped root lies about "
        f"{abs(found.in_se[j]):.2g} standard errors (+- {found.noise_in_se[j]:.2g}, a private measurement at the estimate) "
        f"from the root of the equation clipped at B' = {found.outer:.3g} (B = {found.clip:.3g}), more than the "
        f"{found.tolerated:.2g} its intervals tolerate: {cause}. The intervals were widened by that displacement; for "
        f"the unclipped (MLE / OLS) target {remedy}.",
        ClippingBiasWarning,
    )


def warn_clipping(estimator, inference) -> None:
    """The fitted ``estimator``'s ClippingBiasWarnings from its ``inference`` (an :class:`InferenceResult`): where the
    clipped root's measured displacement exceeds the tolerated one (:func:`warn_displacement`), and where more than
    ``CLIPPED_WARN`` of the per-sample gradients are clipped at the estimate (a private count released with the
    inference, :func:`privfedstat.inference.core.infer`).

    Clipping a gradient replaces the score by a bounded one: the fit then solves a Huberised
    equation whose root moves away from the MLE as more rows are clipped, by an amount the
    intervals (centred on the fit) do not contain. The share is a symptom (measured: the Gaussian
    ``diabetes`` data with the raw response, 5 sites, mu = 8: most rows clipped, estimates 2-7 MLE SEs
    off with intervals that miss), not a measure: 0.3-1.8% clipped moved a skewed response's root by
    3-4 SE; the displacement measures it where the budget resolves it.
    """
    names = estimator._coef_labels()
    if inference.clipping_displacement is not None:
        warn_displacement(estimator, inference.clipping_displacement, names)
    if inference.sign_balance is not None:
        from .residual_signs import warn_asymmetry

        warn_asymmetry(estimator, inference.sign_balance, inference.clipping_displacement, names,
                       inference.clipped_fraction)
    if inference.clipped_fraction is None or inference.clipped_fraction[0] <= CLIPPED_WARN:
        return
    share, sd = inference.clipped_fraction
    family = getattr(estimator, "family_", None)
    location = getattr(family, "location", True)  # a response that can be rescaled
    rescale = "the response or covariates (e.g. a Gaussian response to unit scale)" if location else "the covariates"
    # the bootstrap simulates a likelihood without an offset only (inference.bootstrap refuses the others)
    simulable = family is not None and family.likelihood and not getattr(estimator, "has_offset_", False)
    remedy = (", raise clip (or AutoClip's pilot_quantile), or use inference='bootstrap', which simulates the clipping"
              if simulable else " or raise clip (or AutoClip's pilot_quantile)")
    warn(
        f"{100 * share:.0f}% (+- {100 * sd:.0f}%) of the per-sample gradients are clipped at the {estimator.method} "
        f"estimate (B = {estimator.clip_ if hasattr(estimator, 'clip_') else float('nan'):.3g}): it solves the clipped "
        f"equation, whose root can be biased away from the MLE by more than the intervals allow. Rescale {rescale}"
        f"{remedy}.",
        ClippingBiasWarning,
    )
