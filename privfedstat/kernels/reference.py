"""Plain numpy twins of the numba kernels: slow, obviously correct, used by the tests.

They form the explicit per-sample gradient (Hessian) matrix and compute norms directly, so they
also check the row-norm shortcut the numba kernels use.
"""

from __future__ import annotations

import numpy as np

from ..families.base import Family

__all__ = [
    "clipped_mean_grad",
    "client_loss",
    "client_hessian",
    "multinomial_clipped_mean_grad",
    "multinomial_client_loss",
    "multinomial_client_hessian",
]


def _theta_rows(theta: np.ndarray, offsets: np.ndarray) -> np.ndarray:
    sizes = np.diff(offsets)
    theta = np.atleast_2d(theta)
    return np.repeat(theta, sizes, axis=0) if theta.shape[0] > 1 else np.broadcast_to(theta, (offsets[-1], theta.shape[1]))


def clipped_mean_grad(X, y, offsets, theta, clip, family: Family) -> np.ndarray:
    """Numpy twin of :func:`~privfedstat.kernels.glm_nb.glm_clipped_mean_grad`."""
    z = np.einsum("ij,ij->i", X, _theta_rows(theta, offsets))
    G = family.deriv(y, z)[:, None] * X  # explicit per-sample gradients (N, d)
    norms = np.linalg.norm(G, axis=1)
    with np.errstate(divide="ignore", invalid="ignore"):
        factor = np.where(norms > clip, clip / norms, 1.0)
    G = G * factor[:, None]
    return np.add.reduceat(G, offsets[:-1], axis=0) / np.diff(offsets)[:, None]


def client_loss(X, y, offsets, theta, family: Family) -> np.ndarray:
    """Numpy twin of :func:`~privfedstat.kernels.glm_nb.glm_client_loss`."""
    z = np.einsum("ij,ij->i", X, _theta_rows(theta, offsets))
    return np.add.reduceat(family.loss(y, z), offsets[:-1]) / np.diff(offsets)


def client_hessian(X, y, offsets, theta, hclip, family: Family) -> np.ndarray:
    """Numpy twin of :func:`~privfedstat.kernels.glm_nb.glm_client_hessian`."""
    z = np.einsum("ij,ij->i", X, _theta_rows(theta, offsets))
    Hs = family.deriv2(y, z)[:, None, None] * np.einsum("ij,ik->ijk", X, X)
    norms = np.linalg.norm(Hs, axis=(1, 2))  # Frobenius = spectral norm for rank one
    with np.errstate(divide="ignore", invalid="ignore"):
        factor = np.where(norms > hclip, hclip / norms, 1.0)
    Hs = Hs * factor[:, None, None]
    return np.add.reduceat(Hs, offsets[:-1], axis=0) / np.diff(offsets)[:, None, None]


def _multinomial_Z(X, offsets, theta, q):
    """Linear predictors (N, q) for flattened Theta rows of shape (1 or m, d q)."""
    theta = np.atleast_2d(theta)
    d = X.shape[1]
    if theta.shape[0] == 1:
        return X @ theta[0].reshape(d, q)
    rows = np.repeat(np.arange(theta.shape[0]), np.diff(offsets))
    return np.einsum("ij,ijk->ik", X, theta.reshape(-1, d, q)[rows])


def multinomial_clipped_mean_grad(X, y, offsets, theta, clip, family) -> np.ndarray:
    """Numpy twin of :func:`~privfedstat.kernels.multinomial_nb.multinomial_clipped_mean_grad`."""
    q = family.n_outputs
    R = family.residual(y, _multinomial_Z(X, offsets, theta, q))
    G = np.einsum("ij,ik->ijk", X, R).reshape(X.shape[0], -1)  # explicit per-sample gradients (N, d q)
    norms = np.linalg.norm(G, axis=1)
    with np.errstate(divide="ignore", invalid="ignore"):
        factor = np.where(norms > clip, clip / norms, 1.0)
    return np.add.reduceat(G * factor[:, None], offsets[:-1], axis=0) / np.diff(offsets)[:, None]


def multinomial_client_loss(X, y, offsets, theta, family) -> np.ndarray:
    """Numpy twin of :func:`~privfedstat.kernels.multinomial_nb.multinomial_client_loss`."""
    L = family.loss(y, _multinomial_Z(X, offsets, theta, family.n_outputs))
    return np.add.reduceat(L, offsets[:-1]) / np.diff(offsets)


def multinomial_client_hessian(X, y, offsets, theta, hclip, family) -> np.ndarray:
    """Numpy twin of :func:`~privfedstat.kernels.multinomial_nb.multinomial_client_hessian`."""
    q = family.n_outputs
    A = family.curvature(_multinomial_Z(X, offsets, theta, q))  # (N, q, q)
    Hs = np.einsum("ij,il,ikm->ijklm", X, X, A)  # (N, d, q, d, q): H[(j,k),(l,m)] = x_j x_l A_km
    Hs = Hs.reshape(X.shape[0], X.shape[1] * q, X.shape[1] * q)
    norms = np.linalg.norm(Hs, axis=(1, 2))
    with np.errstate(divide="ignore", invalid="ignore"):
        factor = np.where(norms > hclip, hclip / norms, 1.0)
    return np.add.reduceat(Hs * factor[:, None, None], offsets[:-1], axis=0) / np.diff(offsets)[:, None, None]
