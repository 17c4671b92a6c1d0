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
The site effects' covariance T is estimated from the first refine round's released per-site gradients
(post-processing; DerSimonian and Laird's moment, :func:`heterogeneity`), in the whitened coordinates where
``sigma^2 = 1`` for a family whose score covariance is its Hessian and ``sigma^2 = phi`` for counts of dispersion phi,
the Pearson dispersion the fit released at the located point (:func:`sampling_var`); the weights take
``tau^2 = trace(T) / p`` (the mean square error summed over the whitened coordinates), the stated shift T itself.
Before the refine rounds, the refine bound's insurance judges its raise on the noise under these weights, tau^2 from
the last locate round's messages (:func:`located_heterogeneity`, :func:`weighed_sd`). The plan of a design reads the same rule
(:func:`planned_weighing`) at the tau^2 the fit estimates where the sites share one law (:func:`null_heterogeneity`).
Derivation, limits and measurements: docs/algorithms/fedirls.md, "Site weights", "Insurance of the refine bound".
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

import numpy as np

from ...privacy.calibration import calibrated_sigma

if TYPE_CHECKING:  # the schedule imports the weights (its insurance judges the noise under them)
    from .schedule import IRLSSchedule, Phase

#: draws of messages without site effects whose median tau^2 estimate a plan reads (:func:`null_heterogeneity`): the
#: median's Monte-Carlo sd is about 1.25 / sqrt(201) = 9% of the estimates' spread
NULL_DRAWS = 201

__all__ = ["heterogeneity", "located_heterogeneity", "located_noise", "mse_weights", "null_heterogeneity",
           "planned_tau2", "planned_weighing", "privacy_variances", "refine_noise", "sampling_var",
           "shift_covariance", "refine_weights", "reweighed_refine", "rounds_of", "rule_weights", "weighed_rounds",
           "weighed_sd"]


def heterogeneity(messages: np.ndarray, sizes: np.ndarray, noise_var: np.ndarray, sigma2: float = 1.0,
                  noise_shape: np.ndarray | None = None) -> np.ndarray:
    """DerSimonian-Laird moment estimate of T, the covariance of the sites' own mean scores (a matrix: the sites may
    differ along some directions only, e.g. their intercepts).

    Parameters
    ----------
    messages : ndarray of shape (m, p)
        The sites' released mean gradients at one point (whitened coordinates).
    sizes : ndarray of shape (m,)
        n_i.
    noise_var : ndarray of shape (m,)
        Per-coordinate variance of each message's privacy noise: its covariance is ``noise_var_i S``.
    sigma2 : float, default 1.0
        Per-coordinate variance of one row's score (1 in coordinates whitened by the Hessian of a family whose
        score covariance is its Hessian).
    noise_shape : ndarray of shape (p, p) or None
        S (None: I): the noise's shape where the messages were released in other coordinates and mapped.

    Returns
    -------
    ndarray of shape (p, p)
        ``psd((Q - sum_i omega_i (1 - omega_i / W) V_i) / (W - sum omega_i^2 / W))`` with
        ``V_i = sigma2 / n_i I + noise_var_i S``, ``omega_i = 1 / (sigma2 / n_i + noise_var_i tr(S) / p)`` and
        ``Q = sum_i omega_i (m_i - mbar)(m_i - mbar)^T`` about the omega-weighted mean, whose mean is
        ``sum_i omega_i (1 - omega_i / W) V_i + (W - sum omega_i^2 / W) T`` (``(m - 1) I`` with S = I); its
        eigenvalues below 0 set to 0. Zeros with fewer than 2 sites.
    """
    d = np.asarray(messages, dtype=np.float64)
    m, p = d.shape
    if m < 2:
        return np.zeros((p, p))
    S = np.eye(p) if noise_shape is None else np.asarray(noise_shape, dtype=np.float64)
    sampling, noise = sigma2 / np.asarray(sizes, dtype=np.float64), np.asarray(noise_var, dtype=np.float64)
    omega = 1.0 / (sampling + noise * float(np.trace(S)) / p)
    W = float(omega.sum())
    dev = d - omega @ d / W
    Q = (dev * omega[:, None]).T @ dev
    kept = omega * (1.0 - omega / W)
    expected = float(kept @ sampling) * np.eye(p) + float(kept @ noise) * S
    values, vectors = np.linalg.eigh((Q + Q.T) / 2 - expected)
    return (vectors * np.maximum(values, 0.0)) @ vectors.T / (W - float(omega @ omega) / W)


def located_heterogeneity(schedule: IRLSSchedule, messages: tuple[np.ndarray, np.ndarray] | None, sizes: np.ndarray,
                          basis: np.ndarray, dispersion: tuple[float, float] | None = None) -> float | None:
    """tau^2 before the refine rounds, for the insurance (:meth:`.IRLSSchedule.insured_bounds`) of a fit that re-weighs
    (None otherwise): ``trace(T) / p`` of :func:`heterogeneity` on the last locate round's released per-site gradients
    ``messages`` (values in the fitting columns, and which sites answered), mapped to the refine rounds' whitened
    coordinates (``theta = basis phi``: ``g_phi = basis^T g``, noise shape ``basis^T basis``; post-processing), a row's
    score of variance :func:`sampling_var` of the released ``dispersion``."""
    if not schedule.reweigh or messages is None:
        return None
    values, answered = messages
    noise, shape = located_noise(schedule, basis)
    T = heterogeneity(values[answered] @ np.asarray(basis, dtype=np.float64), sizes[answered], noise[answered],
                      sampling_var(dispersion), noise_shape=shape)
    return float(np.trace(T)) / T.shape[0]


def located_noise(schedule: IRLSSchedule, basis: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The last locate round's per-site gradient noise variances and its shape ``P^T P`` in the whitened coordinates
    ``theta = P phi`` (:func:`located_heterogeneity`)."""
    located, P = schedule.phase(0), np.asarray(basis, dtype=np.float64)
    return calibrated_sigma(located.gradient_sensitivity, float(located.mu_gradient[-1])) ** 2, P.T @ P


def null_heterogeneity(sizes: np.ndarray, noise_var: np.ndarray, noise_shape: np.ndarray, draws: int = NULL_DRAWS
                       ) -> float:
    """The median of the tau^2 that :func:`heterogeneity` estimates where the sites have no effect (T = 0), the plan
    of a design's stand-in for the fit's estimate (docs/guide/planning.md, "Unequal site sizes"): ``trace(T) / p``
    on ``draws`` sets of messages ``z_i / sqrt(n_i) + sqrt(noise_var_i) L xi_i`` (``L L^T = noise_shape``, z and xi
    standard normal; a fixed seed, so the plan is a function of its inputs)."""
    n, shape = np.asarray(sizes, dtype=np.float64), np.asarray(noise_shape, dtype=np.float64)
    noise, p = np.asarray(noise_var, dtype=np.float64), shape.shape[0]
    L = np.linalg.cholesky(shape + 1e-12 * np.trace(shape) * np.eye(p))
    rng = np.random.default_rng(0)
    tau2 = [float(np.trace(heterogeneity(rng.standard_normal((n.size, p)) / np.sqrt(n)[:, None]
                                         + np.sqrt(noise)[:, None] * rng.standard_normal((n.size, p)) @ L.T,
                                         n, noise, noise_shape=shape))) / p for _ in range(draws)]
    return float(np.median(tau2))


def planned_tau2(schedule: IRLSSchedule, bounds) -> float | None:
    """The tau^2 a fit that re-weighs estimates from its first refine round's messages (refine ``bounds``) where its
    sites have no effect (:func:`null_heterogeneity`); None where it does not re-weigh."""
    if not schedule.reweigh:
        return None
    phase = schedule.phase(1, bounds)
    return null_heterogeneity(schedule.sizes, refine_noise(phase), np.eye(schedule.n_params))


def refine_noise(phase: Phase) -> np.ndarray:
    """The first refine round's per-site gradient noise variances (:func:`refine_weights`)."""
    return calibrated_sigma(phase.gradient_sensitivity, phase.mu_gradient[0]) ** 2


def weighed_sd(plain: IRLSSchedule, bounds, tau2: float | None, dispersion: tuple[float, float] | None = None) -> float:
    """The insurance's judged sd: the planned gradient noise sd of ``plain``'s estimate (its refine rounds with
    ``bounds``) under the weights :func:`mse_weights` chooses with ``tau2`` and :func:`privacy_variances`, with the
    site effects' move ``sum_i (w_i - pi_i)^2 tau^2`` that the fit adds to its privacy covariance (a row's score of
    variance :func:`sampling_var` of the released ``dispersion``); None: the sd under ``plain``'s weights
    (:meth:`.IRLSSchedule.combined_sd`)."""
    if tau2 is None:
        return plain.combined_sd(plain.phases(bounds))
    w = rule_weights(plain, plain.phase(1, bounds), tau2, sampling_var(dispersion))
    weighed = replace(plain, weights=w)
    moved = float(np.sum((w - plain.sizes / np.sum(plain.sizes)) ** 2)) * tau2
    return float(np.sqrt(weighed.combined_sd(weighed.phases(bounds)) ** 2 + moved))


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


def shift_covariance(weights: np.ndarray, sizes: np.ndarray, T: np.ndarray, sigma2: float = 0.0) -> np.ndarray:
    """Covariance ``sum_i (w_i - pi_i)^2 T`` of the site effects' move of the weighted aggregate from the size-weighted
    one, per unit Jacobian (the sampling part of the shift is in the weighted sampling covariance); with a row's score
    variance ``sigma2`` > 0, ``sum_i (w_i - pi_i)^2 (sigma2 I / n_i + T)``, the whole move."""
    n = np.asarray(sizes, dtype=np.float64)
    gap = (np.asarray(weights, dtype=np.float64) - n / n.sum()) ** 2
    return float(gap.sum()) * T + sigma2 * float(np.sum(gap / n)) * np.eye(T.shape[0])


def refine_weights(schedule: IRLSSchedule, phase: Phase, values: np.ndarray, answered: np.ndarray, sizes: np.ndarray,
                   sigma2: float = 1.0) -> tuple[np.ndarray, np.ndarray, float]:
    """The weights of the refine rounds after the first, from that round's released per-site gradients ``values``
    (rows of the sites that ``answered``; whitened coordinates): T by :func:`heterogeneity`, each site's privacy
    variance in the estimate ``P_i = sum_r kappa_r^2 (2 B / (n_i mu_r))^2`` over the later rounds and the precision
    weights kappa that combine their targets (:meth:`.IRLSSchedule.combination`), a row's score of variance ``sigma2``
    per whitened coordinate (:func:`sampling_var`).

    Returns the weights, the covariance ``sum_i (w_i - pi_i)^2 T`` of the site effects' move of the aggregate
    (:func:`shift_covariance`) and the largest eigenvalue of the whole move's, ``sum_i (w_i - pi_i)^2 (sigma2 I / n_i +
    T)``.
    """
    T = heterogeneity(values[answered], sizes[answered], refine_noise(phase)[answered], sigma2)
    w = rule_weights(schedule, phase, float(np.trace(T)) / T.shape[0], sigma2)
    return w, shift_covariance(w, sizes, T), float(np.linalg.eigvalsh(shift_covariance(w, sizes, T, sigma2))[-1])


def privacy_variances(schedule: IRLSSchedule, phase: Phase) -> np.ndarray:
    """P_i: the per-coordinate variance site i's noise puts into the estimate per unit weight,
    ``sum_r kappa_r^2 (2 B / (n_i mu_r))^2`` over the refine ``phase``'s rounds after the first and the precision
    weights kappa that combine their targets (:meth:`.IRLSSchedule.combination`; the last round alone without)."""
    later = rounds_of(phase, 1, len(phase.shares))
    kappa = schedule.combination([later])
    kappa = np.eye(len(later.shares))[-1] if kappa is None else kappa
    sens = phase.gradient_sensitivity
    return sum(float(k) ** 2 * calibrated_sigma(sens, mu) ** 2 for k, mu in zip(kappa, later.mu_gradient))


def reweighed_refine(newton, schedule: IRLSSchedule, phase: Phase, bounds, sizes: np.ndarray,
                     dispersion: tuple[float, float] | None = None) -> None:
    """The refine ``phase`` with ``weights="optimal"``: its first round from the located point with size weights,
    then the others with :func:`refine_weights` (``newton``: the fit's rounds, ``bounds`` the refine Setup,
    ``dispersion`` the released one, :func:`sampling_var`)."""
    newton.run(rounds_of(phase, 0, 1))
    w, newton.shift, moved = refine_weights(schedule, phase, *newton.messages, sizes, sampling_var(dispersion))
    newton.reweigh(w, moved)
    newton.run(weighed_rounds(schedule, phase, bounds, w))


def rule_weights(schedule: IRLSSchedule, phase: Phase, tau2: float, sigma2: float = 1.0) -> np.ndarray:
    """The weights of the refine ``phase``'s rounds after the first: :func:`mse_weights` at the site effects' variance
    ``tau2``, a row's score variance ``sigma2`` and :func:`privacy_variances` (the rule that the fit, its insurance and
    the plan of a design read; a plan's law is the model's, ``sigma2 = 1``)."""
    return mse_weights(schedule.sizes, tau2, privacy_variances(schedule, phase), sigma2)


def sampling_var(dispersion: tuple[float, float] | None) -> float:
    """sigma^2, the variance of one row's score per whitened coordinate in the rule: 1 where the score's covariance is
    the Hessian (``dispersion`` None), the Pearson dispersion ``(phi, sd)`` that a count model released at the located
    point otherwise (the score's variance is phi times the information; post-processing), at least 1 (the model's own
    variance: below it is the release's noise or an underdispersion the Poisson SEs do not use either)."""
    return 1.0 if dispersion is None else max(1.0, float(dispersion[0]))


def weighed_rounds(schedule: IRLSSchedule, phase: Phase, bounds, weights: np.ndarray) -> Phase:
    """The refine ``phase``'s rounds after the first under ``weights`` (``bounds``: the refine Setup)."""
    return rounds_of(replace(schedule, weights=weights).phase(1, bounds), 1, len(phase.shares))


def planned_weighing(schedule: IRLSSchedule, bounds, tau2: float | None) -> tuple[np.ndarray, list[Phase]]:
    """The weights that the estimate aggregates with and every phase's releases, as a fit on ``schedule`` with the
    refine ``bounds`` runs them where its sites' effects have variance ``tau2`` (the plan of a design): a fit that
    re-weighs (:attr:`.IRLSSchedule.reweigh`) runs its first refine round with size weights and the others with
    :func:`rule_weights` at ``tau2``; otherwise, or with ``tau2`` None, the schedule's weights throughout."""
    if not schedule.reweigh or tau2 is None:
        return schedule.weights, schedule.phases(bounds)
    phase = schedule.phase(1, bounds)
    w = rule_weights(schedule, phase, tau2)
    return w, [*schedule.phases(bounds)[:-1], rounds_of(phase, 0, 1), weighed_rounds(schedule, phase, bounds, w)]


def rounds_of(phase: Phase, start: int, stop: int) -> Phase:
    """Rounds ``start:stop`` of a local-aggregation phase."""
    cut = slice(start, stop)
    return replace(phase, shares=phase.shares[cut], mu_gradient=phase.mu_gradient[cut], mu_hessian=phase.mu_hessian[cut],
                   floors=phase.floors[cut], hessian_var=phase.hessian_var[cut], gradient_var=phase.gradient_var[cut],
                   gradient_sd=phase.gradient_sd[cut])
