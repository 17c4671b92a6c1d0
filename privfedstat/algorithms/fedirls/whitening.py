"""The change of basis of FedIRLS's refine rounds: the rows mapped so that the located point's floored Hessian
becomes the identity, and a multinomial model's reference class under that map (post-processing of releases)."""

from __future__ import annotations

import numpy as np

from ...federation.protocol import parameter_basis, reference_map

__all__ = ["whitening", "reference_class"]


def whitening(H_floored: np.ndarray, n_outputs: int = 1, reference: int = 0) -> np.ndarray:
    """The map of the rows ``x -> Hf^{-1/2} x`` (symmetric) under which the floored released Hessian Hf becomes the
    identity; for q = ``n_outputs`` > 1 (multinomial, Hf of size (d q)^2, parameters flat in C order) Hf is replaced
    by the mean of its q diagonal blocks ``X^T W_k X / N`` (a (d, d) map of the rows reaches only the design's
    part of the curvature; the classes' coupling stays), in the coefficients of class ``reference`` as the
    reference (:func:`~privfedstat.federation.protocol.reference_map`; see :func:`reference_class`).

    The refine rounds run in it: the clients map their rows x to ``Hf^{-1/2} x`` (the coefficients
    become ``phi = Hf^{1/2} theta``), clip per-sample gradients there and release noise that is
    isotropic in phi, that is shaped like the sampling noise (``Hf^-1``) in theta. On the fitting
    columns the noise is isotropic while the information is not: along a direction of small
    curvature (a rare binary column, correlated columns) the privacy noise is many times the
    sampling noise while elsewhere it is not. Post-processing of a released Hessian, so the change
    of basis costs no budget; the bounds are searched again in the new basis. Inferred, not from a
    paper (the preconditioning of Newton-type methods, here applied before the clipping).
    """
    H = (H_floored + H_floored.T) / 2
    if n_outputs > 1:
        T = parameter_basis(np.eye(H.shape[0] // n_outputs), H.shape[0], reference)  # the classes' map alone
        H = T.T @ H @ T
        H = np.mean([H[k::n_outputs, k::n_outputs] for k in range(n_outputs)], axis=0)
    vals, vecs = np.linalg.eigh(H)
    return (vecs / np.sqrt(vals)) @ vecs.T


def reference_class(H_floored: np.ndarray, n_outputs: int) -> int:
    """The reference class of a multinomial model's whitened refine rounds (0 for other families): the one under
    which :func:`whitening`'s row map comes closest to whitening the whole floored Hessian Hf.

    A (d, d) map of the rows whitens only the design's part of the curvature; the classes' coupling
    stays, and it is strong when the reference class is rare (each class's coefficients are contrasts
    with it, and they share its sampling noise): the isotropic noise of the rounds is then far from the
    shape of the sampling noise in theta. With Hf ~ A kron C (C the (q, q) traces of its blocks) and
    class j as reference (the clients swap its labels with class 0's; M = :func:`reference_map`,
    ``C_j = M^T C M``), the row map whitens ``A c_j`` (c_j the mean diagonal of C_j), and the isotropic noise
    has covariance ``A^-1 kron c_j C^-1 M^T M C^-1`` in theta against the sampling ``A^-1 kron C^-1``: the
    class whose mean ratio of the two diagonals is smallest wins, class 0 on ties within 1%. Post-processing
    of the released Hessian, O(d^2 q^2 + q^4) rather than the (d q)^3 of the exact ratio, whose choices it
    repeats. Inferred (measured in ``benchmarks/RESULTS.md``, "Multinomial refine rounds: the reference class").
    """
    if n_outputs == 1:
        return 0
    d = H_floored.shape[0] // n_outputs
    C = np.einsum("akal->kl", ((H_floored + H_floored.T) / 2).reshape(d, n_outputs, d, n_outputs))
    C_inv = np.linalg.inv(C)
    score = []
    for j in range(n_outputs + 1):
        M = reference_map(n_outputs, j)
        c_j = float(np.mean(np.diag(M.T @ C @ M)))
        score.append(float(np.mean(c_j * np.diag(C_inv @ M.T @ M @ C_inv) / np.diag(C_inv))))
    best = int(np.argmin(score))
    return best if score[best] < 0.99 * score[0] else 0
