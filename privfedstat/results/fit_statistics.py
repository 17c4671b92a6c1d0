"""Goodness of fit of a GLM at its estimate: log-likelihood, deviance, AIC, BIC, pseudo-R^2.

statsmodels' definitions (``GLMResults`` for the scalar families, ``MNLogit`` for the multinomial):
the Gaussian log-likelihood is concentrated at the MLE of the variance ``SSR / N``, the null
model's at its own, ``SST / N`` (so the Gaussian pseudo-R^2 is the R^2 of least squares;
statsmodels' GLM evaluates its null model at the full model's scale instead); AIC
``-2 llf + 2 k`` and BIC ``-2 llf + k log N`` with ``k`` coefficients (``bic_llf``); the
pseudo-R^2 is Cox and Snell's ``1 - exp(2 (llnull - llf) / N)``, with ``llnull`` the
log-likelihood of the intercept-only model (closed form for canonical links).

These are sums over every row at the estimate: exact only where the rows are at hand (a
non-private fit, mu = inf). With finite mu they would be releases about the clients' data, which
:class:`~privfedstat.results.fitted.FittedResults` does not make (see its ``summary``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ..families import Family

__all__ = ["FitStatistics", "fit_statistics", "log_likelihood"]


@dataclass(frozen=True)
class FitStatistics:
    """Goodness of fit at the estimate (statsmodels' names).

    Attributes
    ----------
    nobs : int
        Rows N.
    n_params : int
        Coefficients k.
    llf : float
        Log-likelihood at the estimate.
    llnull : float
        Log-likelihood of the intercept-only model (nan where it has no closed form: logistic with an offset).
    deviance : float
        ``sum_j`` unit deviance at the estimate (Gaussian: the residual sum of squares).
    """

    nobs: int
    n_params: int
    llf: float
    llnull: float
    deviance: float

    @property
    def aic(self) -> float:
        """Akaike's criterion ``-2 llf + 2 k``."""
        return -2.0 * self.llf + 2.0 * self.n_params

    @property
    def bic(self) -> float:
        """Schwarz's criterion ``-2 llf + k log N`` (statsmodels' ``bic_llf``)."""
        return -2.0 * self.llf + self.n_params * math.log(self.nobs)

    @property
    def pseudo_rsquared(self) -> float:
        """Cox and Snell's ``1 - exp(2 (llnull - llf) / N)`` (statsmodels' ``pseudo_rsquared("cs")``)."""
        return -math.expm1(2.0 * (self.llnull - self.llf) / self.nobs)

    @property
    def mcfadden_rsquared(self) -> float:
        """McFadden's ``1 - llf / llnull`` (statsmodels' ``Logit`` / ``MNLogit`` ``prsquared``)."""
        return 1.0 - self.llf / self.llnull


def log_likelihood(family: Family, y: np.ndarray, z: np.ndarray) -> float:
    """Log-likelihood of responses ``y`` at linear predictors ``z`` (shape (n,), multinomial (n, K - 1)).

    The family's loss is the negative log-likelihood up to a term in ``y`` alone: Poisson's
    ``log y!`` is added back; the Gaussian is concentrated at ``sigma^2 = SSR / N``.
    """
    if not family.likelihood:
        raise ValueError(f"the {family.name} loss is not a log-likelihood: no llf, deviance, AIC, BIC or pseudo-R^2.")
    if family.has_dispersion:
        n = y.shape[0]
        return -0.5 * n * (math.log(2.0 * math.pi * float(np.sum((y - z) ** 2)) / n) + 1.0)
    llf = -float(np.sum(family.loss(y, z)))
    if family.name == "poisson":
        from scipy.special import gammaln  # scipy.special: imported here, not at module level (slow to import)

        llf -= float(np.sum(gammaln(y + 1.0)))
    return llf


def _null_predictor(family: Family, y: np.ndarray, offset: np.ndarray | None) -> np.ndarray | None:
    """Linear predictors of the intercept-only MLE, or None where it has no closed form."""
    o = np.zeros(y.shape[0]) if offset is None else offset
    if family.response_levels:  # multinomial (K = 2 included): log(n_k / n_0), the class shares
        counts = np.bincount(y.astype(np.int64), minlength=family.n_outputs + 1).astype(np.float64)
        with np.errstate(divide="ignore"):
            return np.broadcast_to(np.log(counts[1:] / counts[0]), (y.shape[0], family.n_outputs))
    if family.name == "poisson":  # sum_j exp(a + o_j) = sum_j y_j
        return math.log(float(np.sum(y)) / float(np.sum(np.exp(o)))) + o
    if family.has_dispersion:  # least squares: mean of y - o
        return float(np.mean(y - o)) + o
    if offset is None:  # logistic: the mean of y
        from scipy.special import logit  # scipy.special: imported here, not at module level (slow to import)

        return np.full(y.shape[0], float(logit(np.mean(y))))
    return None


def fit_statistics(family: Family, y: np.ndarray, z: np.ndarray, n_params: int,
                   offset: np.ndarray | None = None) -> FitStatistics:
    """The :class:`FitStatistics` of responses ``y`` at linear predictors ``z`` (``offset`` included in ``z``)
    of a model with ``n_params`` coefficients; ``offset`` (the rows' own) fixes the null model."""
    z0 = _null_predictor(family, y, offset)
    return FitStatistics(
        nobs=int(y.shape[0]), n_params=int(n_params), llf=log_likelihood(family, y, z),
        llnull=math.nan if z0 is None else log_likelihood(family, y, z0),
        deviance=float(np.sum(family.deviance(y, z))),
    )
