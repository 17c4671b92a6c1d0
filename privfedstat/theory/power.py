"""Precision and power of the Wald inference on one coefficient, given its standard error.

A fit's interval for coefficient j is ``theta_j +- z_{1 - alpha/2} SE_j`` and its test of
``theta_j = 0`` rejects when ``|theta_j| / SE_j > z_{1 - alpha/2}``. With the estimate normal
around ``delta`` (the value the fit estimates) with sd SE, the two-sided test rejects with
probability ``Phi(delta / SE - z) + Phi(-delta / SE - z)``: statsmodels'
``NormalIndPower().power(effect_size=delta / SE, nobs1=1, alpha=alpha, ratio=0)``. Which SE to
put in is the business of the caller (:func:`privfedstat.planning.power.plan_study` predicts the
sampling and privacy parts of a private fit's).
"""

from __future__ import annotations

import numpy as np

__all__ = ["wald_power", "wald_half_width"]


def wald_half_width(se, alpha: float = 0.05) -> np.ndarray:
    """Half-width ``z_{1 - alpha/2} SE`` of the level ``1 - alpha`` Wald interval."""
    from scipy import stats  # here, not at module level: scipy.stats is slow to import

    return stats.norm.ppf(1.0 - alpha / 2.0) * np.asarray(se, dtype=np.float64)


def wald_power(effect, se, alpha: float = 0.05) -> np.ndarray:
    """Probability that the two-sided level-alpha Wald test of ``theta = 0`` rejects when ``theta ~ N(effect, se^2)``.

    Parameters
    ----------
    effect : float or array
        delta, the value the estimate is centred on.
    se : float or array
        Its standard deviation (> 0).
    alpha : float, default 0.05

    Returns
    -------
    ndarray
        ``Phi(|delta| / se - z) + Phi(-|delta| / se - z)``, ``z = z_{1 - alpha/2}``; alpha at delta = 0.
    """
    from scipy import stats  # here, not at module level: scipy.stats is slow to import

    z = stats.norm.ppf(1.0 - alpha / 2.0)
    r = np.abs(np.asarray(effect, dtype=np.float64)) / np.asarray(se, dtype=np.float64)
    return stats.norm.cdf(r - z) + stats.norm.cdf(-r - z)
