"""Plain numpy twins of the numba kernels: slow, obviously correct, used by the tests.

They form the explicit per-sample gradient (Hessian) matrix and compute its norm directly, so
they also check the row-norm shortcut the numba kernels use. To do that for every finite input,
each per-sample matrix is held as ``M 2^E`` (:func:`_scaled_products`): its factors (residual,
row, curvature) are split exactly into mantissas of magnitude <= 1 and binary exponents
(``frexp``/``ldexp``), so ``M`` neither overflows nor underflows and ``||M|| 2^E`` is the norm.
The clipping rule is the kernels' (:mod:`privfedstat.kernels.glm_nb`): clip to
``bound * CLIP_SAFETY``; infinite residuals count as +-(largest double); a sample whose residual
or curvature is NaN contributes 0 (NaN propagates when ``bound = inf``); multinomial linear
predictors are clamped to ``+-Z_MAX``. One difference: a row whose norm exceeds the largest
double is clipped here, while the kernels (which only have its norm bound, ``inf``) give it 0.
The GLM twins take the per-row offset ``o`` of the linear predictor (``z_j = x_j^T theta + o_j``)
as ``offset`` (None: no offset). The outer-product twins form ``g_j g_j^T`` (``x_j x_j^T``) as
mantissa products with exponent ``2 E_j`` and scale each to Frobenius norm
``<= (bound * CLIP_SAFETY)^2``, which is clipping ``g_j`` (``x_j``) to ``bound * CLIP_SAFETY``
first, as the kernels do.
"""

from __future__ import annotations

import math

import numpy as np

from ..families.base import Family
from .glm_nb import CLIP_SAFETY
from .multinomial_nb import Z_MAX

__all__ = [
    "clipped_mean_grad",
    "client_loss",
    "client_hessian",
    "multinomial_clipped_mean_grad",
    "multinomial_client_loss",
    "multinomial_client_hessian",
    "client_score_outer",
    "multinomial_client_score_outer",
    "client_design_moments",
]

_DOUBLE_MAX = np.finfo(np.float64).max


def _theta_rows(theta: np.ndarray, offsets: np.ndarray) -> np.ndarray:
    sizes = np.diff(offsets)
    theta = np.atleast_2d(theta)
    return np.repeat(theta, sizes, axis=0) if theta.shape[0] > 1 else np.broadcast_to(theta, (offsets[-1], theta.shape[1]))


def _split(A: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``A = M 2^E`` per sample (first axis): ``E`` the binary exponent of ``max |A_j|``, ``max |M_j|`` in [1/2, 1).

    Exact (``ldexp`` by a power of two), except for entries below ``2^-1022 max |A_j|``, which
    lose bits to subnormals. Infinite entries become +-(largest double) first; NaN stays NaN.
    """
    A = np.clip(A, -_DOUBLE_MAX, _DOUBLE_MAX)
    _, E = np.frexp(np.max(np.abs(A.reshape(A.shape[0], -1)), axis=1))
    return np.ldexp(A, E.reshape((-1,) + (1,) * (A.ndim - 1)) * -1), E


def _scaled_products(spec: str, *factors: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per-sample products of ``factors`` (``np.einsum(spec, ...)``) as mantissas (N, ...) and exponents (N,)."""
    parts = [_split(f) for f in factors]
    return np.einsum(spec, *(p[0] for p in parts)), sum(p[1] for p in parts)


def _clip_mean(M: np.ndarray, E: np.ndarray, bound: float, offsets: np.ndarray, power: int = 1) -> np.ndarray:
    """Per-client mean of the per-sample matrices ``M_j 2^{E_j}``, each scaled to norm <= ``(bound * CLIP_SAFETY)^power``.

    ``power = 2`` for outer products ``v v^T``, whose norm ``||v||^2`` is the square of ``||v||``.
    """
    N = M.shape[0]
    norms = np.sqrt(np.einsum("ij,ij->i", M.reshape(N, -1), M.reshape(N, -1)))  # ||M_j|| >= 2^-(number of factors), or 0
    with np.errstate(over="ignore", divide="ignore", invalid="ignore"):
        limit = np.float64(bound * CLIP_SAFETY) ** power  # numpy: inf (not OverflowError) past the largest double
        scale = np.minimum(np.ldexp(1.0, E), limit / norms)  # 2^E (unclipped) or the clipped scale
        scale[norms == 0] = 0.0  # a zero sample stays 0 (not 0 * inf)
        G = M * scale.reshape((-1,) + (1,) * (M.ndim - 1))
    if math.isfinite(bound):
        G[np.isnan(norms)] = 0.0  # a NaN residual contributes 0
    sizes = np.diff(offsets).reshape((-1,) + (1,) * (M.ndim - 1))
    return np.add.reduceat(G, offsets[:-1], axis=0) / sizes


def _eta(X, offsets, theta, offset) -> np.ndarray:
    """Linear predictors ``x_j^T theta + o_j`` (overflow to +-inf or NaN is left to the callers' rules)."""
    with np.errstate(all="ignore"):
        z = np.einsum("ij,ij->i", X, _theta_rows(theta, offsets))
        return z if offset is None else z + offset


def clipped_mean_grad(X, y, offsets, theta, clip, family: Family, offset=None) -> np.ndarray:
    """Numpy twin of :func:`~privfedstat.kernels.glm_nb.glm_clipped_mean_grad`."""
    z = _eta(X, offsets, theta, offset)
    with np.errstate(all="ignore"):
        r = family.deriv(y, z)
    M, E = _scaled_products("i,ij->ij", r, X)  # explicit per-sample gradients r_j x_j (N, d)
    return _clip_mean(M, E, clip, offsets)


def client_loss(X, y, offsets, theta, family: Family, offset=None) -> np.ndarray:
    """Numpy twin of :func:`~privfedstat.kernels.glm_nb.glm_client_loss`."""
    z = _eta(X, offsets, theta, offset)
    return np.add.reduceat(family.loss(y, z), offsets[:-1]) / np.diff(offsets)


def client_hessian(X, y, offsets, theta, hclip, family: Family, offset=None, gradient_clip=None) -> np.ndarray:
    """Numpy twin of :func:`~privfedstat.kernels.glm_nb.glm_client_hessian`.

    With ``gradient_clip`` (B), a row whose explicit per-sample gradient has norm above
    ``B * CLIP_SAFETY`` (or a NaN residual) contributes 0 (the kernel's ``gclip``).
    """
    z = _eta(X, offsets, theta, offset)
    with np.errstate(all="ignore"):
        w = family.deriv2(y, z)
        if gradient_clip is not None and math.isfinite(gradient_clip):
            M, E = _scaled_products("i,ij->ij", family.deriv(y, z), X)  # explicit per-sample gradients
            kept = np.ldexp(np.sqrt(np.einsum("ij,ij->i", M, M)), E) <= gradient_clip * CLIP_SAFETY
            w = np.where(kept, w, 0.0)
    M, E = _scaled_products("i,ij,ik->ijk", w, X, X)  # w_j x_j x_j^T; Frobenius = spectral norm (rank one)
    return _clip_mean(M, E, hclip, offsets)


def client_score_outer(X, y, offsets, theta, clip, family: Family, offset=None) -> np.ndarray:
    """Numpy twin of :func:`~privfedstat.kernels.glm_nb.glm_client_score_outer`."""
    z = _eta(X, offsets, theta, offset)
    with np.errstate(all="ignore"):
        r = family.deriv(y, z)
    M, E = _scaled_products("i,i,ij,ik->ijk", r, r, X, X)  # g_j g_j^T = r_j^2 x_j x_j^T
    return _clip_mean(M, E, clip, offsets, power=2)


def client_design_moments(X, offsets, row_clip) -> np.ndarray:
    """Numpy twin of :func:`~privfedstat.kernels.glm_nb.glm_client_design_moments`."""
    M, E = _scaled_products("ij,ik->ijk", X, X)
    return _clip_mean(M, E, row_clip, offsets, power=2)


def _multinomial_Z(X, offsets, theta, q):
    """Linear predictors (N, q) for flattened Theta rows of shape (1 or m, d q), clamped to +-Z_MAX."""
    theta = np.atleast_2d(theta)
    d = X.shape[1]
    with np.errstate(all="ignore"):
        if theta.shape[0] == 1:
            Z = X @ theta[0].reshape(d, q)
        else:
            rows = np.repeat(np.arange(theta.shape[0]), np.diff(offsets))
            Z = np.einsum("ij,ijk->ik", X, theta.reshape(-1, d, q)[rows])
    return np.clip(Z, -Z_MAX, Z_MAX)


def multinomial_clipped_mean_grad(X, y, offsets, theta, clip, family) -> np.ndarray:
    """Numpy twin of :func:`~privfedstat.kernels.multinomial_nb.multinomial_clipped_mean_grad`."""
    q = family.n_outputs
    R = family.residual(y, _multinomial_Z(X, offsets, theta, q))
    M, E = _scaled_products("ij,ik->ijk", X, R)  # explicit per-sample gradients x_j r_j^T (N, d, q)
    return _clip_mean(M, E, clip, offsets).reshape(offsets.size - 1, -1)


def multinomial_client_loss(X, y, offsets, theta, family) -> np.ndarray:
    """Numpy twin of :func:`~privfedstat.kernels.multinomial_nb.multinomial_client_loss`."""
    L = family.loss(y, _multinomial_Z(X, offsets, theta, family.n_outputs))
    return np.add.reduceat(L, offsets[:-1]) / np.diff(offsets)


def multinomial_client_hessian(X, y, offsets, theta, hclip, family) -> np.ndarray:
    """Numpy twin of :func:`~privfedstat.kernels.multinomial_nb.multinomial_client_hessian`."""
    q, d = family.n_outputs, X.shape[1]
    A = family.curvature(_multinomial_Z(X, offsets, theta, q))  # (N, q, q)
    M, E = _scaled_products("ij,il,ikm->ijklm", X, X, A)  # H[(j,k),(l,m)] = x_j x_l A_km
    return _clip_mean(M, E, hclip, offsets).reshape(offsets.size - 1, d * q, d * q)


def multinomial_client_score_outer(X, y, offsets, theta, clip, family) -> np.ndarray:
    """Numpy twin of :func:`~privfedstat.kernels.multinomial_nb.multinomial_client_score_outer`."""
    q, d = family.n_outputs, X.shape[1]
    R = family.residual(y, _multinomial_Z(X, offsets, theta, q))
    M, E = _scaled_products("ij,ik,il,im->ijklm", X, R, X, R)  # (x_j r_k)(x_l r_m), entry ((j, k), (l, m))
    return _clip_mean(M, E, clip, offsets, power=2).reshape(offsets.size - 1, d * q, d * q)
