"""The exhaustive paired bootstrap: every n^n resample of n seedwise differences, its interval and p-value.

References
----------
Efron, B. (1979). Bootstrap methods: another look at the jackknife. Ann. Statist. 7, 1-26.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = ["PairedBootstrap", "exhaustive_bootstrap_means", "exhaustive_paired_bootstrap"]

_MAX_RESAMPLES = 10**7


def _diffs(diffs) -> np.ndarray:
    d = np.asarray(diffs, dtype=np.float64)
    if d.ndim != 1 or d.size < 2 or not np.all(np.isfinite(d)):
        raise ValueError("diffs must be a 1-D array of at least 2 finite paired differences (one per seed).")
    if float(d.size) ** d.size > _MAX_RESAMPLES:
        raise ValueError(f"an exhaustive bootstrap of {d.size} differences has {d.size}^{d.size} resamples, more than "
                         f"{_MAX_RESAMPLES:.0e}; at most 7 differences are supported.")
    return d


def exhaustive_bootstrap_means(diffs) -> np.ndarray:
    """The means of all n^n ordered resamples with replacement of the n paired differences.

    Every index tuple (i_1, ..., i_n) in {1..n}^n occurs once, in the order of
    ``itertools.product(range(n), repeat=n)``; the mean of resample (i_1..i_n) is
    (d_{i_1} + ... + d_{i_n}) / n (summed left to right). n^n must be at most 10^7 (n <= 7).
    """
    d = _diffs(diffs)
    sums = np.zeros(1)
    for _ in range(d.size):
        sums = np.add.outer(sums, d).ravel()
    return sums / d.size


@dataclass(frozen=True)
class PairedBootstrap:
    """The exhaustive paired bootstrap of one comparison.

    Attributes
    ----------
    estimate : float
        Mean of the paired differences (positive favours the candidate).
    low, high : float
        Percentile interval: the (1 - level)/2 and (1 + level)/2 percentiles of the n^n resampled
        means (numpy's linear interpolation between order statistics).
    n_resamples : int
        n^n (3125 for five seeds).
    favouring : int
        Seeds whose difference is positive ("four of five seeds favour p = 6").
    n_seeds : int
        n.
    p_value : float
        Bootstrap p-value for H0: mean difference <= 0, the share of the n^n resampled means
        that are <= 0 (the percentile-bootstrap definition: below ``(1 - level)/2`` exactly when
        the lower percentile bound is above 0, up to interpolation). It is 0 when every
        difference is positive.
    """

    estimate: float
    low: float
    high: float
    n_resamples: int
    favouring: int
    n_seeds: int
    p_value: float


def exhaustive_paired_bootstrap(diffs, level: float = 0.95) -> PairedBootstrap:
    """Exhaustive paired bootstrap of seedwise differences (5^5 = 3125 resamples for five seeds).

    Parameters
    ----------
    diffs : array-like of shape (n,)
        d_s = metric(reference, seed s) - metric(candidate, seed s), oriented so that positive
        favours the candidate (for a loss: reference loss minus candidate loss). 2 <= n <= 7.
    level : float, default 0.95
        Coverage of the percentile interval (2.5% and 97.5% percentiles for 0.95).

    Returns
    -------
    PairedBootstrap
    """
    if isinstance(level, bool) or not isinstance(level, (int, float)) or not 0 < level < 1:
        raise ValueError(f"level must be in (0, 1), got {level!r}.")
    d = _diffs(diffs)
    means = exhaustive_bootstrap_means(d)
    low, high = np.percentile(means, [50 * (1 - level), 50 * (1 + level)])
    return PairedBootstrap(estimate=float(d.mean()), low=float(low), high=float(high), n_resamples=means.size,
                           favouring=int(np.sum(d > 0)), n_seeds=d.size, p_value=float(np.mean(means <= 0)))
