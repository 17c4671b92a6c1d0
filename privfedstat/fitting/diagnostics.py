"""Diagnostics of a fit from released values only (post-processing: no privacy cost, no raw data).

:func:`diagnose` runs after every protocol (see :class:`~privfedstat.FederatedEstimator` for what
``converged_`` means per algorithm). Its inputs are the server's path of iterates and the public
noise levels the protocol reports in its :class:`~privfedstat.federation.protocol.Run`, the privacy
ledger's calibrated sigmas and sensitivities, the public client sizes and, where one was released,
the aggregated Hessian; with mu = inf the exact score at the estimate (:func:`exact_score`), from which
:mod:`.verdict` decides ``converged_``. :func:`review_inference` runs after the inference stage, on what it
released at the estimate (the Hessian, the share of clipped gradients); the score released there is judged by
:func:`~privfedstat.fitting.verdict.review_score`.
"""

from __future__ import annotations

import math

import numpy as np

from .._warn import warn
from ..exceptions import ConvergenceWarning, IllConditionedWarning, OverdispersionWarning, PrivacyNoiseWarning
from ..federation.protocol import Run, Setup
from ..federation.session import Session
from ..inference.clipping_bias import warn_clipping
from ..inference.config import DIAGNOSTIC_ALPHA, critical_value
from ..inference.core import overdispersed
from ..inference.results import InferenceResult
from ..results.labels import fitting_labels
from .exact_verdict import nonprivate_verdict
from .stability import gradient_steps
from .steps import settled
from .verdict import divergence, remedy

__all__ = ["diagnose", "review_inference", "oscillation", "noise_dominated", "undersized_clients", "exact_score",
           "hessian_condition", "CONDITION_LIMIT", "OSCILLATION_CORRELATION", "oscillation_noise_sds"]

#: a last update cut by a trust region warns when its norm exceeds this many times the norm of its noise sd
#: (breast cancer, 3 sites, mu = 10 / 50: cut steps 2.7-5.5 at noise 0.06-0.20, estimates 8-12 SE off; randhie
#: mu = 2: a cut step 6.45 at noise 1.88 was noise, the estimate 0.6 SE off)
SHORTENED_NOISE_SDS = 4.0
#: the path oscillates when consecutive updates over the window have lag-1 correlation below -OSCILLATION_CORRELATION
#: and its last period exceeds its noise (:func:`oscillation_noise_sds`, which bounds the false alarms). Chosen: it
#: names the cause of a last period beyond its noise (a steady 2-cycle of k updates gives -(k - 1) / k; FedSGD, step
#: 100 and 10: -0.76 and -0.96; steps 0.5-5 and "auto": -0.08 to -0.50; docs/guide/constants.md)
OSCILLATION_CORRELATION = 0.6
#: with finite mu, a mean update over the window below this many sampling SEs (proxy from the released Hessian)
#: counts as settled even where it exceeds its noise: at negligible noise (mu = 1e6) Newton rounds that reuse a
#: Hessian still close in linearly, 0.006 SE from the MLE on bikeshare (Poisson), which changes no inference
SETTLED_SE = 0.05
#: the stationarity check forms one Hessian per client; skipped above this many bytes
STATIONARITY_MAX_BYTES = 2e8
#: a released Hessian whose condition number exceeds this (or that is not positive definite) warns
CONDITION_LIMIT = 1e8
#: ledger stages that only choose public settings (clipping bounds, scaling): pooled counts,
#: whose per-client noise does not enter the estimate
SELECTION_STAGES = ("clip-", "scaling-")


def noise_dominated(theta: np.ndarray, noise_sd, se_proxy: float) -> tuple[np.ndarray, np.ndarray]:
    """Coefficients whose privacy noise sd exceeds the sampling-SE proxy, and those of them below it in size.

    Returns
    -------
    dominated : ndarray of int
        Indices j with ``noise_sd_j > se_proxy``: privacy noise, not sampling, dominates their error.
    indistinguishable : ndarray of int
        The subset with also ``|theta_j| < noise_sd_j``: the estimate is within one noise sd of 0.
    """
    sd = np.broadcast_to(np.asarray(noise_sd, dtype=np.float64), theta.shape)
    dominated = sd > se_proxy
    return np.flatnonzero(dominated), np.flatnonzero(dominated & (np.abs(theta) < sd))


def undersized_clients(ledger, sizes: np.ndarray) -> tuple[np.ndarray, int]:
    """Clients whose estimation messages are noise-dominated, and the smallest size that is not.

    A release of a mean of per-sample quantities bounded by ``b`` has sensitivity ``2 b / n_i``,
    so its largest possible value is ``b = sensitivity n_i / 2``. A client whose noise sd
    ``sigma_i`` exceeds that sends a message that is noise everywhere (its noise-to-signal
    ratio ``2 sigma_i / (sensitivity_i n_i) = 2 / (mu_release n_i)`` is above 1); the size
    that brings the ratio to 1 is ``n_i * ratio``. Selection stages (clip search, scaling),
    whose per-client counts are pooled before use, are not considered.

    Returns
    -------
    clients : ndarray of int
        Indices of the noise-dominated clients.
    n_min : int
        Smallest client size at which every estimation release has ratio <= 1 (0 if none is noisy).
    """
    sizes = np.asarray(sizes, dtype=np.float64)
    worst = np.zeros(sizes.size)
    for sensitivity, sigma in ledger.noise_pairs(exclude=SELECTION_STAGES):  # a maximum: each pair once suffices
        with np.errstate(divide="ignore", invalid="ignore"):
            ratio = np.where((sensitivity > 0) & np.isfinite(sensitivity), 2.0 * sigma / (sensitivity * sizes), 0.0)
        worst = np.maximum(worst, ratio)
    bad = np.flatnonzero(worst > 1.0)
    n_min = int(math.ceil(float(np.max(worst * sizes)))) if bad.size else 0
    return bad, n_min


def _sampling_se_proxy(H: np.ndarray | None, family, n_samples: int, n_params: int):
    """Sampling SE proxy per coefficient: ``sqrt(diag(H^-1) / N)`` from a released (floored) Hessian
    when the protocol released one (post-processing), else ``1 / sqrt(c0 N)`` with c0 the family's
    curvature at 0 (unit-scale, uncorrelated columns)."""
    if H is not None and H.shape == (n_params, n_params):
        vals, vecs = np.linalg.eigh(0.5 * (H + H.T))
        floor = max(float(vals[-1]) * 1e-8, 1e-300)
        return np.sqrt((vecs**2) @ (1.0 / np.maximum(vals, floor)) / n_samples)
    return 1.0 / math.sqrt(float(family.curvature_at_zero) * n_samples)


def exact_score(session: Session, clip: float, theta: np.ndarray) -> tuple[np.ndarray, np.ndarray] | None:
    """The size-weighted clipped gradient g and Hessian H of the pooled objective at ``theta`` (mu = inf only:
    nothing is released, so the server may evaluate them); None when the per-client Hessians would exceed
    ``STATIONARITY_MAX_BYTES``."""
    clients = session.clients
    p = int(clients.n_params)
    if clients.n_clients * p * p * 8 > STATIONARITY_MAX_BYTES:
        return None
    w = session.size_weights
    gradients, hessians = clients.exact(theta, clip=clip)  # mu = inf: nothing to protect
    return np.ravel(w @ gradients), np.tensordot(w, hessians, axes=1).reshape(p, p)


def oscillation(path: list[np.ndarray], k: int) -> tuple[float, float]:
    """Lag-1 correlation of the last ``k`` updates of ``path`` (consecutive steps pointing against each other:
    near -1) and their root-mean-square size (largest over coordinates); (0, 0) with fewer than 3 updates."""
    steps = np.diff(np.asarray([np.ravel(p) for p in path[-k - 1:]]), axis=0)
    energy = float(np.sum(steps * steps))
    if steps.shape[0] < 3 or energy == 0.0:
        return 0.0, 0.0
    return float(np.sum(steps[1:] * steps[:-1])) / energy, float(np.max(np.sqrt(np.mean(steps * steps, axis=0))))


def oscillation_noise_sds(n_params: int, alpha: float = DIAGNOSTIC_ALPHA) -> float:
    """The size in noise sds beyond which the last period (:func:`last_period`) is not noise: ``z_(1 - alpha / 2p)``.

    At a converged point each coordinate's last two updates are a Gaussian pair of mean 0 whose mean square over the
    mean of their variances is ``l_1 chi2_1 + l_2 chi2_1``, ``l_1 + l_2 = 1`` (any noise shares, any correlation);
    above 1.54 no such form has a heavier tail than ``chi2_1`` (Szekely & Bakirov 2003), so the size exceeds z sds
    in one of p coordinates with probability <= alpha (Bonferroni): 3.29 (p = 1) to 4.06 (p = 20) at 0.001."""
    return critical_value(n_params, alpha=alpha)


def last_period(path: list[np.ndarray], run: Run, update_sd) -> tuple[float, float]:
    """The size of the path's last two updates (one period of a 2-cycle: root-mean-square, largest over coordinates)
    and their noise sd (root-mean-square of each update's own, ``run.update_noise_sds``, else ``update_sd``).

    A step rule that overshoots by a factor ``kappa`` multiplies the error by ``1 - kappa`` a round: for
    ``kappa < 2`` the updates alternate in sign but shrink into their noise (the path converges and the score at
    the estimate judges it), for ``kappa >= 2`` they do not. Only the second is back and forth at the end, and
    only its last period's size, against that period's own noise, tells them apart (earlier rounds of a refine
    phase carry more noise and still carry the travel from the located point)."""
    steps = np.diff(np.asarray([np.ravel(p) for p in path[-3:]]), axis=0)
    size = float(np.max(np.sqrt(np.mean(steps * steps, axis=0)))) if steps.size else 0.0
    if run.update_noise_sds is None or update_sd is None:
        return size, 0.0 if update_sd is None else float(np.max(update_sd))
    return size, float(np.sqrt(np.mean(np.asarray(run.update_noise_sds)[-2:] ** 2)))


def hessian_condition(H: np.ndarray) -> float:
    """Condition number ``lambda_max / lambda_min`` of a symmetric matrix (inf if not positive definite)."""
    vals = np.linalg.eigvalsh(0.5 * (H + H.T))
    return math.inf if vals[0] <= 0 else float(vals[-1] / vals[0])


def _names(idx, labels: list[str], limit: int = 8) -> str:
    """Coefficients ``idx`` (flat fitting-scale order) by their ``labels`` (:func:`.results.labels.fitting_labels`)."""
    shown = ", ".join(labels[j] for j in idx[:limit])
    return shown + (f" and {len(idx) - limit} more" if len(idx) > limit else "")


def _site(est, i: int) -> str:
    """Site ``i`` (counting from 0 in the clients' order) by its label where the fit was given labels."""
    labels = getattr(est, "client_labels_", None)
    return f"site #{i} counting from 0 in the clients' order" if labels is None else f"site {labels[i:i + 1].tolist()[0]!r}"


def diagnose(est, session: Session, setup: Setup, run: Run, n_samples: int,
             score_pending: bool = False) -> tuple[bool | None, bool]:
    """Warn about non-convergence, noise-dominated coefficients, undersized sites, ill-conditioning.

    For a model without a family (the networks of :mod:`privfedstat.deep`) only the convergence and
    site-size checks run: the sampling-SE proxy and the score checks are a GLM's. With mu = inf the
    verdict is the exact score's (:func:`nonprivate_verdict`); with finite mu the path's (update sizes
    against their noise, oscillation, a cut or damped last step), whose plain update-size part, and a Newton
    protocol's back and forth, are left to the score released at the estimate when one will be (``score_pending``:
    :func:`~privfedstat.fitting.verdict.review_score`).

    Parameters
    ----------
    est : FederatedEstimator
        The estimator (its ``method`` and parameters word the messages).
    session : Session
        The fit's session (the clients, the ledger after the protocol).
    setup : Setup
        The protocol's clipping bound and estimation mu.
    run : Run
        The protocol's result: the server's iterates on the fitting scale (the last one the
        estimate), ``noise_sd``, ``update_noise_sd``, ``shortened``, ``hessian``.
    n_samples : int
        N (public).
    score_pending : bool
        Whether the inference stage will release the score at the estimate (finite mu).

    Returns
    -------
    converged : bool or None
        ``converged_`` (None: left to the score at the estimate, or unknown).
    privacy_open : bool
        Whether the question of privacy noise is still open (finite mu, not diverged, and the
        last release's noise did not already warn): :func:`review_inference` then judges it from
        the inference's covariance.

    Raises
    ------
    DivergenceError
        With mu = inf, when the estimate is where the protocol's steps cannot settle or the curvature has
        vanished under a non-zero score (:func:`nonprivate_verdict`).
    """
    path = run.path[run.settle_from:]
    theta = np.ravel(path[-1])
    finite = math.isfinite(setup.mu)
    update_sd = 0.0 if not finite else run.update_noise_sd
    # window: with noise, the mean update over the last quarter of the path (a slow drift shows
    # through the noise); without noise, the last update (as the "auto" loops stop)
    k = max(1, (len(path) - 1) // 4) if finite else 1
    family = session.clients.family
    glm = family is not None  # networks (privfedstat.deep) have no family: GLM checks skipped
    se = _sampling_se_proxy(run.hessian, family, n_samples, theta.size) if finite and glm else np.inf
    if len(path) < 2 or update_sd is None:
        converged = None
    else:
        converged = settled(theta, np.ravel(path[-1 - k]), update_sd / math.sqrt(k), scale=k)
        if not converged and finite and glm:  # a drift far below a standard error cannot move an inference
            drift = np.abs(theta - np.ravel(path[-1 - k])) / k
            converged = bool(np.all(drift <= SETTLED_SE * se))
    correlation, size = oscillation(path, max(k, min(len(path) - 1, 8)))
    exact = exact_score(session, setup.clip, theta) if not finite and glm else None
    last_size, last_sd = last_period(path, run, update_sd) if finite else (size, 0.0)
    diverged = exact is None and (correlation < -OSCILLATION_CORRELATION and update_sd is not None
                                  and last_size > oscillation_noise_sds(theta.size) * last_sd
                                  and (finite or converged is False))
    if diverged and score_pending and not gradient_steps(run.noise_model):
        # Newton steps on released Hessians forget the previous error only up to the Hessian's noise, so the last
        # period's size has no null in the gradient noise alone: the score released at the estimate judges the
        # back and forth along the last update instead (verdict.review_score; docs/guide/convergence.md)
        diverged = False
    if score_pending and converged is False:
        converged = None  # the update sizes are superseded by the score released at the estimate
    if exact is not None:  # mu = inf: the exact score decides, the path says why
        convex = gradient_steps(run.noise_model) and setup.clip == math.inf and getattr(est, "penalty_", None) is None
        start = exact_score(session, setup.clip, np.ravel(path[0]))[0] if convex else None
        converged = nonprivate_verdict(est, path, exact, n_samples, float(family.curvature_at_zero), run.noise_model,
                                       correlation if correlation < -OSCILLATION_CORRELATION else None, converged,
                                       start)
    elif diverged:
        converged = False
        noise = f", far above their noise ({last_sd:.3g})" if finite else ""
        size = last_size
        if gradient_steps(run.noise_model):  # the step size sends the path back and forth: no estimate to return
            raise divergence(est, f"its last updates point back and forth (lag-1 correlation {correlation:.2f}) with "
                                  f"a size of {size:.3g} (fitting scale){noise}; clipping only keeps them bounded.")
        warn(
            f"{est.method} diverged: its last updates point back and forth (lag-1 correlation {correlation:.2f}) "
            f"with a size of {size:.3g} (fitting scale){noise}: "
            f"the step size (step_size = {getattr(est, 'step_size', '?')!r}) is too large for this problem, and the "
            "estimate is not an optimum (clipping only keeps it bounded). " + remedy(est, "oscillating"),
            ConvergenceWarning,
        )
    elif converged is False:
        change = float(np.max(np.abs(theta - np.ravel(path[-1 - k])))) / k
        warn(
            f"{est.method} did not converge: over its last {k} update(s) a coefficient moved by {change:.3g} per "
            "update on average (fitting scale), "
            f"more than the tolerance{' and the noise of those updates' if finite else ''}. {est._advice()}",
            ConvergenceWarning,
        )
    elif run.newton.shortened is not None and run.newton.shortened[0] > SHORTENED_NOISE_SDS * float(
            np.linalg.norm(np.broadcast_to(run.noise_sd, theta.shape))):
        norm, radius = run.newton.shortened  # a cut step far longer than its noise: the path was still travelling
        converged = False
        warn(
            f"{est.method} did not reach the optimum: its last step (norm {norm:.3g} on the fitting scale, far above "
            f"its noise) was cut to its trust region (max_step = {radius:g}), so the path was still travelling when "
            "its rounds ran out, and the estimate lies short of the optimum by more than its intervals allow (their "
            "noise model assumes small last steps). Raise max_step (max_step=float('inf') when mu is large) or "
            "n_rounds.",
            ConvergenceWarning,
        )
    elif run.newton.damped is not None:
        count, kept, direction = run.newton.damped
        converged = False
        # the coefficients the most damped direction loads on beyond an even spread (a squared loading >= 1 / p)
        loads = np.flatnonzero(direction**2 >= 1.0 / direction.size)
        loads = loads[np.argsort(-np.abs(direction[loads]))]
        warn(
            f"{est.method} did not reach the optimum along {count} direction(s): there the curvature of its released "
            "Hessians stayed below their eigenvalue floor (privacy noise) in every one of its last rounds, so the "
            f"damped Newton steps removed as little as {1 - kept:.0%} of the error the path had there, and the "
            "estimate along them is where the path stopped, not an optimum. The most damped direction combines "
            f"{_names(loads, fitting_labels(est, direction.size))}: weakly identified (nearly collinear on the fitting "
            "scale, e.g. a covariate and its square not centred first: centre it before squaring). Combine or "
            "reparametrise those columns, increase mu or the rows per site, or merge small sites.",
            ConvergenceWarning,
        )
    privacy_open = finite and not diverged  # a diverged fit's noise grows with its step size: the step is at fault
    if privacy_open:
        idx, small = noise_dominated(theta, run.noise_sd, se)
        privacy_open = not idx.size
        if idx.size:
            labels = fitting_labels(est, theta.size)
            sd = float(np.max(np.broadcast_to(run.noise_sd, theta.shape)[idx]))
            se_shown = float(np.min(np.broadcast_to(se, theta.shape)[idx]))
            tail = f"; {_names(small, labels)} are within one noise sd of 0" if small.size else ""
            warn(
                f"privacy noise dominates the error of coefficient(s) {_names(idx, labels)} of "
                f"{est.method}: the protocol's noise sd there is at least {sd:.3g}, {sd / se_shown:.2g} times a public "
                f"proxy of the sampling standard error ({se_shown:.3g}; both on the standardised scale the fit works "
                f"on){tail}. "
                "Increase mu, pool small sites, or use fewer rounds/parameters.",
                PrivacyNoiseWarning,
            )
        bad, n_min = undersized_clients(session.ledger, session.sizes)
        if bad.size:
            warn(
                f"{bad.size} site(s) are too small for the mu = {setup.mu:.3g} that {est.method}'s estimation rounds get "
                f"(of mu = {getattr(est, 'mu', setup.mu):.3g}; e.g. {_site(est, int(bad[0]))}, "
                f"n = {int(session.sizes[bad[0]])}): their messages are noise-dominated. Sites need at least n = {n_min} rows "
                "at these settings; merge small sites, increase mu, or use fewer rounds.",
                PrivacyNoiseWarning,
            )
    if run.hessian is not None:
        cond = hessian_condition(run.hessian)
        if cond > CONDITION_LIMIT:
            what = "not positive definite" if math.isinf(cond) else f"ill-conditioned (condition number {cond:.2g})"
            warn(
                f"the released Hessian of {est.method} is {what}: collinear covariates or privacy noise. Coefficients "
                "along its smallest eigenvectors are unreliable; drop or combine collinear columns, or increase mu.",
                IllConditionedWarning,
            )
    return converged, privacy_open


#: with finite mu, a fixed-iteration fit whose estimated optimisation error exceeds this many of its
#: standard errors warns (a bias of 1 SE lowers the coverage of a 95% interval to about 83%). 0.5
#: flagged 96% of FedSGD's fits in a coverage cell (logistic, N = 20000, 10 sites, mu = 1) whose
#: intervals covered 95.1%: the estimated gaps sat near 0.5 SE while the measured bias was 0.27 sd
OPTIMISATION_SE = 1.0


def error_transport(noise_model, H: np.ndarray) -> np.ndarray | None:
    """P with ``theta_S - theta* ~ P (theta_0 - theta*)``: how the protocol's noise-free path transports
    its initial error, linearised at H; the noise model's ``error_transport`` (FedSGD, FedHybrid,
    FedAvg: ``A^S``; SCAFFOLD: ``Q^R``; :mod:`privfedstat.theory.noise`), None where it has none.

    Not for the Newton-type protocols (FedIRLS, FedNewton): tried for FedIRLS with the product of
    its rounds' floored Newton maps, the extrapolation ``P (I - P)^-1`` blew up along the directions
    the floor damps (``fair``, mu = 2: an estimated gap of 2.8 SE where the fit was 0.7 MLE SE from
    the MLE), so it was left out.
    """
    transport = getattr(noise_model, "error_transport", None)
    return None if transport is None else transport(H)


def optimisation_gap(noise_model, H: np.ndarray, theta: np.ndarray, theta0: np.ndarray) -> np.ndarray | None:
    """Estimated optimisation error ``theta* - theta_S`` of a fixed-iteration fit (fitting scale), or None.

    From ``theta_S - theta* = P (theta_0 - theta*)`` (:func:`error_transport`):
    ``theta* - theta_S = P (I - P)^-1 (theta_S - theta_0)``. Post-processing of the released
    Hessian H and the estimate; it says how far the noise-free path still was from the optimum of
    the (clipped) objective after its S steps, which the convergence check on the noisy path cannot
    see when the remaining steps are shorter than their noise.
    """
    P = error_transport(noise_model, H)
    if P is None:
        return None
    try:
        return P @ np.linalg.solve(np.eye(P.shape[0]) - P, theta - theta0)
    except np.linalg.LinAlgError:
        return None


def warn_optimisation_gap(estimator, gap: np.ndarray, se: np.ndarray, names) -> bool:
    """ConvergenceWarning when ``|gap_j| > OPTIMISATION_SE se_j`` for some coefficient (original scale);
    returns whether it warned."""
    ratio = np.abs(gap) / se
    if not np.any(ratio > OPTIMISATION_SE):
        return False
    j = int(np.nanargmax(ratio))  # a withheld standard error (NaN) is no ratio: name the largest real one
    warn(
        f"{estimator.method} stopped before the optimum: from the released Hessian, its fixed number of "
        f"steps leaves an optimisation error of about {ratio[j]:.2g} standard errors in {names[j]} "
        f"({int(np.sum(ratio > OPTIMISATION_SE))} coefficient(s) above {OPTIMISATION_SE} SE), which the "
        "intervals do not include. " + estimator._advice() + " Or use FedIRLS (glm()'s default), which "
        "converges in a few rounds.",
        ConvergenceWarning,
    )
    return True


def review_inference(estimator, run: Run, hessian: np.ndarray | None, to_original: np.ndarray,
                     privacy_open: bool = True) -> bool:
    """Warnings from the inference releases at the estimate (post-processing); whether the fit still counts as converged.

    Called on the fitted ``estimator`` (its ``inference_``, ``mu_``, ``coef_`` names): with finite
    mu and a sampling covariance, a :class:`~privfedstat.ConvergenceWarning` when the protocol
    stopped short of the optimum of its (clipped) objective by more than ``OPTIMISATION_SE``
    standard errors (:func:`optimisation_gap`, from the released ``hessian``; returns False then),
    a :class:`~privfedstat.ClippingBiasWarning` when the released share of clipped gradients is large or
    the clipped root's measured displacement is (:func:`~privfedstat.inference.clipping_bias.warn_clipping`), an
    :class:`~privfedstat.OverdispersionWarning` when a converged count
    model's released Pearson dispersion is well above 1 (:func:`warn_overdispersion`), and, where
    :func:`diagnose` left the question open (it did not blame privacy noise, and the fit did not
    diverge: ``privacy_open``), a
    :class:`~privfedstat.PrivacyNoiseWarning` where the fit's own noise model says so (:func:`warn_privacy_share`).
    """
    inference, converged = estimator.inference_, estimator.converged_
    if privacy_open and math.isfinite(estimator.mu_):
        warn_privacy_share(estimator, inference)
    if hessian is not None and math.isfinite(estimator.mu_) and inference.cov_sampling is not None:
        init = getattr(estimator, "init", None)
        theta0 = np.zeros_like(run.theta) if init is None else np.asarray(init, dtype=np.float64).ravel()
        gap = optimisation_gap(run.noise_model, hessian, run.theta, theta0)
        if gap is not None and warn_optimisation_gap(estimator, to_original @ gap, np.sqrt(np.diag(inference.cov)),
                                                     estimator._coef_labels()):
            converged = False  # the noise-free path had not reached the optimum
    warn_clipping(estimator, inference)
    if (inference.cov_type == "model" and estimator.family_.overdispersion and converged is not False
            and overdispersed(inference.dispersion)):
        # (at a point short of the optimum the residuals are inflated by the distance left, and no interval is reported)
        warn_overdispersion(estimator, *inference.dispersion)
    return converged


def warn_overdispersion(estimator, phi: float, sd: float) -> None:
    """OverdispersionWarning for a count model whose released Pearson dispersion is well above 1
    (:func:`privfedstat.inference.core.overdispersed`) while its intervals assume the law's variance.

    Counts that vary more than the law allows (a Poisson model of visits, stays or arrests) leave the
    estimating equation unbiased but make the model-based variance ``H^-1 / N`` too small by about the
    dispersion: the intervals are then too narrow for the truth, as statsmodels' are on the same data.
    """
    private = sd > 0  # a private sum of capped squared Pearson residuals: below the uncapped dispersion
    value = f"at least {phi:.3g} (+- {sd:.2g}; a private sum, each row's term capped)" if private else f"{phi:.3g}"
    warn(
        f"the Pearson dispersion of this {estimator.family_.name} fit is {value}, where the model has 1: the "
        "counts vary more than the model allows, so its model-based standard errors and intervals are too narrow "
        f"(by about sqrt({phi:.3g}) = {math.sqrt(phi):.2g} times{' or more' if private else ''}, more for some "
        "coefficients). Refit with inference='sandwich', which does not assume the variance, or model the extra "
        "variation.",
        OverdispersionWarning,
    )


def warn_privacy_share(estimator, inference: InferenceResult) -> bool:
    """PrivacyNoiseWarning when the privacy part of some coefficient's variance exceeds its sampling part
    (``inference.cov_privacy`` against ``cov_sampling``, original scale); returns whether it warned.

    :func:`diagnose` judges privacy noise before the inference, from the last release's noise alone
    (a lower bound); the inference's covariance carries every round's, so a fit whose last release
    was quiet can still be dominated by privacy noise (FedIRLS's whitened rounds on a rare binary
    column: 4 MLE SEs from the MLE with a privacy sd of 2.3 and no warning).
    """
    if inference.cov_privacy is None or inference.cov_sampling is None:
        return False
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = np.sqrt(np.diag(inference.cov_privacy) / np.diag(inference.cov_sampling))
    idx = np.flatnonzero(ratio > 1.0)
    if not idx.size:
        return False
    names = estimator._coef_labels()
    shown = ", ".join(str(names[j]) for j in idx[:8]) + (f" and {idx.size - 8} more" if idx.size > 8 else "")
    warn(
        f"privacy noise dominates the error of coefficient(s) {shown} of {estimator.method}: by the fit's own noise "
        f"model its sd there is up to {float(np.max(ratio[idx])):.3g} times the sampling standard error. Increase mu, "
        "pool small sites, or use fewer rounds/parameters.",
        PrivacyNoiseWarning,
    )
    return True


def withhold_inference(estimator) -> InferenceResult:
    """The fit's ``inference_`` without standard errors or intervals, for a private fit that did not converge
    (a bootstrap keeps them: its refits simulate the same unfinished path).

    Its covariance describes the privacy and sampling noise around the point the path had
    reached, not the distance still to travel, so its intervals could be narrower than even the
    non-private ones while missing the optimum. The standard errors and intervals become NaN (the
    two covariance parts stay, for diagnosis), with a :class:`~privfedstat.ConvergenceWarning`
    that says so and what to change.
    """
    warn(
        f"{estimator.method} did not converge, so its standard errors and confidence intervals are withheld "
        "(NaN): they would describe the noise around a point short of the optimum, not the distance left. "
        "The warning(s) above give the cause and what to change.",
        ConvergenceWarning,
    )
    return estimator.inference_.withheld("the fit did not converge (see its ConvergenceWarning)")
