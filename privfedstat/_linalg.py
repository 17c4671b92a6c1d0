"""Linear-algebra helpers shared by the clients, the estimators and the inference: the isometric packing of
symmetric matrices into vectors (how a Hessian is released), the eigenvalue floor, and the memory allowed for the
clients' Hessians."""

from __future__ import annotations

import math

import numpy as np

__all__ = ["sym_to_vec", "vec_to_sym", "floor_eigenvalues", "MAX_HESSIAN_GB"]

SQRT2 = math.sqrt(2.0)
#: Memory (GB) allowed for all clients' (p, p) Hessians at once: the Newton-type estimators and the
#: covariance releases hold one per client in a single pass and refuse larger problems up front.
MAX_HESSIAN_GB = 4.0


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
