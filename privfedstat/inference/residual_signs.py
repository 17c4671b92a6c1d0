"""Whether the residuals are symmetric: the sign score at the estimate, and what it means for clipping.

For a location family with errors symmetric given x (Gaussian), clipping at any bound B leaves the root of the
score where OLS's target is: ``E[clip_B(r x) | x] = 0`` at the true coefficients for every B. Clipping moves the
target only when the errors are asymmetric (a skewed response, a point mass, a contaminated share), and then by
what the rows beyond B pull, which a small budget cannot measure (:mod:`.clipping_bias`: its noise at mu = 2 is
several standard errors). The asymmetry itself is cheap to see: every client releases the mean of its unit
gradients ``u_j = g_j / ||g_j||`` (``sign(z_j - y_j) x_j / ||x_j||``, the score of the equation clipped at a
bound ``eps -> 0``; verb ``gradients`` at ``eps``, divided by ``eps``; sensitivity ``2 / n_i``), whose signal is
a share of all N rows, not of the ~1% beyond B. The derivation and measurements: ``docs/guide/clipping-bias.md``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from .._warn import warn
from ..exceptions import ClippingBiasWarning
from ..federation.queries import pearson_dispersion, private_mean
from ..federation.session import Session
from ..kernels.glm_nb import MIN_BOUND
from .config import critical_value

__all__ = ["SignBalance", "SIGN_SHARE", "applies", "measure_signs", "note", "warn_asymmetry"]

#: share of the inference's mu^2 for the sign score and its residual variance (half each; finite B and mu, a Gaussian
#: fit's model-based covariance). Chosen, as the clipped count's share: the score's noise sd, 2 sqrt(2 m) / (mu_s N)
#: per coordinate, is about 0.6 of its sampling sd at mu = 2 (N = 3000 over 10 sites), and the Hessian's noise sd
#: grows by 1 / sqrt(0.95) = 2.6%
SIGN_SHARE = 0.05
#: the released residual variances enter the null spread lowered by this many of their noise sds (and the test is
#: skipped where neither stays positive), as the released Hessian's eigenvalues are floored at FLOOR_NOISE_SDS = 1
#: (:mod:`~privfedstat.inference.core`); the null spread's other bounds (sampling variance 1 / N, H for
#: E[x x^T / ||x||]) keep the test conservative (benign fits below 1.6 null sds, docs/guide/clipping-bias.md)
SCALE_NOISE_SDS = 1.0
#: a second residual variance, each square capped at (INNER B)^2: its noise a quarter of the B^2-capped one's, and
#: capping only lowers it, so it too bounds s^2 from below. The B^2-capped variance alone (noisy where B lies far in
#: the tail) left one skewed fit of 10 at mu = 2 untested and missing OLS by 2.9 SE (0.18 +- 0.15)
INNER = 0.5
#: the bound eps at which the unit gradients are released, relative to B: a row with ``||g|| <= eps`` (a residual of
#: exactly 0, a tie) adds ``g / eps``, of norm below 1, instead of its sign
EPS = 1e-9


@dataclass(frozen=True)
class SignBalance:
    """The released sign score at the estimate and its null spread.

    Attributes
    ----------
    score : ndarray of shape (p,)
        Weighted mean over rows of ``u_j = g_j / ||g_j||``, mapped to the original coefficients.
    null_sd : ndarray of shape (p,)
        A bound on its sd under symmetric errors given x (normal, with the released scale), at an estimate that
        carries the fit's sampling and privacy error (:func:`measure_signs`).
    z : float
        Bonferroni critical value over the p coordinates at :data:`DIAGNOSTIC_ALPHA`.
    """

    score: np.ndarray
    null_sd: np.ndarray
    z: float

    @property
    def in_sds(self) -> np.ndarray:
        """``score / null_sd``."""
        return self.score / self.null_sd

    @property
    def asymmetric(self) -> np.ndarray:
        """Coordinates whose sign score is beyond ``z`` null sds."""
        return np.flatnonzero(np.abs(self.in_sds) > self.z)


def applies(family, cov_type: str) -> bool:
    """Whether a fit gets the sign score: a location likelihood (Gaussian) with the model-based covariance (whose
    released residual variance gives the null spread). Binary and count residuals are asymmetric by their law, and
    a Huber fit's target is the clipped root by construction."""
    return bool(getattr(family, "location", False) and getattr(family, "likelihood", False) and cov_type == "model")


def measure_signs(session: Session, theta: np.ndarray, clip: float, weights: np.ndarray, mu: float, H: np.ndarray,
                  V: np.ndarray, scale: tuple[float, float], G: np.ndarray, stage: str) -> SignBalance:
    """Release the mean unit gradient at ``theta`` (sensitivity ``2 eps / n_i`` at bound ``eps = EPS clip``, stage
    ``stage``) and the residual variance with each square capped at ``(INNER clip)^2`` (stage ``stage + "-scale"``),
    each ``mu / sqrt(2)``-GDP per client, and the score's null spread from the released Hessian ``H``, the fit's
    covariance ``V`` (sampling and privacy) and the larger of the two residual variances (``scale = (s^2, its noise
    sd)`` is the inference's, capped at B^2), each lowered by ``SCALE_NOISE_SDS`` noise sds (none positive: no test,
    infinite null sds); all on the fitting scale, the score and its spread mapped to the original coefficients by
    ``G^-T`` (the score of ``beta = G theta + shift``; post-processing).

    The null covariance is bounded by ``(1 / N + noise^2) I + (2 / pi) H V H / s^2``: the unit vectors' second
    moment is at most I (their norm is 1), and at an estimate off by d the mean of ``u`` moves by about
    ``2 phi(0) / s E[x x^T / ||x||] d``, whose matrix is at most H (``||x|| >= 1`` with an intercept)."""
    eps = max(EPS * clip, 2.0 * MIN_BOUND)  # bounds the kernels serve (as the inference's scale release)
    cap = min(max(INNER * clip, math.sqrt(2.0 * MIN_BOUND)), math.sqrt(1e307 / float(np.max(session.sizes)))) ** 2
    sens = 2.0 * eps / session.sizes
    score, noise = private_mean(session, "gradients", weights=weights, sensitivity=sens, bound=eps,
                                mu=mu / math.sqrt(2.0), stage=stage, theta=theta, clip=eps)
    score, noise = np.ravel(score) / eps, noise / eps
    inner = pearson_dispersion(session, theta, cap, mu / math.sqrt(2.0), theta.size, stage + "-scale")
    s2 = max(scale[0] - SCALE_NOISE_SDS * scale[1], inner[0] - SCALE_NOISE_SDS * inner[1])  # lowered: a wider band
    z = critical_value(score.size)
    back = np.linalg.pinv(G).T  # G^-T (G maps the fitting scale onto the original one, invertible)
    if not s2 > 0:  # the density at 0 is not bounded: the fit's own error may set any sign balance
        return SignBalance(back @ score, np.full(score.size, np.inf), z)
    bound = (1.0 / float(np.sum(session.sizes)) + noise**2) * np.eye(score.size) + (2.0 / math.pi) * (H @ V @ H) / s2
    null_sd = np.sqrt(np.maximum(np.diag(back @ bound @ back.T), np.finfo(float).tiny))
    return SignBalance(back @ score, null_sd, z)


def note(signs: SignBalance) -> str:
    """The inference's note on the residuals' symmetry and on the target of the clipped fit."""
    worst = float(np.max(np.abs(signs.in_sds)))
    target = ("the intervals are for the root of the clipped equation (a bounded-influence, Huber-type estimate: "
              "no single row moves it by more than its share of B, which is what makes it private), not for OLS "
              "where rows beyond B pull asymmetrically; a few gross values move OLS and are hidden by the privacy "
              "guarantee")
    if not np.all(np.isfinite(signs.null_sd)):
        return (f"the residuals' symmetry was not tested (their released variance is not resolved above 0, so the "
                f"fit's own error could set any balance of signs): {target}")
    if signs.asymmetric.size:
        return f"the residuals are asymmetric (sign score up to {worst:.1f} null sds from 0): {target}"
    return (f"the residuals' signs are balanced (sign score within {worst:.1f} null sds of 0, resolved beyond "
            f"{signs.z:.1f}): with symmetric errors clipping leaves the target of OLS; {target}")


def warn_asymmetry(estimator, signs: SignBalance, found, names, clipped: tuple[float, float] | None = None) -> None:
    """ClippingBiasWarning where the residuals are asymmetric (:attr:`SignBalance.asymmetric`) and the clipped
    excess measured at the estimate (``found``, a :class:`~.clipping_bias.ClippingDisplacement`) cannot rule out a
    displacement beyond the tolerated one; none where it resolves one (its own warning names it) or bounds it.

    The asymmetry is the cause, not a size: the displacement is what the rows beyond B pull, which neither the sign
    score nor, at this budget, the excess measures. So the warning states what is not ruled out, with the released
    share of rows beyond B (``clipped``, ``(share, sd)``): where it resolves none (below the one-sided critical value),
    it says so, with the most rows the count cannot resolve (docs/guide/clipping-bias.md, "The rule")."""
    idx = signs.asymmetric
    if not idx.size or found is None or found.beyond.size:
        return
    upper = found.upper
    if not np.any(upper > found.tolerated):
        return
    j = int(idx[np.argmax(np.abs(signs.in_sds[idx]))])
    shown = ", ".join(str(names[k]) for k in idx[:8]) + (f" and {idx.size - 8} more" if idx.size > 8 else "")
    beyond = ""
    if clipped is not None:
        share = f"{100 * clipped[0]:.2g}% (+- {100 * clipped[1]:.2g}%) of the rows lie beyond B at the estimate"
        reach = critical_value(sides=1) * clipped[1]  # what the count cannot resolve, one-sided
        beyond = (f"{share}, none resolved: a displacement would come from rows the count cannot see (up to "
                  f"{100 * (clipped[0] + reach):.2g}% of them); " if not clipped[0] > reach else f"{share}; ")
    warn(
        f"the {estimator.method} residuals are asymmetric (sign score of {shown} {abs(signs.in_sds[j]):.1f} null sds "
        "from 0: more rows on one side of the fit than symmetric errors allow): a skewed response, a point mass or a "
        "contaminated share. With asymmetric errors the rows beyond the bound B pull the clipped root (the intervals' "
        "target, a robust Huber-type location) away from the OLS / MLE target, and this budget cannot measure how "
        f"far: {beyond}the clipped excess up to B' = {found.outer:.3g} (B = {found.clip:.3g}) has noise "
        f"{float(np.max(found.noise_in_se)):.2g} standard errors, so displacements up to {float(np.max(upper)):.2g} "
        "standard errors are not ruled out, and the intervals may miss the OLS / MLE value. For that target raise mu "
        "(the excess's noise falls as 1 / mu) or transform the response towards symmetric errors; to make the robust "
        "target explicit use family='huber'.",
        ClippingBiasWarning,
    )
