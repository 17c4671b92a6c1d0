"""What a fit reports about its uncertainty: :class:`InferenceResult` and :class:`WaldTestResult`.

Everything here is on the original scale, in ``coef_.ravel(order="F")`` order (equation-major for
the multinomial family, as statsmodels' ``MNLogit``), and is post-processing of the fit's released
values: no privacy cost.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from .clipping_bias import ClippingDisplacement
    from .residual_signs import SignBalance

__all__ = ["InferenceResult", "WaldTestResult", "NoInferenceError"]


class NoInferenceError(ValueError, AttributeError):
    """Standard errors, intervals or tests were asked of a fit made with ``inference=None``."""


@dataclass(frozen=True)
class WaldTestResult:
    """Wald test of ``R theta = q`` on the fit's covariance.

    Attributes
    ----------
    statistic : float
        ``(R theta - q)^T (R V R^T)^-1 (R theta - q)``, chi-square with ``df`` degrees of freedom
        under the null (statsmodels' ``wald_test(..., use_f=False)``).
    df : int
        Number of restrictions (rows of R).
    pvalue : float
    """

    statistic: float
    df: int
    pvalue: float


@dataclass
class InferenceResult:
    """Uncertainty of a fit: covariance (sampling + privacy noise), intervals, tests.

    Attributes
    ----------
    params : ndarray of shape (p,)
        The estimate, ``coef_.ravel(order="F")``.
    cov : ndarray of shape (p, p)
        Total covariance, ``cov_sampling + cov_privacy + cov_path`` (bootstrap: of the draws).
    cov_sampling : ndarray of shape (p, p) or None
        Sampling part: ``H^-1 / N`` or the sandwich ``H^-1 Sigma H^-1 / N``, the pooled root's (the MLE's) about
        the truth (None for the bootstrap, whose draws do not separate the parts); a fit whose weights are not the
        sites' sizes has the rest of its weighted ``c H^-1`` in ``cov_path``
        (:func:`~privfedstat.inference.protocol_part.weights_move`).
    cov_privacy : ndarray of shape (p, p) or None
        Covariance of the protocol's privacy noise in the estimate (linearised; zeros with
        mu = inf; None for the bootstrap): the part a larger mu shrinks.
    cov_type : str
        ``"model"``, ``"sandwich"`` or ``"bootstrap"``.
    alpha : float
        Default level of the intervals.
    mu : float
        GDP budget per client spent by the inference releases (inf when none was noised).
    method : str
        How the uncertainty was computed (the summary's "Inference" line).
    draws : ndarray of shape (n_boot, p) or None
        Bootstrap estimates (original scale), else None.
    bias : ndarray of shape (p,) or None
        Bootstrap bias ``mean(draws) - params``, else None.
    clipped_fraction : tuple of float or None
        Private share of the per-sample gradients clipped at the estimate and its noise sd (a
        released count; None with mu = inf, no clipping or the bootstrap).
    dispersion : tuple of float or None
        Pearson dispersion at the estimate and its noise sd, for a count family (:attr:`Family.overdispersion`;
        exact with mu = inf, a capped private sum otherwise): about 1 when the counts follow the family's law,
        above it when they vary more (the model-based variances are then too small by about that factor); None
        for other families and the bootstrap.
    clipping_displacement : ClippingDisplacement or None
        The displacement of the clipped root from the root at twice the bound, measured at the estimate
        (:mod:`~privfedstat.inference.clipping_bias`; None with mu = inf, no clipping or the bootstrap).
    sign_balance : SignBalance or None
        The residuals' sign score at the estimate (:mod:`~privfedstat.inference.residual_signs`; a Gaussian fit's
        model-based inference with finite mu and B, else None).
    df : ndarray of shape (p,) or None
        Degrees of freedom of each estimated variance, from the noise of the releases it is computed from
        (:func:`~privfedstat.inference.covariance.variance_df`): intervals and p-values use Student's t
        with them; infinite (or None) where nothing is noised, the normal ones.
    notes : list of str
        Anything the user should know (fallbacks, floors).
    cov_path : ndarray of shape (p, p) or None
        The path remainder: FedIRLS's error that its last Newton step leaves where the released gradients show the
        Newton matrix wrong (:class:`~privfedstat.theory.noise.IRLSNoise`'s ``last_step``), with a re-weighed root's
        move from the pooled one: its site effects' shift and its sampling part
        (:func:`~privfedstat.inference.protocol_part.weights_move`). Not privacy noise: the first does not shrink as
        mu grows, more rounds (``n_rounds``) shrink it. ``cov_privacy + cov_path`` is the fit's deviation from the
        MLE, but for the clipping bias. None (read as zeros) for the other estimators and the bootstrap.
    """

    params: np.ndarray
    cov: np.ndarray
    cov_sampling: np.ndarray | None
    cov_privacy: np.ndarray | None
    cov_type: str
    alpha: float
    mu: float
    method: str
    draws: np.ndarray | None = None
    bias: np.ndarray | None = None
    notes: list[str] = field(default_factory=list)
    clipped_fraction: tuple[float, float] | None = None
    df: np.ndarray | None = None
    dispersion: tuple[float, float] | None = None
    clipping_displacement: ClippingDisplacement | None = None
    sign_balance: SignBalance | None = None
    cov_path: np.ndarray | None = None

    def withheld(self, reason: str) -> InferenceResult:
        """This result without standard errors or intervals (``cov`` NaN; both parts kept for diagnosis).

        For a fit that did not reach the optimum of its objective: its covariance describes the
        noise around a point it did not reach, and intervals built on it can miss by more than
        they claim.
        """
        return replace(self, cov=np.full_like(self.cov, np.nan),
                       notes=[*self.notes, f"standard errors and intervals withheld (NaN): {reason}"])

    @property
    def bse(self) -> np.ndarray:
        """Standard errors ``sqrt(diag(cov))``."""
        return np.sqrt(np.maximum(np.diag(self.cov), 0.0))

    @property
    def privacy_share(self) -> np.ndarray | None:
        """Share of each coefficient's variance that is privacy noise, ``diag(cov_privacy) / diag(cov)``
        (None for the bootstrap, whose draws do not separate the parts)."""
        if self.cov_privacy is None:
            return None
        with np.errstate(divide="ignore", invalid="ignore"):
            return np.diag(self.cov_privacy) / np.diag(self.cov)

    @property
    def path_share(self) -> np.ndarray | None:
        """Share of each coefficient's variance that is the path remainder, ``diag(cov_path) / diag(cov)`` (zeros
        without one; None for the bootstrap)."""
        if self.cov_privacy is None:
            return None
        if self.cov_path is None:
            return np.zeros(self.params.size)
        with np.errstate(divide="ignore", invalid="ignore"):
            return np.diag(self.cov_path) / np.diag(self.cov)

    @property
    def cov_protocol(self) -> np.ndarray | None:
        """The protocol's whole error around the root, ``cov_privacy + cov_path`` (None for the bootstrap)."""
        if self.cov_privacy is None or self.cov_path is None:
            return self.cov_privacy
        return self.cov_privacy + self.cov_path

    @property
    def zvalues(self) -> np.ndarray:
        """``params / bse``."""
        with np.errstate(divide="ignore", invalid="ignore"):
            return self.params / self.bse

    @property
    def pvalues(self) -> np.ndarray:
        """Two-sided p-values of ``params = 0``: normal, or Student's t with :attr:`df`."""
        from scipy import stats  # here, not at module level: scipy.stats is slow to import

        if self.df is None:
            return 2.0 * stats.norm.sf(np.abs(self.zvalues))
        return 2.0 * stats.t.sf(np.abs(self.zvalues), self.df)

    def conf_int(self, alpha: float | None = None) -> np.ndarray:
        """Intervals of level ``1 - alpha``, shape (p, 2).

        Wald intervals ``params -+ z_{1 - alpha/2} bse`` (Student's ``t_{1 - alpha/2, df}`` with the
        degrees of freedom :attr:`df` of a variance computed from noisy releases); with the bootstrap the "basic"
        intervals ``[2 params - q_{1 - alpha/2}, 2 params - q_{alpha/2}]`` of the draws, which also
        correct for the bias the draws show (e.g. from clipping).
        """
        alpha = self.alpha if alpha is None else _check_alpha(alpha)
        if self.draws is not None:
            lo, hi = np.quantile(self.draws, [alpha / 2, 1 - alpha / 2], axis=0)
            return np.column_stack([2 * self.params - hi, 2 * self.params - lo])
        from scipy import stats  # here, not at module level: scipy.stats is slow to import

        quantile = stats.norm.ppf(1 - alpha / 2) if self.df is None else stats.t.ppf(1 - alpha / 2, self.df)
        half = quantile * self.bse
        return np.column_stack([self.params - half, self.params + half])

    def wald_test(self, R, q=None) -> WaldTestResult:
        """Wald test of ``R params = q`` (``q`` defaults to zeros) on ``cov``.

        Parameters
        ----------
        R : array-like of shape (r, p) or (p,)
            Restrictions (a 1-d array is one restriction).
        q : array-like of shape (r,), optional
        """
        p = self.params.size
        try:
            R = np.atleast_2d(np.asarray(R, dtype=np.float64))
        except (TypeError, ValueError):
            raise TypeError(f"R must be numbers: an array of shape (r, {p}) (one row per restriction) or, on a fitted "
                            f"estimator, a list of coefficient names; got {R!r}.") from None
        if R.size == 0:
            raise ValueError(f"R is empty: a Wald test needs at least one restriction, a row of {p} weights on the "
                             "coefficients (e.g. a row of the identity) or, on a fitted estimator, a list of "
                             "coefficient names such as ['x1'].")
        if not np.all(np.isfinite(R)):
            raise ValueError("R contains NaN or infinite values; restrictions must be finite.")
        if R.ndim != 2 or R.shape[1] != p or R.shape[0] < 1:
            raise ValueError(f"R must have shape (r, {p}) (one row per restriction), got {R.shape}.")
        q = np.zeros(R.shape[0]) if q is None else np.atleast_1d(np.asarray(q, dtype=np.float64))
        if q.shape != (R.shape[0],):
            raise ValueError(f"q must have one value per restriction ({R.shape[0]}), got shape {q.shape}.")
        if not np.all(np.isfinite(q)):
            raise ValueError("q contains NaN or infinite values; the hypothesised values must be finite.")
        if np.linalg.matrix_rank(R) < R.shape[0]:
            raise ValueError("the restrictions R are linearly dependent (rank < number of rows); drop redundant rows.")
        diff = R @ self.params - q
        stat = float(diff @ np.linalg.solve(R @ self.cov @ R.T, diff))
        df = R.shape[0]
        from scipy import stats  # here, not at module level: scipy.stats is slow to import

        return WaldTestResult(stat, df, float(stats.chi2.sf(stat, df)))


def _check_alpha(alpha) -> float:
    if isinstance(alpha, bool) or not isinstance(alpha, (int, float, np.floating)) or not 0 < alpha < 1 \
            or math.isnan(alpha):
        raise ValueError(f"alpha must be a number in (0, 1), e.g. 0.05 for 95% intervals, got {alpha!r}.")
    return float(alpha)
