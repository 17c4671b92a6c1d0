"""Feature scaling without silent leaks.

Gradient methods with a fixed step size diverge on raw covariates (ages in years, incomes), so the
estimators can fit on affinely rescaled columns ``x'_j = (x_j - c_j) / s_j`` and report the
coefficients on the original scale. The centre and scale come either from

* :class:`FeatureBounds` -- public, data-independent bounds (e.g. a questionnaire's ranges): no
  privacy cost; or
* :class:`PrivateStandardize` -- a private estimate spending a declared share of each client's mu:
  for every scaled column the pooled median (centre) and the pooled ``quantile`` of
  ``|x_j - centre|`` (scale) are found by noisy bisection on public grids, with client counts of
  sensitivity 1, exactly as :class:`~privfedstat.privacy.AutoClip` does for the clipping bound.
  Only the order of magnitude matters: the rescaling is a reparametrisation, and privacy comes
  from the per-sample gradient clipping, so a rough private estimate is enough.

Centring needs an intercept column (``intercept``) to absorb it; without one, columns are only
scaled. Back-transformation (for each output column of Theta): ``theta_j = theta'_j / s_j`` for
scaled j, ``theta_0 = theta'_0 - sum_j c_j theta'_j / s_j``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from ..data.federated import FederatedData
from ..privacy.clipping import private_grid_quantile

__all__ = ["FeatureBounds", "PrivateStandardize", "Scaler", "MAX_SCALED"]

#: rescaled values are clamped to [-MAX_SCALED, MAX_SCALED]: (x - c) / s overflows for huge finite x
MAX_SCALED = 1e300


@dataclass(frozen=True)
class FeatureBounds:
    """Public bounds for each column; columns with ``lower == upper`` (e.g. the intercept) are left alone.

    Parameters
    ----------
    lower, upper : sequence of float, one per column of X
    intercept : int or None
        Index of the intercept column (used to absorb the centring), or None.
    """

    lower: tuple[float, ...]
    upper: tuple[float, ...]
    intercept: int | None = 0

    def __post_init__(self) -> None:
        lo, hi = np.asarray(self.lower, float), np.asarray(self.upper, float)
        if lo.shape != hi.shape or lo.ndim != 1 or not np.all(np.isfinite(lo) & np.isfinite(hi)) or np.any(hi < lo):
            raise ValueError("FeatureBounds needs finite lower <= upper, one pair per column.")


@dataclass(frozen=True)
class PrivateStandardize:
    """Private centre/scale per column, spending ``budget * mu`` of each client's GDP budget.

    Parameters
    ----------
    budget : float, default 0.1
        Share of mu spent on all columns together.
    columns : tuple of int or None
        Columns to rescale; None = every column except ``intercept``.
    intercept : int or None, default 0
        Index of the intercept column, or None (then columns are scaled, not centred).
    quantile : float, default 0.9
        Scale = pooled ``quantile`` of ``|x_j - centre|``. Columns whose estimate falls below the
        grid (binary or mostly-constant columns) are left unscaled. Higher quantiles leave too
        small a margin between the target count and N for the noisy bisection to be reliable.
    n_grid : int, default 128
        Points per public grid (a power of two; log2(n_grid) queries per search).
    """

    budget: float = 0.1
    columns: tuple[int, ...] | None = None
    intercept: int | None = 0
    quantile: float = 0.9
    n_grid: int = 128
    _range: tuple[float, float] = field(default=(1e-6, 1e9), repr=False)

    def __post_init__(self) -> None:
        if not 0 < self.budget < 1:
            raise ValueError(f"PrivateStandardize.budget must lie in (0, 1), got {self.budget}.")
        if self.n_grid < 4 or self.n_grid & (self.n_grid - 1):
            raise ValueError(f"n_grid must be a power of two >= 4, got {self.n_grid}.")


    def columns_to_scale(self, n_features: int) -> list[int]:
        """The columns this configuration rescales for a design with ``n_features`` columns."""
        if self.columns is None:
            return [j for j in range(n_features) if j != self.intercept]
        return list(self.columns)


class Scaler:
    """Affine rescaling of columns, fitted from a :class:`FeatureBounds` or privately."""

    def __init__(self, center: np.ndarray, scale: np.ndarray, intercept: int | None) -> None:
        self.center = center
        self.scale = scale
        self.intercept = intercept

    @classmethod
    def from_bounds(cls, bounds: FeatureBounds, n_features: int) -> Scaler:
        lo, hi = np.asarray(bounds.lower, float), np.asarray(bounds.upper, float)
        if lo.size != n_features:
            raise ValueError(f"FeatureBounds has {lo.size} columns but X has {n_features}.")
        half = hi / 2 - lo / 2  # (hi - lo) / 2 and (lo + hi) / 2 overflow for bounds near the largest double
        center = np.where(half > 0, lo / 2 + hi / 2, 0.0)
        scale = np.where(half > 0, half, 1.0)
        if bounds.intercept is None:
            center[:] = 0.0
        else:
            center[bounds.intercept], scale[bounds.intercept] = 0.0, 1.0
        return cls(center, scale, bounds.intercept)

    @classmethod
    def private(cls, config: PrivateStandardize, data: FederatedData, release, mu: float) -> Scaler:
        """Estimate centre and scale privately.

        ``release(counts, mu, stage)`` privatizes per-client counts (sensitivity 1) and returns the
        noisy values; it is the estimator's channel. ``mu`` is the budget of the whole procedure.
        """
        d = data.n_features
        cols = config.columns_to_scale(d)
        center, scale = np.zeros(d), np.ones(d)
        if not cols:
            return cls(center, scale, config.intercept)
        lo, hi = config._range
        half = np.geomspace(lo, hi, config.n_grid // 2)
        sym = np.concatenate([-half[::-1], [0.0], half[:-1]])  # symmetric public grid for the centre, with 0
        n_queries = int(math.log2(config.n_grid))
        searches = len(cols) * (2 if config.intercept is not None else 1)
        mu_q = mu / math.sqrt(searches * n_queries) if math.isfinite(mu) else math.inf
        offsets = data.offsets
        n_total = float(data.n_samples)
        for j in cols:
            x = data.X[:, j]

            def count(values):
                def noisy(threshold: float) -> float:
                    c = np.add.reduceat((values <= threshold).astype(np.float64), offsets[:-1])
                    return float(release(c[:, None], mu_q, f"scaling-x{j}").sum())
                return noisy

            if config.intercept is not None:
                center[j] = private_grid_quantile(count(x), sym, 0.5 * n_total)
            with np.errstate(over="ignore"):  # |x - centre| = inf for x near the largest double: above every grid point
                dev = np.abs(x - center[j])
            s = private_grid_quantile(count(dev), np.geomspace(lo, hi, config.n_grid), config.quantile * n_total)
            scale[j] = s if s > lo else 1.0
        return cls(center, scale, config.intercept)

    def transform(self, data: FederatedData) -> FederatedData:
        """Rescale every column; the declared intercept column is set to 1, its value in the data domain.

        A client never inspects the intercept column's values (an error raised on one row's value
        would itself be a release): declaring a column the intercept declares it constant 1.

        Rescaled values are clamped to ``[-MAX_SCALED, MAX_SCALED]``: for huge finite entries the
        affine map overflows to +-inf, and non-finite data would be rejected -- an error on one
        dataset and not on its neighbour. The clamp is a fixed, data-independent map of each row,
        so it costs no privacy; it changes only entries whose rescaled magnitude exceeds 1e300.
        """
        with np.errstate(over="ignore"):
            X = (data.X - self.center) / self.scale
        np.clip(X, -MAX_SCALED, MAX_SCALED, out=X)
        if self.intercept is not None:
            X[:, self.intercept] = 1.0
        return FederatedData(X, data.y, data.offsets)

    def coef_to_original(self, theta: np.ndarray) -> np.ndarray:
        """Map coefficients of shape (d,) or (d, q) fitted on scaled columns to the original scale."""
        t = theta / (self.scale if theta.ndim == 1 else self.scale[:, None])
        if self.intercept is not None:
            t = t.copy()
            t[self.intercept] -= self.center @ t
        return t
