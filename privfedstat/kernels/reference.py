"""Plain numpy twins of the numba kernels: slow, obviously correct, used by the tests.

They form the explicit per-sample gradient (Hessian) matrix and compute norms directly, so they
also check the row-norm shortcut the numba kernels use.
"""

from __future__ import annotations

import numpy as np

from ..families.base import Family

__all__ = ["clipped_mean_grad", "client_loss", "client_hessian"]


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
