"""GLM families with canonical link (binomial-logistic, Poisson-log, Gaussian-identity) and Huber."""

from __future__ import annotations

import numpy as np
from scipy.special import expit

from .base import Family

__all__ = ["Logistic", "Poisson", "Gaussian", "Huber", "POISSON_MAX_ETA"]

#: Cap on the Poisson linear predictor inside ``exp`` (exp(500) ~ 1.4e217): keeps means, gradients
#: and losses finite for any theta; a fit whose iterates reach it has diverged and is reported.
POISSON_MAX_ETA = 500.0


class Logistic(Family):
    """Binomial family with logit link: ``ell(y, z) = log(1 + e^z) - y z``, y in {0, 1}."""

    name = "logistic"
    unit_dispersion = True
    code = 0
    curvature_at_zero = 0.25
    max_curvature = 0.25

    def loss(self, y, z):
        # log(1 + e^z) - y z = (1 - y) softplus(z) + y softplus(-z): no cancellation in either tail
        return (1.0 - y) * np.logaddexp(0.0, z) + y * np.logaddexp(0.0, -z)

    def deriv(self, y, z):
        return expit(z) - y

    def deriv2(self, y, z):
        p = expit(z)
        return p * (1.0 - p)

    def mean(self, z):
        return expit(z)

    def check_y(self, y):
        bad = (y != 0) & (y != 1)
        if np.any(bad):
            raise ValueError(
                f"logistic family needs y in {{0, 1}}; found {int(bad.sum())} row(s) with another value. "
                "Recode the response as 0/1."
            )


class Poisson(Family):
    """Poisson family with log link: ``ell(y, z) = exp(z) - y z`` (the constant log y! is dropped).

    Above :data:`POISSON_MAX_ETA` the exponential is continued linearly (loss) and held constant
    (derivatives), so every quantity stays finite for any theta while ``deriv`` remains the exact
    derivative of ``loss``.
    """

    name = "poisson"
    unit_dispersion = True
    code = 1
    max_curvature = float("inf")

    def loss(self, y, z):
        # above the cap exp is continued linearly, so deriv is the exact derivative everywhere
        zc = np.minimum(z, POISSON_MAX_ETA)
        return np.exp(zc) * (1.0 + (z - zc)) - y * z

    def deriv(self, y, z):
        return np.exp(np.minimum(z, POISSON_MAX_ETA)) - y

    def deriv2(self, y, z):
        return np.exp(np.minimum(z, POISSON_MAX_ETA))

    def mean(self, z):
        return np.exp(np.minimum(z, POISSON_MAX_ETA))

    def check_y(self, y):
        bad = (y < 0) | (y != np.floor(y))
        if np.any(bad):
            raise ValueError(
                f"poisson family needs non-negative integer counts; found {int(bad.sum())} row(s) with a "
                "negative or non-integer value."
            )


class Gaussian(Family):
    """Gaussian family with identity link: ``ell(y, z) = (y - z)^2 / 2`` (least squares)."""

    name = "gaussian"
    code = 2

    def loss(self, y, z):
        return 0.5 * (y - z) ** 2

    def deriv(self, y, z):
        return z - y

    def deriv2(self, y, z):
        return np.ones_like(np.asarray(z, dtype=np.float64))

    def mean(self, z):
        return np.asarray(z, dtype=np.float64)


class Huber(Family):
    """Huber loss for robust linear regression (an M-estimator that is not a likelihood).

    ``ell(y, z) = r^2 / 2`` if ``|r| <= c`` else ``c |r| - c^2 / 2``, with ``r = y - z``.

    Parameters
    ----------
    c : float, default 1.345
        Threshold (in units of the response). 1.345 gives 95% efficiency at the normal model when
        the residual scale is 1; rescale ``y`` or ``c`` for other scales.
    """

    name = "huber"
    code = 3

    def __init__(self, c: float = 1.345) -> None:
        c = float(c)
        if not np.isfinite(c) or c <= 0:
            raise ValueError(f"Huber threshold c must be a positive finite number, got {c}.")
        self.param = c

    def loss(self, y, z):
        r = np.abs(y - z)
        c = self.param
        return np.where(r <= c, 0.5 * r**2, c * r - 0.5 * c * c)

    def deriv(self, y, z):
        return np.clip(z - y, -self.param, self.param)

    def deriv2(self, y, z):
        return (np.abs(y - z) <= self.param).astype(np.float64)

    def mean(self, z):
        return np.asarray(z, dtype=np.float64)

    def __repr__(self) -> str:
        return f"Huber(c={self.param})"
