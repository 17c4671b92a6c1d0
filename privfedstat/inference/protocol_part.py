"""The protocol's part of a fit's covariance: its privacy noise and, for FedIRLS, its path remainder.

Both are read from the protocol's noise model (:func:`~privfedstat.theory.protocol_noise_covariance`); they are
reported apart (:attr:`~privfedstat.InferenceResult.cov_privacy`, :attr:`~privfedstat.InferenceResult.cov_path`)
because a larger mu shrinks the first and not the second (docs/guide/inference.md).
"""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np

from ..federation.protocol import Run
from ..theory.noise import IRLSNoise
from ..theory.noise_covariance import protocol_noise_covariance, release_draws

__all__ = ["protocol_parts", "path_note", "weights_move"]


def protocol_parts(run: Run, mu: float, H: np.ndarray, s_H: float, notes: list[str]
                  ) -> tuple[np.ndarray, np.ndarray, tuple[np.ndarray, np.ndarray] | None]:
    """Covariance of the protocol's privacy noise in theta (fitting scale), linearised at H (``mu`` = inf: zeros), that
    of its path remainder, and, for FedIRLS, the privacy part's draws at second releases of H with their Hessians (None
    for the others).

    H is the inference's release of the clipped score's Jacobian, diagonal noise sd ``s_H``: FedIRLS's last Newton
    map keeps only the overshoot beyond that noise, and the draws (:func:`~privfedstat.theory.noise_covariance.
    release_draws`) take the noise of H out of the coefficients' precisions (:func:`~privfedstat.inference.covariance.
    precision_corrected`).

    The path remainder is FedIRLS's ``last_step`` (:class:`~privfedstat.theory.noise.IRLSNoise`): the error its last
    Newton step leaves where the released gradients show the Newton matrix wrong, and the site effects' shift of a
    re-weighed root. It is set by the path, not by the noise (it stays as mu grows; more rounds shrink it), so it is
    reported apart from the privacy part (:attr:`~privfedstat.InferenceResult.cov_path`); zeros for the others.

    From the protocol's noise model (:func:`privfedstat.theory.protocol_noise_covariance`); a protocol
    that reports none (a user's subclass of the base estimator; every registered estimator reports
    one) gets ``diag(noise_sd^2)``, the lower bound of ``run.noise_sd``, and a note.
    """
    if math.isinf(mu):
        return np.zeros_like(H), np.zeros_like(H), None
    if run.noise_model is None:
        notes.append("the protocol reports no noise model: its privacy-noise variance is the lower bound "
                     "noise_sd^2 of its last release (intervals may be too narrow)")
        sd = np.broadcast_to(np.asarray(run.noise_sd, dtype=np.float64), (H.shape[0],))
        return np.diag(sd * sd), np.zeros_like(H), None
    model, path = run.noise_model, np.zeros_like(H)
    if isinstance(model, IRLSNoise) and model.last_step is not None:
        whole = protocol_noise_covariance(model, H, hessian_sd=float(s_H))
        model = replace(model, last_step=None)
    C = protocol_noise_covariance(model, H, hessian_sd=float(s_H))
    if model is not run.noise_model:
        path = (whole - C + (whole - C).T) / 2
    if isinstance(model, IRLSNoise) and s_H > 0 and not model.is_zero:
        return C, path, release_draws(model, H, float(s_H))
    return C, path, None


def weights_move(V_s: np.ndarray, V_a: np.ndarray, c: float, sizes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The sampling covariance ``V_s`` of an estimate aggregated with weights w, split into the pooled root's (the
    MLE's, about the truth) and the weights' move from it, which joins the path remainder ``V_a``.

    With site i's mean score ``gbar_i`` (n_i rows of score covariance Sigma), the weighted root is off the truth by
    ``-J^-1 sum_i w_i gbar_i``, of covariance ``c J^-1 Sigma J^-1`` with ``c = sum_i w_i^2 / n_i``
    (:func:`~privfedstat.inference.covariance.weighted_factor`: ``V_s``). With ``pi_i = n_i / N`` it is the pooled
    root's error ``-J^-1 sum_i pi_i gbar_i`` (``c = 1 / N``) plus the move ``-J^-1 sum_i (w_i - pi_i) gbar_i``, and the
    two are uncorrelated, ``sum_i pi_i (w_i - pi_i) / n_i = sum_i (w_i - pi_i) / N = 0``: the move's sampling
    covariance is ``(c - 1 / N) / c`` of ``V_s``. It is the protocol's, not the data's (the weights trade it for the
    sites' privacy noise; it is 0 with size weights and vanishes with them as mu grows), so the fit's deviation from
    the MLE is ``cov_privacy + cov_path`` with it in ``cov_path`` (the site effects' part of the move is there already,
    :mod:`privfedstat.algorithms.fedirls.site_weights`); the total is unchanged. Returns ``(V_s, V_a)`` so split.
    """
    n = np.asarray(sizes, dtype=np.float64)
    moved = max(1.0 - 1.0 / (float(np.sum(n)) * c), 0.0)
    return (1.0 - moved) * V_s, V_a + moved * V_s


def path_note(V_a: np.ndarray, V_s: np.ndarray, notes: list[str]) -> None:
    """A note where the path remainder's sd exceeds the sampling standard error of some coefficient (original scale),
    as :func:`~privfedstat.fitting.diagnostics.warn_privacy_share` judges the privacy part: more rounds shrink it, a
    larger mu does not."""
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = np.sqrt(np.diag(V_a) / np.diag(V_s))
    idx = np.flatnonzero(ratio > 1.0)
    if idx.size:
        notes.append(f"the path remainder (cov_path: the error FedIRLS's last Newton step leaves where its released "
                     f"gradients show the Newton matrix wrong, and a re-weighed root's move from the pooled one) dominates the "
                     f"error of coefficient(s) {idx.tolist()} (original order): its sd is up to "
                     f"{float(np.max(ratio[idx])):.3g} times the sampling standard error. It is in the intervals, but "
                     "it is not privacy noise and a larger mu does not shrink it; more rounds (n_rounds) do")
