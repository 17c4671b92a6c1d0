"""numba kernels for multinomial logistic regression (parameter matrix Theta of shape (d, q), q = K - 1).

Same layout and conventions as :mod:`privfedstat.kernels.glm_nb`: clients concatenated with
offsets, ``theta`` of shape (1, d q) or (n_clients, d q) holding Theta flattened in C order,
outputs preallocated, prange over clients. Labels ``y`` are floats 0..K-1 (class 0 = reference).

The clipping holds for every finite input exactly as in :mod:`~privfedstat.kernels.glm_nb` (same
safety factor, limits and NaN rule). In addition: linear predictors are clamped to
``[-Z_MAX, Z_MAX]`` before the softmax, so an infinite ``x^T theta_k`` gives the limiting
probabilities instead of ``inf - inf``; a NaN predictor makes the row contribute 0; and the norms
of the residual ``r = p - e_y`` and of the curvature ``A = diag(p) - p p^T`` are bounded with
:func:`~privfedstat.kernels.norm_nb.norm_bound` (an entry of order 1e-200 squares to 0) like the row norms.
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit, prange

from .glm_nb import _DENORM_MIN, FASTMATH, _add_outer, _clip_constants, _limit, _mirror_mean, _outer_setup
from .norm_nb import norm_bound

__all__ = ["multinomial_clipped_mean_grad", "multinomial_client_loss", "multinomial_client_hessian",
           "multinomial_client_score_outer", "Z_MAX"]

#: linear predictors are clamped to [-Z_MAX, Z_MAX] (softmax of the clamped values is the limit for infinite ones)
Z_MAX = 1e300
_TINY = 1e-300  # floor of divisors whose reciprocal is taken


@njit(inline="always", fastmath=FASTMATH)
def _probs(x, t, q, z, p):
    """Fill z with x^T Theta (clamped to +-Z_MAX, NaN kept) and p with the probabilities of classes 1..q.

    Returns log(sum e^z) including class 0.
    """
    d = x.shape[0]
    mx = 0.0
    for k in range(q):
        s = 0.0
        for j in range(d):
            s += x[j] * t[j * q + k]
        if s > Z_MAX:
            s = Z_MAX
        elif s < -Z_MAX:
            s = -Z_MAX
        z[k] = s
        mx = max(mx, s)
    tot = math.exp(-mx)
    for k in range(q):
        p[k] = math.exp(z[k] - mx)
        tot += p[k]
    for k in range(q):
        p[k] /= tot
    return mx + math.log(tot)


@njit(inline="always", fastmath=FASTMATH)
def _clipped_gradient(x, t, yi, q, n, bound, cap, nan_fill, z, r, g):
    """Fill ``g`` with row ``x``'s clipped gradient ``f x r^T``, flattened (entry ``j q + k``); False where it is 0.

    ``r = p - e_y`` (``z``, ``r``: scratch of length q); ``f = min(1, bound / (||r|| ||x||))``,
    lowered by the smallest subnormal as in :func:`~privfedstat.kernels.glm_nb._limit`, so ``g``
    has norm ``<= bound`` (``n >= ||x||``; ``||r|| <= sqrt(2)``, so the product of the norms cannot
    overflow for ``||x|| <= 1e300``; larger rows divide in two steps). A NaN residual gives
    ``f = nan_fill``: False when clipping (the row contributes 0), NaN entries without clipping.
    False also where ``f = 0`` (callers then skip the row).
    """
    _probs(x, t, q, z, r)
    label = int(yi)
    if label > 0:
        r[label - 1] -= 1.0
    nr = norm_bound(r, q)
    if nr != nr:  # NaN predictor
        f = nan_fill
    else:
        f = bound / max(nr * n, _DENORM_MIN) if n <= 1e300 else _limit(bound, n, cap) / max(nr, _TINY)
        f = min(max(f - _DENORM_MIN, 0.0), 1.0)
    if f == 0.0:
        return False
    for j in range(x.shape[0]):
        fx = f * x[j]
        for k in range(q):
            g[j * q + k] = fx * r[k]
    return True


@njit(parallel=True, cache=True, fastmath=FASTMATH)
def multinomial_clipped_mean_grad(X, y, row_norm, offsets, theta, clip, q, out):
    """Per-client mean of per-sample gradients ``x (p - e_y)^T`` clipped to Frobenius norm ``clip``.

    A row's gradient ``x r^T`` has norm ``||r|| ||x||`` and is scaled by
    ``f = min(1, clip kappa / (||r|| ||x||))``, lowered by the smallest subnormal as in
    :func:`~privfedstat.kernels.glm_nb._limit` (:func:`_clipped_gradient`).
    ``row_norm[i] >= ||x_i||`` is required.
    """
    m = offsets.shape[0] - 1
    d = X.shape[1]
    shared = theta.shape[0] == 1
    bound, cap, nan_fill = _clip_constants(clip)
    for c in prange(m):
        t = theta[0] if shared else theta[c]
        acc = out[c]
        acc[:] = 0.0
        z = np.empty(q)
        r = np.empty(q)
        g = np.empty(d * q)
        for i in range(offsets[c], offsets[c + 1]):
            if _clipped_gradient(X[i], t, y[i], q, row_norm[i], bound, cap, nan_fill, z, r, g):
                for a in range(d * q):
                    acc[a] += g[a]
        inv = 1.0 / (offsets[c + 1] - offsets[c])
        for a in range(d * q):
            acc[a] *= inv


@njit(parallel=True, cache=True, fastmath=FASTMATH)
def multinomial_client_loss(X, y, offsets, theta, q, out):
    """Per-client mean loss ``log(1 + sum_k e^{z_k}) - z_y``."""
    m = offsets.shape[0] - 1
    shared = theta.shape[0] == 1
    for c in prange(m):
        t = theta[0] if shared else theta[c]
        z = np.empty(q)
        p = np.empty(q)
        s = 0.0
        for i in range(offsets[c], offsets[c + 1]):
            lse = _probs(X[i], t, q, z, p)
            yi = int(y[i])
            s += lse - (z[yi - 1] if yi > 0 else 0.0)
        out[c] = s / (offsets[c + 1] - offsets[c])


@njit(parallel=True, cache=True, fastmath=FASTMATH)
def multinomial_client_hessian(X, y, row_norm, offsets, theta, hclip, q, out):
    """Per-client mean Hessian ``(diag(p) - p p^T) kron x x^T``, each term clipped to Frobenius norm ``hclip``.

    A term has norm ``||A||_F ||x||^2`` (``A = diag(p) - p p^T``). With ``a >= ||A||_F`` it is
    accumulated as ``(A / a) kron v v^T``, ``v = t x``, ``t = min(sqrt(a), sqrt(hclip kappa) / ||x||)``:
    unclipped ``t^2 = a`` gives the exact term; clipped, ``||v||^2 <= hclip kappa``. Every factor
    is bounded (``|A / a| <= 1``, ``|v_j v_l| <= hclip``), so nothing overflows for huge rows.
    ``row_norm[i] >= ||x_i||`` is required; a NaN predictor contributes 0.
    """
    m = offsets.shape[0] - 1
    d = X.shape[1]
    shared = theta.shape[0] == 1
    bound, cap, nan_fill = _clip_constants(hclip)
    sqrt_bound = math.sqrt(bound)
    for c in prange(m):
        t = theta[0] if shared else theta[c]
        h = out[c]
        h[:, :] = 0.0
        z = np.empty(q)
        p = np.empty(q)
        A = np.empty((q, q))
        v = np.empty(d)
        for i in range(offsets[c], offsets[c + 1]):
            xi = X[i]
            _probs(xi, t, q, z, p)
            for k in range(q):
                for l in range(q):
                    A[k, l] = (p[k] if k == l else 0.0) - p[k] * p[l]
            na = norm_bound(A.reshape(q * q), q * q)
            if na != na:  # NaN predictor
                if nan_fill == 0.0:
                    continue
                na = 1.0
            a = max(na, _TINY)  # >= ||A||_F, with 1 / a finite
            ia = 1.0 / a
            for k in range(q):
                for l in range(q):
                    A[k, l] *= ia
            g = math.sqrt(a)
            lim = _limit(sqrt_bound, row_norm[i], cap)
            g = g if g < lim else lim
            for j in range(d):
                v[j] = g * xi[j]
            for j in range(d):
                for k in range(q):
                    for jj in range(d):
                        w = v[j] * v[jj]
                        for l in range(q):
                            h[j * q + k, jj * q + l] += w * A[k, l]
        inv = 1.0 / (offsets[c + 1] - offsets[c])
        for a in range(d * q):
            for b in range(d * q):
                h[a, b] *= inv


@njit(parallel=True, cache=True, fastmath=FASTMATH)
def multinomial_client_score_outer(X, y, row_norm, offsets, theta, clip, q, out):
    """Per-client mean outer product ``(1/n_c) sum_i g_i g_i^T`` of the clipped per-sample gradients.

    ``g_i`` is the gradient of :func:`multinomial_clipped_mean_grad` exactly: ``f x_i (p_i - e_{y_i})^T``
    flattened in C order (entry ``j q + k``), by :func:`_clipped_gradient`, so each term
    (``d q`` by ``d q``) has Frobenius norm ``||g_i||^2 <= clip^2`` and entries ``|g_a g_b| <= clip^2``.
    A NaN predictor contributes 0 (NaN without clipping, ``clip = inf``). Exactly symmetric.
    ``row_norm[i] >= ||x_i||`` is required.
    """
    bound, cap, nan_fill = _clip_constants(clip)
    for c in prange(offsets.shape[0] - 1):
        t, h, g = _outer_setup(theta, c, out)
        z = np.empty(q)
        r = np.empty(q)
        for i in range(offsets[c], offsets[c + 1]):
            if _clipped_gradient(X[i], t, y[i], q, row_norm[i], bound, cap, nan_fill, z, r, g):
                _add_outer(h, g)
        _mirror_mean(h, offsets[c + 1] - offsets[c])
