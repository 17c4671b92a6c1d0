"""numba kernels for multinomial logistic regression (parameter matrix Theta of shape (d, q), q = K - 1).

Same layout and conventions as :mod:`privfedstat.kernels.glm_nb`: clients concatenated with
offsets, ``theta`` of shape (1, d q) or (n_clients, d q) holding Theta flattened in C order,
outputs preallocated, prange over clients. Labels ``y`` are floats 0..K-1 (class 0 = reference).
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit, prange

from .glm_nb import _TINY, FASTMATH

__all__ = ["multinomial_clipped_mean_grad", "multinomial_client_loss", "multinomial_client_hessian"]


@njit(inline="always", fastmath=FASTMATH)
def _probs(x, t, q, z, p):
    """Fill z with x^T Theta and p with the class probabilities of classes 1..q; return log(sum e^z) incl. class 0."""
    d = x.shape[0]
    mx = 0.0
    for k in range(q):
        s = 0.0
        for j in range(d):
            s += x[j] * t[j * q + k]
        z[k] = s
        mx = max(mx, s)
    tot = math.exp(-mx)
    for k in range(q):
        p[k] = math.exp(z[k] - mx)
        tot += p[k]
    for k in range(q):
        p[k] /= tot
    return mx + math.log(tot)


@njit(parallel=True, cache=True, fastmath=FASTMATH)
def multinomial_clipped_mean_grad(X, y, row_norm, offsets, theta, clip, q, out):
    """Per-client mean of per-sample gradients ``x (p - e_y)^T`` clipped to Frobenius norm ``clip``."""
    m = offsets.shape[0] - 1
    d = X.shape[1]
    shared = theta.shape[0] == 1
    for c in prange(m):
        t = theta[0] if shared else theta[c]
        acc = out[c]
        acc[:] = 0.0
        z = np.empty(q)
        r = np.empty(q)
        for i in range(offsets[c], offsets[c + 1]):
            xi = X[i]
            _probs(xi, t, q, z, r)
            yi = int(y[i])
            if yi > 0:
                r[yi - 1] -= 1.0
            nr = 0.0
            for k in range(q):
                nr += r[k] * r[k]
            f = min(1.0, clip / max(math.sqrt(nr) * row_norm[i], _TINY))
            for j in range(d):
                fx = f * xi[j]
                for k in range(q):
                    acc[j * q + k] += fx * r[k]
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
    """Per-client mean Hessian ``(diag(p) - p p^T) kron x x^T``, each term clipped to Frobenius norm ``hclip``."""
    m = offsets.shape[0] - 1
    d = X.shape[1]
    shared = theta.shape[0] == 1
    for c in prange(m):
        t = theta[0] if shared else theta[c]
        h = out[c]
        h[:, :] = 0.0
        z = np.empty(q)
        p = np.empty(q)
        A = np.empty((q, q))
        for i in range(offsets[c], offsets[c + 1]):
            xi = X[i]
            _probs(xi, t, q, z, p)
            fa = 0.0
            for k in range(q):
                for l in range(q):
                    A[k, l] = (p[k] if k == l else 0.0) - p[k] * p[l]
                    fa += A[k, l] * A[k, l]
            f = min(1.0, hclip / max(math.sqrt(fa) * row_norm[i] * row_norm[i], _TINY))
            for j in range(d):
                fxj = f * xi[j]
                for k in range(q):
                    for jj in range(d):
                        w = fxj * xi[jj]
                        for l in range(q):
                            h[j * q + k, jj * q + l] += w * A[k, l]
        inv = 1.0 / (offsets[c + 1] - offsets[c])
        for a in range(d * q):
            for b in range(d * q):
                h[a, b] *= inv
