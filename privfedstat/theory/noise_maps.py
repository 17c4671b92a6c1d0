"""The linearised maps a privacy-noise recursion goes through (:mod:`privfedstat.theory.noise`).

A gradient step's map ``I - eta H``, a Newton step's ``I - eta N^-1 H``, both with their spectra clamped so that
a noisy released matrix cannot make the recursion explode; the eigenvalue floor of a Newton matrix; and the
second moment of a symmetric noise matrix around a fixed one (the Hessian-noise term of FedIRLS and the sandwich).
"""

from __future__ import annotations

import numpy as np
from threadpoolctl import threadpool_limits

from .._linalg import vec_to_sym

__all__ = ["step_map", "newton_map", "NewtonMaps", "psd", "floored", "refloored", "symmetric_noise_sandwich", "one_blas_thread",
           "antithetic_releases"]


def step_map(H: np.ndarray, step_size: float) -> np.ndarray:
    """The linearised gradient step ``A = I - eta H`` with the spectrum of ``eta H`` clamped to [0, 1].

    A fit whose path did not diverge has ``|1 - eta lambda| < 1`` for the eigenvalues lambda of the
    Hessian it descended, and ``step_size="auto"`` (a curvature bound) keeps ``eta lambda <= 1``;
    a *released* H is noisy, and an eigenvalue with ``eta lambda`` far above 1 (or a floored one near
    0) would make ``A^S`` explode (unclamped: intervals of width 1e50 at N = 2000 over 50 sites,
    mu = 1). So ``eta lambda`` is clamped to [0, 1] (inferred; for a true ``eta lambda`` in (1, 2)
    this forgets a step's noise a little faster than the real oscillating iteration does).
    """
    vals, vecs = np.linalg.eigh((H + H.T) / 2)
    return (vecs * (1.0 - np.clip(step_size * vals, 0.0, 1.0))) @ vecs.T


def newton_map(N: np.ndarray, H: np.ndarray, step_size: float, upper: float = 1.0) -> np.ndarray:
    """``D = I - eta N^-1 H`` for SPD N, with the spectrum of ``eta N^-1/2 H N^-1/2`` clamped to [0, upper].

    ``N^-1 H`` is similar to the symmetric ``S = N^-1/2 H N^-1/2``; a Newton iteration that settled
    (FedIRLS's rounds, FedNewton's step) contracts, but a noisy released N or H can put an
    eigenvalue of ``eta S`` above 2 (a floored N far below H) and the linearised rounds would then
    amplify earlier noise without bound, while the real fit, shortened by its trust region, did
    not. ``upper`` 1 (as :func:`step_map`; inferred) forgets the overshoot where N is flatter than H; 2, the
    bound at which the map stops amplifying, keeps it. N and H may be stacks of shape (..., p, p).
    """
    return NewtonMaps(H, step_size)(N, upper)


class NewtonMaps:
    """:func:`newton_map` at one H and step size for several N, each distinct N's eigen-decompositions computed once.

    A recursion asks for the maps of few Newton matrices (a phase's rounds share one, the last round takes it with
    two clamps); the decompositions of N and of ``S = N^-1/2 H N^-1/2`` (one per draw when H is a stack) depend on N
    alone, so an N equal to an earlier one (same shape and values) reuses them: the same numbers as a fresh call.
    """

    def __init__(self, H: np.ndarray, step_size: float):
        self.H, self.step_size = (H + H.mT) / 2, step_size
        self._spectra: dict[tuple[tuple[int, ...], bytes], tuple[np.ndarray, ...]] = {}

    def __call__(self, N: np.ndarray, upper: float = 1.0) -> np.ndarray:
        N = np.ascontiguousarray(N, dtype=np.float64)
        key = (N.shape, N.tobytes())
        if key not in self._spectra:
            vals, vecs = np.linalg.eigh((N + N.mT) / 2)
            root = (vecs * np.sqrt(vals)[..., None, :]) @ vecs.mT
            inv_root = (vecs / np.sqrt(vals)[..., None, :]) @ vecs.mT
            self._spectra[key] = (root, inv_root, *np.linalg.eigh(inv_root @ self.H @ inv_root))
        root, inv_root, mu, U = self._spectra[key]
        return inv_root @ (U * (1.0 - np.clip(self.step_size * mu, 0.0, upper))[..., None, :]) @ U.mT @ root


def psd(C: np.ndarray) -> np.ndarray:
    """The symmetric ``C`` (or a stack) with its negative eigenvalues set to 0."""
    vals, vecs = np.linalg.eigh((C + C.mT) / 2)
    return (vecs * np.maximum(vals, 0.0)[..., None, :]) @ vecs.mT


def floored(H: np.ndarray, floor: float) -> np.ndarray:
    """``H`` (or a stack of shape (..., p, p)) with its eigenvalues raised to at least ``floor``."""
    vals, vecs = np.linalg.eigh(H)
    return (vecs * np.maximum(vals, floor)[..., None, :]) @ vecs.mT


def refloored(N: np.ndarray, floor: float, basis: np.ndarray | None = None) -> np.ndarray:
    """:func:`floored` N, in the coordinates ``P^-T N P^-1`` of a ``basis`` P when one is given (mapped back); N itself
    (the same array, not its reconstruction from the eigen-decomposition) where no eigenvalue is below ``floor``.

    A round whose floor the matrix already clears then shares N's :class:`NewtonMaps` entry. N may be a stack.
    """
    P_inv = None if basis is None else np.linalg.inv(basis)
    M = N if basis is None else P_inv.T @ N @ P_inv
    if np.all(np.linalg.eigvalsh(M) >= floor):
        return N
    return floored(M, floor) if basis is None else basis.T @ floored(M, floor) @ basis


def antithetic_releases(center: np.ndarray, sd: float, floor: float, n_pairs: int, seed: int) -> np.ndarray:
    """``2 n_pairs`` releases ``center +- Xi`` floored at ``floor``: Xi symmetric Gaussian (diagonal sd ``sd``,
    off-diagonal variance ``sd^2 / 2``, the law of a released Hessian's noise), ``n_pairs`` antithetic pairs from a
    fixed ``seed`` (reproducible); shape (2 n_pairs, p, p)."""
    p = center.shape[-1]
    rng = np.random.default_rng(seed)
    noise = vec_to_sym(sd * rng.standard_normal((n_pairs, p * (p + 1) // 2)), p)
    return floored(center + np.concatenate([noise, -noise]), floor)


def symmetric_noise_sandwich(C: np.ndarray, var: float) -> np.ndarray:
    """``E[Xi C Xi] = (s^2 / 2) (C + tr(C) I)`` for symmetric C and symmetric Gaussian noise Xi.

    Xi has independent entries on and above the diagonal, variance ``s^2`` on the diagonal and
    ``s^2 / 2`` off it (the noise of a ``sym_to_vec`` release). Entry (j, l):
    ``sum_km C_km E[Xi_jk Xi_ml]``, where ``E[Xi_jk Xi_ml]`` is non-zero only for {j, k} = {m, l}:
    for j != l only (m, k) = (j, l) contributes, ``C_lj s^2 / 2``; for j = l the terms
    ``C_kk Var(Xi_jk)`` give ``s^2 C_jj + sum_{k != j} C_kk s^2 / 2 = (s^2 / 2)(C_jj + tr C)``.
    C may be a stack of shape (..., p, p).
    """
    return 0.5 * var * (C + np.trace(C, axis1=-2, axis2=-1)[..., None, None] * np.eye(C.shape[-1]))


def one_blas_thread() -> threadpool_limits:
    """A context in which BLAS and LAPACK run on one thread, for a computation on stacks of small matrices.

    numpy's stacked ``eigh`` and ``matmul`` call LAPACK and BLAS once per matrix; on small matrices a call gains
    nothing from a second thread, and where the cores are busy every call waits for it (measured in
    benchmarks/RESULTS.md, "FedIRLS's release draws: shared spectra, one BLAS thread"). The results are the same.
    """
    return threadpool_limits(1, user_api="blas")
