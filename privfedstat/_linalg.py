"""Linear-algebra helpers shared by the clients, the estimators and the inference: the one overflow- and
underflow-safe Euclidean norm of every privacy-critical path (:func:`row_norms`, its rigorous upper bound
:func:`row_norm_bounds` and the clipping :func:`clip_rows` built on it; the numba kernels' twin is
:func:`privfedstat.kernels.norm_nb.norm_bound`, the torch clients' :func:`privfedstat.deep.per_sample.sample_norms`),
the smoothed normalisation (Fed-alpha-NormEC's message, :func:`smoothed_normalize`), the isometric packing of
symmetric matrices into vectors (how a Hessian is released), the eigenvalue floor, and the memory allowed for the
clients' Hessians."""

from __future__ import annotations

import math

import numpy as np

__all__ = ["row_norms", "row_norm_bounds", "safe_norm", "clip_rows", "smoothed_normalize", "sym_to_vec", "vec_to_sym",
           "floor_eigenvalues", "MAX_HESSIAN_GB"]

SQRT2 = math.sqrt(2.0)
#: Memory (GB) allowed for all clients' (p, p) Hessians at once: the Newton-type estimators and the
#: covariance releases hold one per client in a single pass and refuse larger problems up front.
MAX_HESSIAN_GB = 4.0
_U = 2.0**-53  # unit roundoff of float64
_DENORM_MIN = 2.0**-1074  # smallest positive double
#: sums of squares in this range are computed without overflow and without losing accuracy to underflow
SAFE_SQUARES = (2.0**-960, 2.0**960)
#: rows outside that range are rescaled this many at a time (bounds the temporary copy)
_CHUNK = 4096


def row_norms(X: np.ndarray) -> np.ndarray:
    """Euclidean norms ``||x_j||_2`` of the rows of a matrix, without overflow or underflow.

    ``sqrt(sum_k x_jk^2)`` underflows to 0 when every ``|x_jk|`` is below about 1e-162 and
    overflows above about 1e154; a clipping factor ``B / ||x_j||`` computed from it then fails to
    clip (0) or clips to 0 (inf). Here the plain sum of squares is used only where it lies in
    :data:`SAFE_SQUARES` ``= [2^-960, 2^960]`` (no term can overflow, and terms that underflow change
    it by at most ``d 2^-1075``, a relative ``d 2^-115``), so ordinary rows get the plain norm,
    bit for bit; every other row is rescaled by its largest entry, ``m sqrt(sum_k (x_jk / m)^2)``
    with ``m = max_k |x_jk|`` (a rounding per quotient). Either way the relative error is at
    most ``(d/2 + 4) u`` (``u = 2^-53``: ``d`` roundings in a sum of non-negative terms in any
    order, one for each square, quotient, square root and the product; Higham, *Accuracy and
    Stability of Numerical Algorithms*, 2002, sect. 4.2). A zero row gives 0, a row whose norm
    exceeds the largest double ``inf``, a row with a NaN NaN.

    Parameters
    ----------
    X : ndarray of shape (n_rows, d)

    Returns
    -------
    ndarray of shape (n_rows,)
    """
    X = np.asarray(X, dtype=np.float64)
    with np.errstate(over="ignore", under="ignore", invalid="ignore"):
        s = np.einsum("ij,ij->i", X, X)
        n = np.sqrt(s)
        rescale = np.flatnonzero(~((s >= SAFE_SQUARES[0]) & (s <= SAFE_SQUARES[1])) & ~np.isnan(s))
        for lo in range(0, rescale.size, _CHUNK):
            rows = rescale[lo:lo + _CHUNK]
            Xb = X[rows]
            m = np.max(np.abs(Xb), axis=1) if X.shape[1] else np.zeros(rows.size)
            nz = (m > 0) & np.isfinite(m)
            Xs = Xb[nz] / m[nz, None]
            nb = np.where(np.isinf(m), np.inf, 0.0)
            nb[nz] = m[nz] * np.sqrt(np.einsum("ij,ij->i", Xs, Xs))
            n[rows] = nb
    return n


def row_norm_bounds(X: np.ndarray) -> np.ndarray:
    """Upper bounds ``b_j >= ||x_j||_2`` on the row norms of a finite matrix, tight to about ``(2.5 d + 21) u``.

    :func:`row_norms` (relative error at most ``(d/2 + 4) u``) multiplied by ``1 + 2 (d + 8) u``
    (exactly representable), plus ``4 * 2^-1074``, which covers the absolute rounding of subnormal
    results. Hence ``b_j >= ||x_j||`` holds for every finite row, exactly, with a relative excess
    of at least ``12 u``; zero rows get ``2^-1072``, and a row whose norm exceeds the largest double
    gets ``inf`` (the kernels then give it a zero contribution).

    Parameters
    ----------
    X : ndarray of shape (n_rows, d)
        Finite float64 rows x_j.

    Returns
    -------
    ndarray of shape (n_rows,)
    """
    X = np.asarray(X, dtype=np.float64)
    with np.errstate(over="ignore"):
        return row_norms(X) * (1.0 + 2 * (X.shape[1] + 8) * _U) + 4 * _DENORM_MIN


def safe_norm(v) -> float:
    """Euclidean norm of the entries of ``v`` (any shape) without overflow or underflow (:func:`row_norms`)."""
    v = np.asarray(v, dtype=np.float64)
    return float(row_norms(v.reshape(1, -1))[0]) if v.size else 0.0


def clip_rows(V: np.ndarray, bound) -> np.ndarray:
    """Rows of ``V`` scaled to L2 norm at most ``bound`` (per row, or one number; inf: unchanged); a row with a
    non-finite entry, or whose norm exceeds the largest double, becomes 0.

    The factor is ``min(1, bound / b_j)`` with ``b_j`` :func:`row_norm_bounds`' upper bound (at
    least ``12 u`` above ``||v_j||``, which covers the rounding of the factor and of the products),
    lowered by the smallest subnormal so that a subnormal factor (a huge row, a tiny bound) is
    never rounded up. So every returned row has norm at most ``bound`` for every finite input:
    ``2 bound`` is the sensitivity of a release of one clipped row.

    Parameters
    ----------
    V : ndarray of shape (n_rows, d)
    bound : float or ndarray of shape (n_rows,)
        Positive radii.

    Returns
    -------
    ndarray of shape (n_rows, d), a new array
    """
    V = np.array(V, dtype=np.float64)
    V[~np.all(np.isfinite(V), axis=1)] = 0.0
    bound = np.broadcast_to(np.asarray(bound, dtype=np.float64), V.shape[:1])
    if V.shape[0] and not np.all(np.isinf(bound)):
        with np.errstate(over="ignore", divide="ignore", invalid="ignore"):
            factor = np.maximum(bound / row_norm_bounds(V) - _DENORM_MIN, 0.0)
        V *= np.where(np.isinf(bound), 1.0, np.minimum(1.0, factor))[:, None]
    return V


def sym_to_vec(H: np.ndarray) -> np.ndarray:
    """Upper triangles of symmetric matrices, off-diagonal entries times sqrt(2).

    An isometry from symmetric (p, p) matrices with the Frobenius norm onto R^{p(p+1)/2} with
    the Euclidean norm: ``||sym_to_vec(A)||_2 = ||A||_F``.

    Parameters
    ----------
    H : ndarray of shape (..., p, p)

    Returns
    -------
    ndarray of shape (..., p (p + 1) / 2)
    """
    p = H.shape[-1]
    rows, cols = np.triu_indices(p)
    return H[..., rows, cols] * np.where(rows == cols, 1.0, SQRT2)


def vec_to_sym(v: np.ndarray, p: int) -> np.ndarray:
    """The symmetric (..., p, p) matrices whose :func:`sym_to_vec` is ``v`` (its inverse)."""
    rows, cols = np.triu_indices(p)
    entries = v * np.where(rows == cols, 1.0, 1.0 / SQRT2)
    H = np.empty(v.shape[:-1] + (p, p))
    H[..., rows, cols] = entries
    H[..., cols, rows] = entries
    return H


def floor_eigenvalues(H: np.ndarray, floor: float) -> np.ndarray:
    """Replace eigenvalues below ``floor`` by ``floor`` in symmetric matrices of shape (..., d, d).

    This is the Frobenius-norm projection onto ``{A : A >= floor I}``, hence 1-Lipschitz in the
    Frobenius norm, which the sensitivity analysis of :class:`FedNewton` uses.
    """
    vals, vecs = np.linalg.eigh(H)
    return (vecs * np.maximum(vals, floor)[..., None, :]) @ np.swapaxes(vecs, -1, -2)


def smoothed_normalize(u: np.ndarray, alpha: float) -> np.ndarray:
    """Smoothed normalisation ``Norm_alpha(u) = u / (alpha + ||u||)`` of each row, with norm below 1 for every finite row.

    The norm is :func:`row_norm_bounds`' upper bound ``b >= ||u||``
    (no overflow or underflow, relative excess at least ``12 u`` over the exact norm,
    ``u = 2^-53``). Numerator and denominator are divided by ``max(alpha, b)`` first, so that
    ``alpha + b`` cannot overflow; the five roundings involved stay below the excess, and the
    computed rows have exact Euclidean norm at most ``(1 + 5u) ||u|| / b < 1``; a row whose norm
    exceeds the largest double gives 0.

    Parameters
    ----------
    u : ndarray of shape (n_rows, n)
        Finite rows.
    alpha : float
        alpha > 0, the smoothing (``||Norm_alpha(u)|| = ||u|| / (alpha + ||u||)``).

    Returns
    -------
    ndarray of shape (n_rows, n)

    References
    ----------
    Bu, Z. et al. (2023). Automatic clipping: differentially private deep learning made easier and
    stronger (smoothed normalisation); Shulgin, Malinovsky, Khirirat & Richtarik (2025), Fed-alpha-NormEC.
    """
    u = np.asarray(u, dtype=np.float64)
    b = row_norm_bounds(u)[:, None]
    finite = np.isfinite(b)
    b, u = np.where(finite, b, 0.0), np.where(finite, u, 0.0)  # rows of infinite norm give 0
    scale = np.maximum(alpha, b)
    return (u / scale) / (alpha / scale + b / scale)
