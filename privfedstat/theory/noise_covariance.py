"""The covariance of the privacy noise in a fit's estimate, from the noise model its protocol records.

:func:`protocol_noise_covariance` gives the covariance of the privacy noise in the returned theta of a
:mod:`privfedstat.theory.noise` model (fitting scale, oracle order:
flat index ``j q + k`` for the multinomial family, p = d (K - 1); the algebra does not depend on
p), linearised at a symmetric positive definite Hessian H of the server's weighted objective at
the estimate. The privacy noise is independent of the data, so given the data this is the whole
of the protocol's extra variance; it adds to the sampling variance.

Linearisation (the *target* linearisation of :func:`~privfedstat.theory.predict_mse_from_params`): a
gradient step of size eta has Jacobian ``A = I - eta H`` at every step, and the noise of step s
reaches the output through the later steps' Jacobians,
:func:`~privfedstat.theory._engine.privacy_transport` (the privacy term of
``predict_mse_from_params`` is the same function with the Jacobians along the path).
Approximations, all inferred (not in the papers), with the regime in which they hold:

* **One Hessian for all clients and all steps.** Local steps on client i go through
  ``I - eta H_i``; H_i is replaced by the server's H. The error is of second order in ``H_i - H``
  for equal client sizes (the first-order terms average out) and of first order in the spread of
  the H_i otherwise (small for exchangeable clients with n_i >> p). The Jacobians along the path
  are those at the estimate: accurate once the noise-free path has settled (noise of early steps
  is damped by the later steps anyway).
* **Small noise.** Terms of second order in the noise (curvature of the loss along the noise,
  clipping thresholds crossed by noisy iterates, the noise-driven drift of local iterates) are
  neglected: the noise must be small on the scale over which the Hessian changes. For local
  steps (FedAvg, FedHybrid stage I, SCAFFOLD, FedNewton's first stage) the scale that matters is
  a client's own wander, ``s_i / sqrt(2 eta lambda_min)`` per coordinate, not the averaged noise:
  on a logistic design FedAvg's variance is 10% above the prediction at n_i = 200, mu = 1 (wander
  sd 0.3; the local curvature averaged over the wander is lower) and within 1% at n_i = 400, mu = 2.
* **Clipped score.** H is the Jacobian of the weighted mean *clipped* score: for a GLM the rows
  whose gradient is clipped do not contribute (their clipped gradient ``B sign(ell') x / ||x||``
  does not move with theta); for the multinomial family they still do (the clipped gradient
  rotates with the residual). The Newton matrices of FedNewton and FedIRLS are means of
  per-sample Hessians clipped at C_H over all rows, which differ from H where gradients or
  Hessians are clipped; FedIRLS's model uses its released Hessian for them, FedNewton's takes it
  as ``newton_matrix`` (:func:`protocol_noise_covariance`).

Accuracy (checked against the noise seeds' empirical variance by
``tests/theory/test_noise_covariance.py``): within about 20% for every protocol on logistic,
Poisson and multinomial designs near the defaults (B about the 95% quantile of gradient norms,
C_H above the 97% quantile of Hessian norms). Outside that regime FedNewton's variance is
under-predicted, by up to about 10% when the floor ``ell''(0)`` lies above H's eigenvalues
(client-level floors shorten the steps more than the pooled floor; less as n_i grows) and by up
to about 30% when C_H lies below the 90% quantile of per-sample Hessian norms, where FedIRLS's
is over-predicted by about 20%. Measurements in ``benchmarks/RESULTS.md``.
"""

from __future__ import annotations

import math

import numpy as np

from .noise import GradientNoise, IRLSNoise, NewtonNoise, ScaffoldNoise
from .noise_maps import antithetic_releases, one_blas_thread

__all__ = ["protocol_noise_covariance", "release_draws", "JACOBIAN_PAIRS"]

#: antithetic pairs of second releases in :func:`release_draws`: the pairs cancel the first-order response, and at 256
#: the corrected precisions' Monte-Carlo sd is about 1% (the accuracy and the cost are measured in benchmarks/RESULTS.md,
#: "FedIRLS: precisions at the Jacobian, not at its release" and "FedIRLS's release draws: shared spectra, one BLAS thread")
JACOBIAN_PAIRS = 256


def _spd(H, name: str) -> np.ndarray:
    """``H`` as a symmetric positive definite float matrix, or a ValueError saying what to change."""
    H = np.asarray(H, dtype=np.float64)
    if H.ndim != 2 or H.shape[0] != H.shape[1] or H.shape[0] == 0:
        raise ValueError(f"{name} must be a square (p, p) matrix, got shape {H.shape}.")
    if not np.all(np.isfinite(H)):
        raise ValueError(f"{name} must be finite.")
    scale = max(float(np.max(np.abs(H))), 1e-300)
    if float(np.max(np.abs(H - H.T))) > 1e-8 * scale:
        raise ValueError(f"{name} must be symmetric (a Hessian); symmetrise it, e.g. (H + H.T) / 2.")
    H = (H + H.T) / 2
    if float(np.linalg.eigvalsh(H)[0]) <= 0:
        raise ValueError(f"{name} must be positive definite (floor its eigenvalues first, e.g. "
                         "privfedstat._linalg.floor_eigenvalues); the noise is linearised at a minimum.")
    return H


def protocol_noise_covariance(noise_model, H, *, newton_matrix=None, hessian_sd: float | None = None) -> np.ndarray:
    """Covariance of the privacy noise of a fit's estimate, linearised at the Hessian H.

    Parameters
    ----------
    noise_model : GradientNoise, NewtonNoise, ScaffoldNoise or IRLSNoise
        ``Run.noise_model`` of a fit (reported by every private estimator's protocol).
    H : array of shape (p, p)
        Symmetric positive definite Hessian of the server's weighted objective at the estimate,
        on the fitting scale, in the oracle's parameter order: the Jacobian of the weighted mean
        *clipped* score, ``sum_i w_i mean_j ell''(x_j^T theta) x_j x_j^T`` over the rows whose
        gradient is not clipped (a clipped GLM gradient ``B sign(ell') x / ||x||`` does not move
        with theta). The mean of per-sample Hessians over all rows exceeds it where rows are
        clipped, and understates the noise the steps let through.
    newton_matrix : array of shape (p, p), optional
        FedNewton only: the pooled Newton matrix of the clients at the estimate, the weighted mean
        of their per-sample Hessians clipped at the fit's C_H (before the eigenvalue floor, which
        is applied here). Default H. It differs from H where gradients or Hessians are clipped,
        and the Newton step then lets ``(I - floor(N)^-1 H)`` of the FedAvg stage's noise through.
        FedIRLS's model uses its own released Hessian; the other protocols have no Newton step.
    hessian_sd : float, optional
        FedIRLS only: H is a private release of the clipped score's Jacobian J, ``J + E`` with symmetric noise E
        of diagonal sd ``hessian_sd`` (off-diagonal ``hessian_sd / sqrt(2)``) in the coordinates H is given in.
        The last round's Newton map then keeps the overshoot of its spectrum above 1 (up to 2) beyond the part E
        makes (:class:`~privfedstat.theory.noise.IRLSNoise`). None (default): H's noise is unknown and the map's
        spectrum is clamped to [0, 1] (the overshoot is not kept); 0: H is exact.

    Returns
    -------
    ndarray of shape (p, p)
        Symmetric positive semi-definite; zeros when nothing was noised (mu = inf).

    Notes
    -----
    The recursion of each protocol is in its model's docstring; the approximations (linearised at
    H, one Hessian for all clients, small noise) are listed in :mod:`privfedstat.theory.noise_covariance`.
    """
    if not isinstance(noise_model, (GradientNoise, NewtonNoise, ScaffoldNoise, IRLSNoise)):
        raise TypeError(
            f"noise_model must be a fit's noise model (GradientNoise, NewtonNoise, ScaffoldNoise or IRLSNoise), got "
            f"{type(noise_model).__name__}; the estimator's protocol reports it in its Run."
        )
    H = _spd(H, "H")
    p = H.shape[0]
    N = None if newton_matrix is None else _spd(newton_matrix, "newton_matrix")
    if N is not None and N.shape != H.shape:
        raise ValueError(f"newton_matrix has shape {N.shape}, H has {H.shape}; both are (p, p).")
    if noise_model.is_zero:
        return np.zeros((p, p))
    if hessian_sd is not None and not (math.isfinite(hessian_sd) and hessian_sd >= 0):
        raise ValueError(f"hessian_sd must be a finite number >= 0 or None, got {hessian_sd!r}.")
    if isinstance(noise_model, IRLSNoise):
        C = noise_model.covariance(H, hessian_sd)
    else:
        C = noise_model.covariance(H, N) if isinstance(noise_model, NewtonNoise) else noise_model.covariance(H)
    return (C + C.T) / 2


def release_draws(model: IRLSNoise, H: np.ndarray, hessian_sd: float, *, n_pairs: int = JACOBIAN_PAIRS,
                  seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """FedIRLS's covariance at second releases ``H + E'`` of the Jacobian J, for the inference's bias correction.

    ``H = J + E`` is a release with symmetric noise E (diagonal variance ``s^2``, off-diagonal ``s^2 / 2``); ``H + E'``
    with E' drawn from E's law is a release of J with variance ``2 s^2``, whose covariance is
    ``model.covariance(H + E', sqrt(2) s)``. A smooth functional ``q`` of the covariance (the inference takes each
    coefficient's precision) is biased at second order in the noise, ``E[q(J + E)] = q(J) + b s^2``, and the draws' mean
    is biased by ``2 b s^2``, so ``2 q(H) - E'[q(H + E')]`` is unbiased for ``q(J)`` to that order (the parametric
    bootstrap's bias correction; derivation and measurements in docs/algorithms/fedirls.md, "The privacy covariance's
    own noise"). ``H + E'`` is floored at ``s``, as the inference floors its release at one noise sd; ``n_pairs``
    antithetic pairs ``+-E'`` from a fixed ``seed`` (reproducible).

    Returns
    -------
    draws : ndarray of shape (2 n_pairs, p, p)
        ``model.covariance(H + E', sqrt(2) s)`` (in the coordinates of H, as :meth:`IRLSNoise.covariance`).
    releases : ndarray of shape (2 n_pairs, p, p)
        The floored ``H + E'``.
    """
    with one_blas_thread():
        releases = antithetic_releases(H, hessian_sd, hessian_sd, n_pairs, seed)
        return model.covariance(releases, np.sqrt(2.0) * hessian_sd), releases
