"""Broadcasting helpers shared by the theory functions (pure numpy, no package imports).

Conventions
-----------
* Client sizes ``sizes`` are an array whose **last axis indexes the clients**; leading axes are
  settings. Every other argument broadcasts against the leading axes. Pad ragged settings (different
  m) with ``nan``: a ``nan`` entry is "no client" and contributes nothing.
* ``log`` is the natural logarithm; ``d v log N`` is ``max(d, log N)``.
"""

from __future__ import annotations

import numpy as np

__all__ = ["clients", "as_float", "dvlog", "log_rho", "check_taus", "check_positive"]


def as_float(x, name: str) -> np.ndarray:
    """``x`` as a float array (raises ``TypeError`` for non-numeric input)."""
    try:
        return np.asarray(x, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise TypeError(f"{name} must be numeric (a number or an array of numbers), got {x!r}.") from exc


def check_positive(x, name: str, *, allow_inf: bool = False) -> np.ndarray:
    """Float array of ``x``; ``ValueError`` unless every entry is > 0 (and finite unless allowed)."""
    a = as_float(x, name)
    bad = ~(a > 0) | (np.isinf(a) & (not allow_inf))
    if np.any(bad):
        raise ValueError(f"{name} must be > 0{'' if allow_inf else ' and finite'}; got {a[bad].ravel()[:3]}.")
    return a


def clients(sizes) -> tuple[np.ndarray, np.ndarray]:
    """Return ``(n, mask)`` of shape (..., m): sizes with padding replaced by 1, and the mask of real clients.

    Raises ``ValueError`` if a real size is not > 0 or a setting has no client.
    """
    n = np.atleast_1d(as_float(sizes, "sizes"))
    mask = ~np.isnan(n)
    if np.any(n[mask] <= 0) or np.any(np.isinf(n[mask])):
        raise ValueError("client sizes must be finite and > 0 (use nan to pad settings with fewer clients).")
    if np.any(mask.sum(axis=-1) == 0):
        raise ValueError("every setting needs at least one client (a row of sizes is all nan).")
    return np.where(mask, n, 1.0), mask


def dvlog(d, n_samples) -> np.ndarray:
    """``d v log N`` = max(d, log N), the paper's scale of the clipping bound (B = C_B sqrt(d v log N))."""
    return np.maximum(d, np.log(n_samples))


def check_taus(tau1, tau2) -> tuple[np.ndarray, np.ndarray]:
    """Validate 0 < tau1 <= tau2 (strong convexity <= smoothness) and return them as arrays."""
    t1 = check_positive(tau1, "tau1")
    t2 = check_positive(tau2, "tau2")
    if np.any(t1 > t2):
        raise ValueError("tau1 (strong convexity, Assumption 2) cannot exceed tau2 (smoothness, Assumption 4).")
    return t1, t2


def log_rho(tau1, tau2) -> np.ndarray:
    """``log(3 tau2 / (3 tau2 - tau1))``: minus the log of the contraction factor 1 - tau1/(3 tau2)."""
    t1, t2 = check_taus(tau1, tau2)
    return np.log(3.0 * t2 / (3.0 * t2 - t1))
