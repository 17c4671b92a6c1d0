"""The joint recursion of FedIRLS's combined estimate: a weighted sum of its refine rounds' Newton targets.

:class:`~privfedstat.theory.noise.IRLSNoise` carries the error ``d_r`` of the iterate through the rounds; with a
combination it also carries the running sum ``a_r = sum_(s < r) w_s u_s`` of the targets' errors and its
cross-covariance with ``d_r``. The derivation is in docs/algorithms/fedirls.md, "Combined estimate".
"""

from __future__ import annotations

import numpy as np

from .noise_maps import psd

__all__ = ["target_round", "combined_covariance"]


def target_round(total: np.ndarray, cross: np.ndarray, C: np.ndarray, D: np.ndarray, K: np.ndarray, weight: float,
                 var: float, target_inv: np.ndarray, step_inv: np.ndarray, metric: np.ndarray,
                 spurious: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """One round of the joint recursion: ``(Cov(a_(r+1)), Cov(a_(r+1), d_(r+1)))`` from ``(Cov(a_r), Cov(a_r, d_r))``.

    Round r's target ``t_r = theta_r - eta N^-1 g_r`` (N the last round's Newton matrix) has the error
    ``u_r = K d_r - eta N^-1 xi_r``, ``K = I - eta N^-1 H``; its step leaves ``d_(r+1) = D d_r - eta N_r^-1 xi_r``.
    ``C = Cov(d_r)``; ``var = eta^2 v_r``; ``target_inv``, ``step_inv``: ``N^-1`` and ``N_r^-1``; ``metric``: the
    gradient noise's covariance shape (I in the rounds' own coordinates). ``weight`` 0: a round whose target the
    estimate leaves out (only the cross term moves on). ``spurious``: ``eta^2 E[E C E]`` where H = J + E is a release
    of the Jacobian with noise E (None: H is J): the part of ``K C K^T`` and ``K C D^T`` that E makes, not the fit,
    taken out (as the last map's overshoot in :meth:`~privfedstat.theory.noise.IRLSNoise.covariance`). Arrays may be
    stacks of shape (..., p, p).
    """
    cross_next = cross @ D.mT
    if weight:
        shared = var * target_inv @ metric @ step_inv.mT  # Cov(eta N^-1 xi_r, eta N_r^-1 xi_r)
        carried, carried_cross = K @ C @ K.mT, K @ C @ D.mT
        if spurious is not None:
            carried = psd(carried - target_inv @ spurious @ target_inv.mT)
            carried_cross = carried_cross - target_inv @ spurious @ step_inv.mT
        target = carried + var * target_inv @ metric @ target_inv.mT
        total = total + weight * (cross @ K.mT + K @ cross.mT) + weight**2 * target
        cross_next = cross_next + weight * (carried_cross + shared)
    return total, cross_next


def combined_covariance(total: np.ndarray, cross: np.ndarray, C: np.ndarray, weight: float) -> np.ndarray:
    """``Cov(a_R + w_R d_(R+1))``: the last round's target is the last iterate, whose error ``d_(R+1)`` has
    covariance ``C`` (the recursion's, with its overshoot); ``cross = Cov(a_R, d_(R+1))``."""
    out = total + weight * (cross + cross.mT) + weight**2 * C
    return (out + out.mT) / 2
