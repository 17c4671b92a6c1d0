"""FedIRLS's site weights for the refine rounds: the pooled fit's weights traded against each site's privacy noise.

Every site adds its own Gaussian noise to its mean gradient, with sd ``2 B / (n_i mu_r)``; with size weights
``pi_i = n_i / N`` each site, one row or thousands, adds the same noise ``2 B / (N mu_r)`` to the aggregate, so m
sites of very unequal size carry m times the noise of one. Down-weighting the small sites removes their noise but
moves the root away from the pooled fit's by their sites' own deviations. Against the pooled root (the MLE the
benchmarks and the intervals read), with site i's mean score ``d_i = s_i + delta_i`` (sampling part of variance
``sigma^2 / n_i`` per whitened coordinate, a site effect delta_i of variance tau^2) and its noise of variance
``P_i``, the weights ``w`` (summing to 1) err by ``sum_i (w_i - pi_i) d_i + sum_i w_i xi_i``, of mean square

    sum_i (w_i - pi_i)^2 A_i + sum_i w_i^2 P_i,    A_i = sigma^2 / n_i + tau^2,

which is least at ``w_i = (lambda + pi_i A_i) / (A_i + P_i)``, lambda setting the sum to 1 (:func:`mse_weights`;
equal sizes give pi). tau^2 -> infinity gives pi; tau^2 = 0 gives ``w_i ~ n_i^2 / (sigma^2 n_i + n_i^2 P_i)``.
tau^2 is estimated from the first refine round's released per-site gradients (post-processing; DerSimonian and
Laird's moment, :func:`heterogeneity`), in the whitened coordinates where ``sigma^2 = 1`` for a family whose score
covariance is its Hessian. Derivation and measurements: docs/algorithms/fedirls.md, "Site weights".
"""

from __future__ import annotations

import numpy as np

__all__ = ["heterogeneity", "mse_weights", "shift_variance"]


def heterogeneity(messages: np.ndarray, sizes: np.ndarray, noise_var: np.ndarray, sigma2: float = 1.0) -> float:
    """DerSimonian-Laird moment estimate of tau^2, the per-coordinate variance of the sites' own mean scores.

    Parameters
    ----------
    messages : ndarray of shape (m, p)
        The sites' released mean gradients at one point (whitened coordinates, isotropic noise).
    sizes : ndarray of shape (m,)
        n_i.
    noise_var : ndarray of shape (m,)
        Per-coordinate variance of each message's privacy noise.
    sigma2 : float, default 1.0
        Per-coordinate variance of one row's score (1 in coordinates whitened by the Hessian of a family whose
        score covariance is its Hessian).

    Returns
    -------
    float
        ``max(0, (Q / p - (m - 1)) / (W - sum omega_i^2 / W))``, ``omega_i = 1 / (sigma2 / n_i + noise_var_i)``,
        Q the omega-weighted sum of squared deviations from the omega-weighted mean; 0 with fewer than 2 sites.
    """
    d = np.asarray(messages, dtype=np.float64)
    m, p = d.shape
    if m < 2:
        return 0.0
    omega = 1.0 / (sigma2 / np.asarray(sizes, dtype=np.float64) + np.asarray(noise_var, dtype=np.float64))
    W = float(omega.sum())
    centre = omega @ d / W
    Q = float(omega @ np.sum((d - centre) ** 2, axis=1)) / p
    return max(0.0, (Q - (m - 1)) / (W - float(omega @ omega) / W))


def mse_weights(sizes: np.ndarray, tau2: float, privacy_var: np.ndarray, sigma2: float = 1.0) -> np.ndarray:
    """The weights of least mean square error against the size-weighted root (module docstring).

    ``privacy_var``: per-coordinate variance P_i that site i's noise puts into the estimate per unit weight.
    """
    n = np.asarray(sizes, dtype=np.float64)
    pi = n / n.sum()
    A = sigma2 / n + tau2
    den = A + np.asarray(privacy_var, dtype=np.float64)
    lam = (1.0 - float(np.sum(pi * A / den))) / float(np.sum(1.0 / den))
    w = (lam + pi * A) / den
    return w / w.sum()


def shift_variance(weights: np.ndarray, sizes: np.ndarray, tau2: float) -> float:
    """Per-coordinate variance ``tau^2 sum_i (w_i - pi_i)^2`` of the site effects' shift of the weighted root from
    the size-weighted one (the sampling part of the shift is in the weighted sampling covariance)."""
    n = np.asarray(sizes, dtype=np.float64)
    return float(tau2 * np.sum((np.asarray(weights, dtype=np.float64) - n / n.sum()) ** 2))
