"""The safe Euclidean norm inside numba kernels: twin of :func:`privfedstat._linalg.row_norm_bounds`.

Kernels that form a vector whose norm decides a clipping factor (the multinomial residual
``p - e_y`` and curvature ``diag(p) - p p^T``) bound its norm with :func:`norm_bound`, the same
computation as the numpy helper for one row: the plain sum of squares where it lies in
``[2^-960, 2^960]``, otherwise rescaled by the largest entry, then rounded up by
``1 + 2 (n + 8) u`` and ``4 * 2^-1074``. Ordinary vectors take the plain path, so the result is
the plain norm times the rounding-up factor.
"""

from __future__ import annotations

import math

from numba import njit

from .glm_nb import _DENORM_MIN, FASTMATH

__all__ = ["norm_bound"]

_U = 2.0**-53
_SMALL_SQ = 2.0**-960  # sums of squares outside [_SMALL_SQ, _LARGE_SQ] are recomputed scaled
_LARGE_SQ = 2.0**960


@njit(inline="always", fastmath=FASTMATH)
def norm_bound(a, n):
    """Upper bound ``b >= ||a[:n]||_2`` without overflow or underflow; NaN if an entry is NaN, inf past the largest double.

    See :func:`privfedstat._linalg.row_norm_bounds` for the error analysis (relative excess at
    least ``12 u`` over the exact norm, and ``b >= ||a||`` exactly for every finite vector).
    """
    s = 0.0
    for k in range(n):
        s += a[k] * a[k]
    if not (s >= _SMALL_SQ and s <= _LARGE_SQ):  # tiny or huge entries (or NaN)
        if math.isnan(s):
            return math.nan
        mx = 0.0
        for k in range(n):
            mx = max(mx, abs(a[k]))
        if mx == 0.0:
            return 4 * _DENORM_MIN
        s = 0.0
        for k in range(n):
            v = a[k] / mx
            s += v * v
        return mx * math.sqrt(s) * (1.0 + 2 * (n + 8) * _U) + 4 * _DENORM_MIN
    return math.sqrt(s) * (1.0 + 2 * (n + 8) * _U) + 4 * _DENORM_MIN
