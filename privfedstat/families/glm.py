"""GLM families with canonical link (binomial-logistic, Poisson-log, Gaussian-identity) and Huber."""

from __future__ import annotations

import numpy as np

from .base import Family

__all__ = ["Logistic", "Poisson", "Gaussian", "Huber", "POISSON_MAX_ETA", "MAX_POISSON_MEAN", "hermite_nodes"]

#: Cap on the Poisson linear predictor inside ``exp`` (exp(500) ~ 1.4e217): keeps means, gradients
#: and losses finite for any theta; a fit whose iterates reach it has diverged and is reported.
POISSON_MAX_ETA = 500.0
#: cap on a simulated Poisson mean (numpy's sampler refuses means near 1e19)
MAX_POISSON_MEAN = 1e12


def hermite_nodes(n: int) -> tuple[np.ndarray, np.ndarray]:
    """Nodes and weights (summing to 1) for E[f(U)], U ~ N(0, 1)."""
    t, w = np.polynomial.hermite_e.hermegauss(n)
    return t, w / w.sum()


def _dispersion_scale(family: Family, scale: float | None) -> float:
    """``scale`` (the square root of the dispersion) of a family with ``has_dispersion``, checked."""
    if scale is None or not scale >= 0:
        raise ValueError(f"the {family.name} family's response law needs scale= (the residual standard deviation, "
                         f">= 0), got {scale!r}.")
    return scale


class Logistic(Family):
    """Binomial family with logit link: ``ell(y, z) = log(1 + e^z) - y z``, y in {0, 1}."""

    name = "logistic"
    link = "logit"
    likelihood = True
    code = 0
    curvature_at_zero = 0.25
    max_curvature = 0.25

    def loss(self, y, z):
        # log(1 + e^z) - y z = (1 - y) softplus(z) + y softplus(-z): no cancellation in either tail
        return (1.0 - y) * np.logaddexp(0.0, z) + y * np.logaddexp(0.0, -z)

    def deriv(self, y, z):
        from scipy.special import expit  # scipy.special: imported here, not at module level (slow to import)

        return expit(z) - y

    def deriv2(self, y, z):
        from scipy.special import expit  # scipy.special: imported here, not at module level (slow to import)

        p = expit(z)
        return p * (1.0 - p)

    def mean(self, z):
        from scipy.special import expit  # scipy.special: imported here, not at module level (slow to import)

        return expit(z)

    @property
    def class_labels(self):
        return np.array([0.0, 1.0])

    def class_probabilities(self, z):
        p = self.mean(z)
        return np.column_stack([1.0 - p, p])

    def predict_class(self, z):
        return (self.mean(z) >= 0.5).astype(np.float64)

    def simulate(self, z, rng, scale=None):
        """Bernoulli draws: ``1`` where a uniform falls below the mean (``rng.random(n)``)."""
        return (rng.random(z.shape[0]) < self.mean(z)).astype(np.float64)

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
    link = "log"
    likelihood = True
    overdispersion = True
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

    def deviance(self, y, z):
        """``2 [y log(y / mu) - (y - mu)]`` (``y log(y / mu) = 0`` at y = 0)."""
        mu = self.mean(z)
        with np.errstate(divide="ignore", invalid="ignore"):
            t = np.where(y > 0, y * np.log(y / mu), 0.0)
        return 2 * (t - (y - mu))

    def simulate(self, z, rng, scale=None):
        """Poisson draws (``rng.poisson``) with means capped at :data:`MAX_POISSON_MEAN`."""
        return rng.poisson(np.minimum(self.mean(z), MAX_POISSON_MEAN)).astype(np.float64)

    def response_quadrature(self, z, scale=None, n_nodes=40):
        """The pmf on 0, 1, ..., up to the 1 - 1e-12 quantile at the largest mean (renormalised)."""
        from scipy import stats  # imported here: scipy.stats is slow to import

        lam = self.mean(z)
        n = lam.size
        top = int(stats.poisson.ppf(1.0 - 1e-12, float(lam.max()))) + 1
        y = np.arange(top + 1, dtype=np.float64)
        pmf = stats.poisson.pmf(y[None, :], lam[:, None])
        return np.broadcast_to(y, (n, y.size)), pmf / pmf.sum(axis=1, keepdims=True)

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
    likelihood = True
    has_dispersion = True
    location = True
    code = 2

    def for_response_scale(self, scale: float) -> Gaussian:
        return self

    def loss(self, y, z):
        return 0.5 * (y - z) ** 2

    def deriv(self, y, z):
        return z - y

    def deriv2(self, y, z):
        return np.ones_like(np.asarray(z, dtype=np.float64))

    def mean(self, z):
        return np.asarray(z, dtype=np.float64)

    def deviance(self, y, z):
        """``(y - z)^2``: the squared residual (the deviance at dispersion 1)."""
        return (y - z) ** 2

    def simulate(self, z, rng, scale=None):
        """``z + scale * e`` with standard normal ``e`` (``rng.standard_normal(n)``)."""
        return z + _dispersion_scale(self, scale) * rng.standard_normal(z.shape[0])

    def response_quadrature(self, z, scale=None, n_nodes=40):
        """Gauss-Hermite nodes ``z + scale * t`` of N(z, scale^2)."""
        t, w = hermite_nodes(n_nodes)
        return z[:, None] + _dispersion_scale(self, scale) * t[None, :], np.broadcast_to(w, (z.size, t.size))


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
    start_at_least_squares = True
    location = True

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

    def for_response_scale(self, scale: float) -> Huber:
        return Huber(self.param / scale)

    def __repr__(self) -> str:
        return f"Huber(c={self.param})"
