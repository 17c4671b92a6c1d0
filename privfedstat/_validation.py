"""Input checks shared by every public entry point.

Each check raises ``ValueError`` or ``TypeError`` with a message that says what to change.
"""

from __future__ import annotations

import math
from numbers import Integral, Real

import numpy as np

from .exceptions import DivergenceError

__all__ = [
    "check_positive_int",
    "check_positive_float",
    "check_mu",
    "check_fraction",
    "check_matrix",
    "check_finite_array",
    "check_iterate",
    "iterate_error",
    "DIVERGENCE_NORM",
]


def check_positive_int(value, name: str, *, minimum: int = 1) -> int:
    """Return ``value`` as ``int`` if it is an integer >= ``minimum``."""
    if isinstance(value, bool) or not isinstance(value, Integral):
        raise TypeError(f"{name} must be an integer >= {minimum}, got {value!r} ({type(value).__name__}).")
    if value < minimum:
        raise ValueError(f"{name} must be an integer >= {minimum}, got {value}.")
    return int(value)


def check_positive_float(value, name: str, *, allow_inf: bool = False) -> float:
    """Return ``value`` as ``float`` if it is a real number > 0 (and finite unless ``allow_inf``)."""
    if isinstance(value, bool) or not isinstance(value, Real):
        raise TypeError(f"{name} must be a positive number, got {value!r} ({type(value).__name__}).")
    value = float(value)
    if math.isnan(value) or value <= 0:
        raise ValueError(f"{name} must be > 0, got {value}.")
    if math.isinf(value) and not allow_inf:
        raise ValueError(f"{name} must be finite, got {value}.")
    return value


def check_mu(mu) -> float:
    """Validate a GDP budget ``mu``: a number > 0; ``float('inf')`` means no privacy."""
    if isinstance(mu, bool) or not isinstance(mu, Real):
        raise TypeError(f"mu must be a positive number (use float('inf') for no privacy), got {mu!r}.")
    mu = float(mu)
    if math.isnan(mu) or mu <= 0:
        raise ValueError(
            f"mu must be > 0 (smaller mu = stronger privacy; float('inf') = non-private), got {mu}."
        )
    return mu


def check_fraction(value, name: str, *, open_low: bool = True, open_high: bool = True) -> float:
    """Return ``value`` as float if it lies in the interval (0, 1) (ends as requested)."""
    if isinstance(value, bool) or not isinstance(value, Real):
        raise TypeError(f"{name} must be a number in (0, 1), got {value!r}.")
    value = float(value)
    low_ok = value > 0 if open_low else value >= 0
    high_ok = value < 1 if open_high else value <= 1
    if not (low_ok and high_ok):
        lo, hi = "(" if open_low else "[", ")" if open_high else "]"
        raise ValueError(f"{name} must lie in {lo}0, 1{hi}, got {value}.")
    return value


def check_finite_array(a, name: str, *, ndim: int | tuple[int, ...]) -> np.ndarray:
    """Convert ``a`` to a float64 array of the given dimension(s), rejecting NaN/inf."""
    try:
        arr = np.asarray(a, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise TypeError(f"{name} must be numeric array-like: {exc}") from None
    ndims = (ndim,) if isinstance(ndim, int) else ndim
    if arr.ndim not in ndims:
        raise ValueError(f"{name} must have {' or '.join(map(str, ndims))} dimension(s), got shape {arr.shape}.")
    finite = np.isfinite(arr)
    if not finite.all():
        bad = int(finite.size - np.count_nonzero(finite))
        where = ""
        if arr.ndim == 2:
            cols = np.flatnonzero(~finite.all(axis=0)).tolist()
            where = f" in column(s) {cols[:10]}{' ...' if len(cols) > 10 else ''}"
        raise ValueError(f"{name} contains {bad} NaN or infinite value(s){where}; remove or impute them before fitting.")
    return arr


def check_matrix(X, name: str = "X") -> np.ndarray:
    """A finite 2-D float64 array (a 1-D input is rejected with a hint)."""
    arr = np.asarray(X) if not isinstance(X, np.ndarray) else X
    if getattr(arr, "ndim", None) == 1:
        raise ValueError(f"{name} must be 2-D (n_samples, n_features); got 1-D. Use X.reshape(-1, 1) for one feature.")
    return check_finite_array(arr, name, ndim=2)


#: An iterate with a larger Euclidean norm (or a non-finite entry) is reported as divergence.
DIVERGENCE_NORM = 1e10


def iterate_error(theta: np.ndarray, where: str, step_size: float) -> DivergenceError | None:
    """The ``DivergenceError`` to raise if ``theta`` is non-finite or exploded, else None.

    For a client, which hands the error to the server with the releases that ran before it
    (:class:`~privfedstat.federation.clients.Reply`) instead of raising it.
    """
    if np.all(np.isfinite(theta)) and float(np.max(np.abs(theta), initial=0.0)) <= DIVERGENCE_NORM:
        return None
    return DivergenceError(
        f"iterates diverged during {where} (non-finite or |theta| > {DIVERGENCE_NORM:g}). "
        f"Reduce step_size (now {step_size:g}), standardise the covariates, or use a finite clip."
    )


def check_iterate(theta: np.ndarray, where: str, step_size: float) -> None:
    """Raise ``DivergenceError`` if ``theta`` is non-finite or exploded."""
    error = iterate_error(theta, where, step_size)
    if error is not None:
        raise error
