"""Covariance algebra of private inference: noisy-Hessian inverses, sandwiches, the original scale.

Pure functions of released (or, for the non-private baselines, exact) matrices; no data, no
privacy cost. Notation: H is the Hessian of the server's weighted objective at the estimate,
Sigma the covariance of a per-sample score, both on the fitting scale in the oracle's order
(flat index ``j q + k`` of the (d, q) parameter matrix); ``Xi`` is the symmetric Gaussian noise of
a released Hessian, variance ``s^2`` on the diagonal and ``s^2 / 2`` off it (what ``sym_to_vec``
releases with per-coordinate noise ``s``, see :func:`privfedstat._linalg.sym_to_vec`).
"""

from __future__ import annotations

import numpy as np

from .._warn import warn
from ..exceptions import PrivacyNoiseWarning
from ..theory.noise_maps import symmetric_noise_sandwich

__all__ = ["sampling_covariance", "original_scale_map", "original_scale_origin", "weighted_factor", "variance_df",
           "precision_corrected", "floored_scale"]


def _inverse(A: np.ndarray) -> np.ndarray:
    vals, vecs = np.linalg.eigh(A)
    return (vecs / vals) @ vecs.T


def _positive_definite(A: np.ndarray) -> bool:
    return bool(np.all(np.isfinite(A)) and np.linalg.eigvalsh(0.5 * (A + A.T))[0] > 0)


def sampling_covariance(H: np.ndarray, c: float, Sigma: np.ndarray | None = None, s2: float = 0.0,
                        bias_correction: bool = False) -> tuple[np.ndarray, list[str]]:
    """Sampling covariance ``c H^-1`` (model) or ``c H^-1 Sigma H^-1`` (sandwich) from a released H.

    Bias correction (inferred: our second-order reconstruction of the correction of
    Avella-Medina, Bradshaw & Loh 2023 for a Hessian released with noise Xi; the paper's exact
    form is not restated here): with ``Hi = H^-1`` and ``D(C) = E[Xi C Xi] = (s^2 / 2)(C + tr(C) I)``
    (:func:`privfedstat.theory.noise_maps.symmetric_noise_sandwich`),
    ``(H + Xi)^-1 = Hi - Hi Xi Hi + Hi Xi Hi Xi Hi - ...``, so to second order
    ``E[(H + Xi)^-1] = Hi + Hi D(Hi) Hi`` and, for Sigma with mean-zero noise independent of Xi,
    ``E[(H + Xi)^-1 Sigma (H + Xi)^-1] = M + Hi D(Hi) M + M D(Hi) Hi + Hi D(M) Hi`` with
    ``M = Hi Sigma Hi``. The corrected estimates subtract these terms, evaluated at the released
    matrices. If the result is not positive definite (noise too large for the expansion) the
    uncorrected estimate is used and a note says so.

    Parameters
    ----------
    H : ndarray of shape (p, p)
        Symmetric positive definite (eigenvalues already floored).
    c : float
        ``sum_i w_i^2 / n_i`` (1/N for size weights).
    Sigma : ndarray of shape (p, p) or None
        Score covariance ``sum_i v_i Sigma_i`` with ``v_i = w_i^2 / (n_i c)`` (sandwich); None for
        the model-based ``c H^-1``.
    s2 : float
        Diagonal variance of the noise in H (0: exact H, no correction).
    bias_correction : bool

    Returns
    -------
    cov : ndarray of shape (p, p)
    notes : list of str
    """
    Hi = _inverse(H)
    M = Hi if Sigma is None else Hi @ Sigma @ Hi
    M = 0.5 * (M + M.T)
    if not (bias_correction and s2 > 0):
        return c * M, []
    DHi = symmetric_noise_sandwich(Hi, s2)
    if Sigma is None:
        bias = Hi @ DHi @ Hi
    else:
        left = Hi @ DHi @ M
        bias = left + left.T + Hi @ symmetric_noise_sandwich(M, s2) @ Hi
    corrected = M - 0.5 * (bias + bias.T)
    if not _positive_definite(corrected):
        return c * M, ["the bias correction of the noisy Hessian's inverse was not positive definite "
                       "(Hessian noise too large for the second-order expansion); the uncorrected "
                       "inverse was used, whose sampling variance is biased upwards"]
    return c * corrected, []


def weighted_factor(weights: np.ndarray, sizes: np.ndarray) -> tuple[float, np.ndarray]:
    """``c = sum_i w_i^2 / n_i`` and the score-covariance weights ``v_i = w_i^2 / (n_i c)``.

    An estimate solving ``sum_i w_i gbar_i(theta) = 0`` (``gbar_i`` client i's mean score over
    n_i independent rows) has ``Var(sum_i w_i gbar_i) = sum_i w_i^2 Sigma_i / n_i = c sum_i v_i
    Sigma_i``; with size weights ``w_i = n_i / N``, ``c = 1 / N`` and ``v = w``.
    """
    w2n = np.asarray(weights, dtype=np.float64) ** 2 / np.asarray(sizes, dtype=np.float64)
    c = float(w2n.sum())
    return c, w2n / c


def original_scale_origin(coef_to_original, n_features: int, n_outputs: int) -> np.ndarray:
    """The image of theta = 0 under ``coef_to_original`` (as :func:`original_scale_map`), flat in F order: the
    constant of the affine map (a located response's centre on the intercept; zeros without one)."""
    zero = np.zeros((n_features, n_outputs)) if n_outputs > 1 else np.zeros(n_features)
    return (zero if coef_to_original is None else coef_to_original(zero)).ravel(order="F")


def original_scale_map(coef_to_original, n_features: int, n_outputs: int) -> np.ndarray:
    """Matrix G with ``G theta = coef.ravel(order="F")`` for a fitting-scale ``theta`` (C order).

    ``coef_to_original`` maps a (d,) or (d, q) coefficient array on the fitting scale to the
    original scale and is affine (the scaler divides by scales and moves the columns' centres into
    the intercept; a located response adds its centre there), so its Jacobian is read off the
    images of the unit vectors less the image of 0. Covariances map as ``G V G^T``.

    Parameters
    ----------
    coef_to_original : callable or None
        The fit's ``Scaler.coef_to_original``; None for no rescaling (G is then the reordering).
    n_features, n_outputs : int
        d and q (q = 1 for scalar-response families).
    """
    d, q = n_features, n_outputs
    p = d * q
    origin = original_scale_origin(coef_to_original, d, q)

    def image(flat: np.ndarray) -> np.ndarray:
        coef = flat.reshape(d, q) if q > 1 else flat
        return (coef if coef_to_original is None else coef_to_original(coef)).ravel(order="F") - origin

    return np.column_stack([image(unit) for unit in np.eye(p)])


def variance_df(G: np.ndarray, H: np.ndarray, Sigma: np.ndarray | None, s_H: float, s_S: float, c: float,
                total: np.ndarray) -> np.ndarray:
    """Satterthwaite degrees of freedom of each coefficient's estimated variance, from the noise of the releases.

    The sampling variance ``v_j = c g_j^T H^-1 Sigma H^-1 g_j`` (``g_j`` the j-th row of the original-scale map
    ``G``; ``Sigma = H`` for the model-based ``c H^-1``) is computed from a Hessian and a score covariance
    released with symmetric Gaussian noise of diagonal sd ``s_H`` and ``s_S`` (off-diagonal variance half of
    it), so it is itself noisy. With ``a = H^-1 g_j`` and ``b = H^-1 Sigma a``, to first order
    ``v_j + c a^T Xi_S a - 2 c a^T Xi_H b`` (sandwich) or ``v_j - c a^T Xi_H a`` (model), and for such noise
    ``Var(a^T Xi b) = s^2 (|a|^2 |b|^2 + (a^T b)^2) / 2``. The estimate of the ``total`` variance (sampling +
    privacy of the protocol, whose part is exact) then has ``df = 2 total^2 / Var`` degrees of freedom, and its
    intervals use Student's t with them (inferred: the Welch-Satterthwaite approximation applied to released
    noise; infinite where nothing is noised, the normal interval). A protocol whose sampling covariance is its
    own map of ``H^-1 Sigma H^-1`` (FedNewton's half-rows step) gets the df of the full-data form, an approximation.
    """
    Hi = np.linalg.inv(H)
    A = Hi @ G.T  # column j: a = H^-1 g_j
    na = np.sum(A * A, axis=0)
    if Sigma is None:
        var = (c * s_H) ** 2 * na**2
    else:
        Bm = Hi @ Sigma @ A
        nb, ab = np.sum(Bm * Bm, axis=0), np.sum(A * Bm, axis=0)
        var = (c * s_S) ** 2 * na**2 + 2.0 * (c * s_H) ** 2 * (na * nb + ab**2)
    with np.errstate(divide="ignore", invalid="ignore"):
        df = np.where(var > 0, 2.0 * np.asarray(total, dtype=np.float64) ** 2 / var, np.inf)
    return np.where(np.isnan(df), np.inf, df)


def precision_corrected(V_p: np.ndarray, V_a: np.ndarray, V_s: np.ndarray, G: np.ndarray, draws: np.ndarray,
                        releases: np.ndarray, H: np.ndarray, c: float, Sigma: np.ndarray | None
                        ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The sampling, privacy and path-remainder covariances (original scale) rescaled so that each coefficient's total
    precision is the bias-corrected one of :func:`~privfedstat.theory.noise_covariance.release_draws`, split between
    the parts by their own bias-corrected variances.

    A coefficient's Wald statistic ``z = (theta_j - theta_j*) / sqrt(v_j)`` has ``E[z^2] = sd_j^2 E[1 / v_j]`` when its
    variance ``v_j`` is estimated independently of the error: the statistic is calibrated when the precision
    ``1 / v_j`` is unbiased. ``v_j = s_j + p_j + a_j`` is a function of the released Jacobian ``H = J + E``: the
    sampling part ``s_j`` of ``c H^-1`` (``c H^-1 Sigma H^-1``; ``c`` with the dispersion), FedIRLS's privacy part
    ``p_j`` (``V_p``, fitting scale, ``draws`` at ``H + E'``) and the path remainder ``a_j`` (``V_a``: the last step's
    error, fixed by the protocol's releases, the same at every H). The corrected precision is
    ``pi_j = 2 / v_j(H) - mean 1 / v_j(H + E')``; the total becomes ``T_j = 1 / pi_j`` (``v_j(H)`` where ``pi_j <= 0``),
    at least the analytically corrected sampling variance ``V_s``'s (a total below one of its parts is a correction
    beyond the expansion's reach: a Poisson fingerprint at mu = 2 had ``T`` a quarter of it).
    Each part's own bias-corrected variance is ``q(H)^2 / mean q(H + E')`` (equal to ``2 q(H) - mean q(H + E')`` up to
    fourth order in the noise, and never negative), so ``s*_j``, ``p*_j`` and ``a_j``; to second order
    ``T_j = s*_j + p*_j + a_j + mean(dv^2) / v_j``, and the last (Jensen's) term of the precision belongs to no part
    alone: ``T_j`` is split in the proportions ``s*_j : p*_j : a_j`` (docs/guide/inference.md, "How the correction
    of the precision is split"). Each part is scaled as ``D V D`` with D diagonal (its correlations kept); ``V_s``
    is the inference's own sampling part (original scale), whose diagonal this replaces."""
    def along(P: np.ndarray) -> np.ndarray:
        return np.einsum("ij,...jk,ik->...i", G, P, G)

    def sampling(K: np.ndarray) -> np.ndarray:
        inv = np.linalg.inv(K)
        return along(c * (inv if Sigma is None else inv @ Sigma @ inv))

    def corrected(at: np.ndarray, drawn: np.ndarray) -> np.ndarray:
        mean = np.mean(drawn, axis=0)
        return np.where(mean > 0, at * at / np.where(mean > 0, mean, 1.0), at)

    s_H, s_E, p_H, p_E, a = sampling(H), sampling(releases), along(V_p), along(draws), along(V_a)
    at_release = s_H + p_H + a
    pi = 2.0 / at_release - np.mean(1.0 / (s_E + p_E + a), axis=0)
    total = np.maximum(np.where(pi > 0, 1.0 / np.where(pi > 0, pi, 1.0), at_release), np.diag(V_s))
    parts = np.array([corrected(s_H, s_E), corrected(p_H, p_E), a])
    shares = parts / parts.sum(axis=0)

    def rescaled(V: np.ndarray, target: np.ndarray) -> np.ndarray:
        d = np.diag(V)
        scale = np.sqrt(np.where(d > 0, target / np.where(d > 0, d, 1.0), 1.0))
        out = scale[:, None] * V * scale[None, :]
        return (out + out.T) / 2

    return (rescaled(V_s, total * shares[0]), rescaled(G @ V_p @ G.T, total * shares[1]),
            rescaled(G @ V_a @ G.T, total * shares[2]))


def floored_scale(phi: float, sd: float, floor: float, notes: list[str]) -> tuple[float, float]:
    """A Gaussian fit's released residual variance ``(phi, sd)`` (fitting scale) raised to ``floor`` where below it
    (post-processing, the rule of the released Hessian's eigenvalues: ``floor`` is the same number of noise sds).

    The variance is positive but its release is not: with heavy tails (a clipping bound B far above the residuals'
    spread; the release's sensitivity is B^2) and many sites its noise can exceed it, and a value at or below 0 made
    the sampling covariance 0, the intervals privacy noise only (modeldata ames, 28 neighbourhoods, mu = 8: 3 fits of
    4; docs/guide/inference.md). Raised, the standard errors are conservative where the true variance is below the
    floor; a :class:`~privfedstat.PrivacyNoiseWarning` and a note say so.
    """
    if phi >= floor:
        return phi, sd
    notes.append(f"the released residual variance ({phi:.3g} +- {sd:.2g} on the fitting scale) was below {floor:.3g} "
                 "and was raised to it (post-processing): the sampling part of the standard errors rests on that floor "
                 "and may be overstated")
    warn(
        f"the residual variance (scale) of this Gaussian fit is not resolved by its private release at this mu "
        f"({phi:.3g} +- {sd:.2g} on the fitting scale; the noise sd grows with the square root of the number of sites "
        f"and with the clipping bound squared): its standard errors use the floor {floor:.3g} instead, which may "
        "overstate them. Increase mu or merge small sites.",
        PrivacyNoiseWarning,
    )
    return floor, sd
