"""Pure mu-GDP mathematics (Dong, Roth & Su, 2022).

Everything here is a pure function of numbers. The Gaussian mechanism that adds
``N(0, sigma^2 I)`` to a statistic of L2 sensitivity ``Delta`` is ``Delta / sigma``-GDP
(Theorem 2.7 of Dong et al.); ``k`` adaptive GDP mechanisms compose to
``sqrt(mu_1^2 + ... + mu_k^2)``-GDP (Corollary 3.3); and mu-GDP is equivalent to
``(epsilon, delta(epsilon))``-DP for all epsilon >= 0 with

    delta(epsilon) = Phi(-epsilon/mu + mu/2) - exp(epsilon) * Phi(-epsilon/mu - mu/2)

(Corollary 2.13), which :func:`delta_from_mu` evaluates in log space and
:func:`epsilon_from_mu` / :func:`mu_from_epsilon_delta` invert numerically to ~1e-12 relative.

References
----------
Dong, J., Roth, A. and Su, W. J. (2022). Gaussian differential privacy. JRSS-B 84(1), 3-37.
"""

from __future__ import annotations

import math

import numpy as np

from .._linalg import safe_norm

__all__ = [
    "gaussian_mu",
    "calibrate_sigma",
    "compose",
    "delta_from_mu",
    "epsilon_from_mu",
    "mu_from_epsilon_delta",
]


def _positive(x: float, name: str, *, allow_zero: bool = False, allow_inf: bool = True) -> float:
    x = float(x)
    if math.isnan(x) or x < 0 or (x == 0 and not allow_zero) or (math.isinf(x) and not allow_inf):
        raise ValueError(f"{name} must be {'>= 0' if allow_zero else '> 0'}{'' if allow_inf else ' and finite'}, got {x}.")
    return x


def gaussian_mu(sensitivity: float, sigma: float) -> float:
    """GDP parameter of the Gaussian mechanism: ``mu = sensitivity / sigma``.

    Parameters
    ----------
    sensitivity : float
        L2 global sensitivity (Delta) of the released statistic, >= 0.
    sigma : float
        Standard deviation of the isotropic Gaussian noise, >= 0. ``sigma = 0`` with a positive
        sensitivity means no privacy (``inf``); ``sensitivity = 0`` means a data-independent
        release (``0``).
    """
    sensitivity = _positive(sensitivity, "sensitivity", allow_zero=True)
    sigma = _positive(sigma, "sigma", allow_zero=True)
    if sensitivity == 0:
        return 0.0
    if sigma == 0 or math.isinf(sensitivity):
        return math.inf
    return sensitivity / sigma


def calibrate_sigma(sensitivity: float, mu: float) -> float:
    """Noise standard deviation that makes a release of L2 sensitivity ``sensitivity`` ``mu``-GDP.

    ``mu = inf`` (no privacy) gives ``sigma = 0``; an infinite sensitivity with a finite ``mu`` is
    an error (no amount of noise makes an unbounded statistic private).
    """
    sensitivity = _positive(sensitivity, "sensitivity", allow_zero=True)
    mu = _positive(mu, "mu")
    if math.isinf(mu):
        return 0.0
    if math.isinf(sensitivity):
        raise ValueError(
            "Infinite sensitivity cannot be privatized with finite mu: set a finite clipping bound "
            "(clip=...) or use mu=float('inf') for a non-private fit."
        )
    return sensitivity / mu


def compose(mus) -> float:
    """Compose GDP mechanisms: ``sqrt(sum mu_k^2)`` (Dong et al. 2022, Corollary 3.3)."""
    arr = np.asarray(mus, dtype=np.float64).ravel()
    if arr.size == 0:
        return 0.0
    if np.any(np.isnan(arr)) or np.any(arr < 0):
        raise ValueError("GDP parameters to compose must be >= 0.")
    if np.any(np.isinf(arr)):
        return math.inf
    return safe_norm(arr)


def _delta(eps: float, mu: float) -> float:
    from scipy.special import log_ndtr  # scipy.special: imported here, not at module level (slow to import)

    # Phi(-eps/mu + mu/2) - exp(eps) Phi(-eps/mu - mu/2), second term in log space.
    if eps == 0.0:  # 2 Phi(mu/2) - 1 without cancellation
        return math.erf(mu / (2.0 * math.sqrt(2.0)))
    a = math.exp(log_ndtr(-eps / mu + mu / 2))
    b = math.exp(eps + log_ndtr(-eps / mu - mu / 2))
    return max(a - b, 0.0)


def delta_from_mu(mu: float, epsilon: float) -> float:
    """The smallest delta such that a ``mu``-GDP mechanism is ``(epsilon, delta)``-DP.

    Dong et al. (2022), Corollary 2.13. ``mu = inf`` gives 1.
    """
    mu = _positive(mu, "mu")
    epsilon = _positive(epsilon, "epsilon", allow_zero=True, allow_inf=False)
    if math.isinf(mu):
        return 1.0
    return _delta(epsilon, mu)


def epsilon_from_mu(mu: float, delta: float) -> float:
    """The smallest epsilon such that a ``mu``-GDP mechanism is ``(epsilon, delta)``-DP.

    Inverts Corollary 2.13 of Dong et al. (2022) with Brent's method (relative accuracy about
    1e-12). Example: ``epsilon_from_mu(1.0, 1e-5)`` is about 4.3772. ``mu = inf`` gives ``inf``.
    """
    mu = _positive(mu, "mu")
    delta = float(delta)
    if not 0 < delta < 1:
        raise ValueError(f"delta must lie in (0, 1), got {delta}.")
    if math.isinf(mu):
        return math.inf
    if _delta(0.0, mu) <= delta:
        return 0.0
    from scipy.optimize import brentq  # here, not at module level: scipy.optimize is slow to import
    from scipy.special import ndtri

    # delta(eps) <= Phi(-eps/mu + mu/2), so this eps already gives delta(eps) <= delta.
    hi = mu * mu / 2 - mu * float(ndtri(delta)) + 1.0
    return float(brentq(lambda e: _delta(e, mu) - delta, 0.0, hi, xtol=1e-14, rtol=1e-15, maxiter=500))


def mu_from_epsilon_delta(epsilon: float, delta: float) -> float:
    """The largest ``mu`` such that ``mu``-GDP implies ``(epsilon, delta)``-DP.

    Solves ``delta_from_mu(mu, epsilon) = delta`` for ``mu`` (delta is increasing in mu).
    """
    epsilon = _positive(epsilon, "epsilon", allow_zero=True, allow_inf=False)
    delta = float(delta)
    if not 0 < delta < 1:
        raise ValueError(f"delta must lie in (0, 1), got {delta}.")
    lo, hi = 0.5, 1.0
    while _delta(epsilon, hi) < delta:
        lo, hi = hi, 2.0 * hi
    while _delta(epsilon, lo) > delta:
        lo, hi = 0.5 * lo, lo
    from scipy.optimize import brentq  # here, not at module level: scipy.optimize is slow to import

    return float(brentq(lambda m: _delta(epsilon, m) - delta, lo, hi, xtol=1e-300, rtol=1e-15, maxiter=500))
