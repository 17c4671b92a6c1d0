"""The inference stage of a fit: private releases at the estimate, the two covariance parts, the result.

:func:`private_inference` runs after a private estimator's protocol, at its estimate theta-hat
(fitting scale), from the budget ``mu_inf = budget * mu`` reserved before the protocol ran
(:class:`~privfedstat.inference.Inference`):

1. **Hessian bound** C_H: the estimator's own (FedIRLS, FedNewton, a fixed ``hessian_clip``); else,
   with finite mu, a private search for the ``pilot_quantile`` (99%) of the per-sample Hessian
   norms at theta-hat with ``SEARCH_SHARE`` of ``mu_inf^2`` (stage ``"inference-clip"``, the
   :class:`~privfedstat.AutoClip` bisection); with mu = inf no clipping.
2. **Releases** (Gaussian mechanisms through the channel, recorded in the ledger): ``sym_to_vec`` of
   every client's mean Hessian, per-sample terms clipped to C_H (stage ``"inference-hessian"``,
   sensitivity ``sqrt(2) C_H / n_i``), and for the sandwich of its mean clipped score outer product
   ``mean_j g_j g_j^T`` with the fit's own gradient clip B (stage ``"inference-score"``,
   sensitivity ``sqrt(2) B^2 / n_i``: PSD terms of Frobenius norm ``||g_j||^2 <= B^2``, the
   argument of :func:`~privfedstat.estimators.fedirls.hessian_sensitivity`). It is the clipped
   score the fit solved, so the sandwich describes the clipped estimator. The rest of ``mu_inf``
   is split between the two in squares as ``2 C_H : B^2`` (inferred: this minimises the
   first-order relative error of ``H^-1 Sigma H^-1``, ``4 Var(dH/H) + Var(dSigma/Sigma)``, when H
   and Sigma have eigenvalues of the same size, as for canonical GLMs at the truth).
3. **Post-processing**: aggregate with the fit's weights (H with w_i, Sigma with
   ``w_i^2 / (n_i c)``, :func:`~privfedstat.inference.covariance.weighted_factor`), floor
   eigenvalues at ``FLOOR_NOISE_SDS`` = 1 noise standard deviation s (``v^T Xi v`` has sd s for a
   unit v), the sampling covariance with the second-order bias correction
   (:func:`~privfedstat.inference.covariance.sampling_covariance`), plus the privacy-noise
   covariance of the protocol from :func:`privfedstat.theory.protocol_noise_covariance`
   linearised at the floored Hessian; both mapped to the original scale.

``"bootstrap"`` hands the whole ``mu_inf`` to :func:`privfedstat.inference.bootstrap.run_bootstrap`.

**Floor (measured).** An eigenvalue of H that the noise cannot resolve is raised to the floor, which
shrinks the variance along it; FedIRLS floors at 3 s for a stable step, but inference is better
served by a low floor (too wide rather than too narrow). On ``fair`` (``glm()`` defaults, 10
sites, mu = 2, 40 noise seeds; private scaling leaves H an eigenvalue ~0.002 for the collinear
age / yrs_married), the median private sampling SE relative to the MLE's was 0.69-0.97 with a
floor of 3 s, 0.70-0.96 with 2 s, 0.84-1.02 with 1 s and 0.85-1.02 with 0.5 s.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

from ..estimators.fedirls import _noise_sd, hessian_sensitivity, sym_to_vec, vec_to_sym
from ..estimators.fednewton import MAX_HESSIAN_GB, floor_eigenvalues
from .config import Inference
from .covariance import sampling_covariance, weighted_factor
from .results import InferenceResult

__all__ = ["private_inference", "exact_result", "resolve_cov_type", "check_feasible", "floored", "SEARCH_SHARE", "DISPERSION_ONE"]

#: share of mu_inf^2 spent on the private Hessian-bound search when the estimator chose no C_H
SEARCH_SHARE = 0.1
#: families whose model-based covariance needs no dispersion (the variance is fixed by the mean)
DISPERSION_ONE = ("logistic", "poisson", "multinomial")
#: eigenvalues below this fraction of the largest count as zero (a singular Hessian with mu = inf)
RCOND = 1e-12
#: the released matrices' eigenvalues are floored at this many noise sds (measured, see the module docstring)
FLOOR_NOISE_SDS = 1.0

_LABELS = {"model": "model-based c H^-1", "sandwich": "sandwich c H^-1 Sigma H^-1"}


def resolve_cov_type(config: Inference, family_name: str) -> str:
    """``config.cov_type`` with "auto" resolved: "model" for logistic / Poisson / multinomial, else "sandwich".

    Raises ``ValueError`` for ``"model"`` with a family whose loss is not a likelihood of dispersion 1
    (Gaussian, Huber): its ``H^-1 / N`` would assume a residual variance of 1.
    """
    if config.cov_type == "auto":
        return "model" if family_name in DISPERSION_ONE else "sandwich"
    if config.cov_type == "model" and family_name not in DISPERSION_ONE:
        raise ValueError(f"cov_type='model' assumes dispersion 1 (logistic, poisson, multinomial); the {family_name} "
                         "loss has an unknown scale. Use cov_type='sandwich' (the default for it) or 'bootstrap'.")
    return config.cov_type


def _release(ctx, matrices: np.ndarray, bound: float, mu: float, weights: np.ndarray, stage: str
             ) -> tuple[np.ndarray, float]:
    """Release ``sym_to_vec`` of every client's PSD mean (terms of Frobenius norm <= ``bound``) and aggregate.

    Returns the aggregated symmetric matrix and the standard deviation s of its diagonal noise.
    """
    sens = hessian_sensitivity(bound, ctx.sizes)
    noisy = ctx.channel.release(sym_to_vec(matrices), sensitivity=sens, mu=mu, stage=stage, weights=weights)
    return vec_to_sym(weights @ noisy, matrices.shape[-1]), _noise_sd(sens, mu, weights)


def floored(A: np.ndarray, s: float, what: str, notes: list[str]) -> np.ndarray:
    """``A`` with eigenvalues raised to ``FLOOR_NOISE_SDS * s`` (post-processing), noting what changed.

    With exact matrices (s = 0) only a singular ``A`` is lifted, to ``RCOND`` times its largest
    eigenvalue (collinear columns: the corresponding variances come out huge, not infinite).
    """
    vals = np.linalg.eigvalsh(A)
    top = max(float(np.max(np.abs(vals))), 1e-300)
    floor = max(FLOOR_NOISE_SDS * s, RCOND * top)
    low = int(np.sum(vals < floor))
    if not low:
        return A
    if s > 0:
        notes.append(f"{low} of {vals.size} eigenvalues of the released {what} were below {FLOOR_NOISE_SDS:g} noise "
                     f"sds ({floor:.3g}) and were raised to it (post-processing); along them the sampling variance "
                     "is understated and the privacy noise dominates")
    else:
        notes.append(f"the {what} is singular ({low} eigenvalue(s) ~ 0: collinear columns?); they were set to "
                     f"{floor:.3g}, so the variances along them are huge")
    return floor_eigenvalues(A, floor)


def private_inference(ctx, theta: np.ndarray, config: Inference, mu: float, *, cov_type: str, to_original: np.ndarray,
                      search_bound: Callable[[np.ndarray, float], float],
                      bootstrap: Callable[[float], tuple[np.ndarray, list[str]]],
                      privacy_covariance: Callable[[np.ndarray, list], np.ndarray]) -> InferenceResult:
    """Run the inference releases at ``theta`` and return the fit's :class:`InferenceResult`.

    Parameters
    ----------
    ctx : FitContext
        The fit's context after the protocol (oracle, channel, clip, hessian_clip, weights).
    theta : ndarray of shape (p,)
        The estimate on the fitting scale, flat (oracle order).
    config : Inference
    mu : float
        GDP budget per client of all inference releases together (inf: nothing is noised).
    cov_type : {"model", "sandwich", "bootstrap"}
    to_original : ndarray of shape (p, p)
        G of :func:`~privfedstat.inference.covariance.original_scale_map`.
    search_bound : callable
        ``search_bound(theta, mu) -> C_H``: private quantile of per-sample Hessian norms at theta,
        ``mu``-GDP in all, stage ``"inference-clip"``.
    bootstrap : callable
        ``bootstrap(mu) -> (draws (n_boot, p) on the fitting scale, notes)``, ``mu``-GDP in all.
    privacy_covariance : callable
        ``privacy_covariance(H, notes) -> (p, p)``: covariance of the protocol's privacy noise in
        theta, linearised at the symmetric positive definite H (may append to the list ``notes``).
    """
    G = to_original
    params = G @ theta
    finite = math.isfinite(mu)
    spent = f"mu = {mu:.4g} per client" if finite else "no noise (mu = inf)"
    if cov_type == "bootstrap":
        draws_fit, notes = bootstrap(mu)
        draws = np.asarray(draws_fit, dtype=np.float64) @ G.T
        cov = np.atleast_2d(np.cov(draws, rowvar=False))
        method = (f"parametric bootstrap, {draws.shape[0]} simulated private fits ({spent}); basic intervals")
        return InferenceResult(params, cov, None, None, "bootstrap", config.alpha, mu, method, draws,
                               draws.mean(axis=0) - params, list(notes))
    oracle = ctx.oracle
    notes: list[str] = []
    w = ctx.weights if ctx.weights is not None else ctx.size_weights
    c, v = weighted_factor(w, ctx.sizes)
    C_H, mu_rest, bound_text = ctx.hessian_clip, mu, "the fit's"
    if math.isnan(C_H):
        if finite:
            C_H = search_bound(theta, math.sqrt(SEARCH_SHARE) * mu)
            mu_rest = math.sqrt(1.0 - SEARCH_SHARE) * mu
            bound_text = "privately chosen"
        else:
            C_H = math.inf
    B = ctx.clip
    share_h = 1.0  # of mu_rest^2 for the Hessian: all of it (model), 2 C_H : B^2 (sandwich; any share with mu = inf)
    if cov_type == "sandwich":
        share_h = 2.0 * C_H / (2.0 * C_H + B * B) if finite else 0.5
    H, s_H = _release(ctx, oracle.hessians(theta, C_H), C_H, mu_rest * math.sqrt(share_h), w, "inference-hessian")
    H = floored(H, s_H, "Hessian", notes)
    Sigma = None
    if cov_type == "sandwich":
        Sigma, s_S = _release(ctx, oracle.score_outer(theta, B), B * B, mu_rest * math.sqrt(1.0 - share_h), v,
                              "inference-score")
        Sigma = floored(Sigma, s_S, "score covariance", notes)
    correct = config.bias_correction and s_H > 0
    V_s, more = sampling_covariance(H, c, Sigma, s_H * s_H, correct)
    notes += more
    V_p = privacy_covariance(H, notes)
    V_s, V_p = G @ V_s @ G.T, G @ V_p @ G.T
    clip_text = "unclipped" if math.isinf(C_H) else f"C_H = {C_H:.3g} ({bound_text})"
    method = (f"{_LABELS[cov_type]} at the estimate (Hessian{' and score' if Sigma is not None else ''} "
              f"released, {spent}, {clip_text}{', bias-corrected' if correct and not more else ''})"
              + (" + privacy noise of the protocol (linearised)" if math.isfinite(ctx.mu) else ""))
    return InferenceResult(params, V_s + V_p, V_s, V_p, cov_type, config.alpha, mu, method, notes=notes)


def exact_result(params: np.ndarray, cov: np.ndarray, cov_type: str, config: Inference, what: str,
                 notes: list[str]) -> InferenceResult:
    """The :class:`InferenceResult` of a non-private baseline: exact sampling covariance, no privacy part."""
    method = f"{_LABELS[cov_type]} on the raw data ({what}; not private)"
    return InferenceResult(params, cov, cov, np.zeros_like(cov), cov_type, config.alpha, math.inf, method,
                           notes=list(notes))


def check_feasible(cov_type: str, n_clients: int, n_params: int) -> None:
    """Refuse, before anything is released, Hessian releases that would not fit in memory.

    Model and sandwich inference form one (p, p) matrix per client (as FedIRLS does), at most
    ``MAX_HESSIAN_GB`` for all clients.
    """
    need_gb = n_clients * n_params * n_params * 8 / 1e9
    if cov_type in _LABELS and need_gb > MAX_HESSIAN_GB:
        raise ValueError(
            f"{cov_type} inference forms a {n_params} x {n_params} Hessian on every client ({need_gb:.1f} GB for "
            f"{n_clients} clients, limit {MAX_HESSIAN_GB} GB); fit with inference=None or inference='bootstrap'."
        )
