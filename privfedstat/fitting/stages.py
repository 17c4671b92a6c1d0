"""The stages of a fit around its protocol, as functions of the estimator's parameters, the session and the plan.

:meth:`~privfedstat.fitting.base.FederatedEstimator.fit` runs them in order: :func:`plan_budget`
turns the parameters (``scaling``, ``clip``, ``inference``) into the
:class:`~privfedstat.privacy.plan.BudgetPlan` before anything is released; :func:`fit_scaler`
rescales the clients' columns (``plan.scaling``); :func:`choose_bounds` fixes the clipping bounds
(``plan.clip``) and hands the protocol its :class:`~privfedstat.federation.protocol.Setup` with the
estimation budget. Protocols call :func:`resolve_weights` for their aggregation weights. Every
release goes through the session's channel, under the budget the plan gave its stage.
"""

from __future__ import annotations

import functools
import math

import numpy as np

from .._validation import check_positive_float
from .._warn import warn
from ..exceptions import IllConditionedWarning, PrivacyLeakWarning, PrivacyNoiseWarning
from ..families import Family
from ..federation.protocol import Setup
from ..federation.queries import column_count, search_bounds
from ..federation.secure import sums_securely
from ..federation.session import Session
from ..privacy.clipping import PILOT_AUTOCLIP, AutoClip
from ..privacy.plan import BudgetPlan
from .scaling import FeatureBounds, PrivateStandardize, Scaler
from .steps import resolve_step_size, server_gradient_descent

__all__ = ["plan_budget", "count_precision", "fit_scaler", "make_scaler", "choose_bounds", "bound_search",
           "resolve_weights", "weights_for", "scaling_config", "pending_bounds", "autoclip_bounds"]


def scaling_config(scaling, n_features: int) -> FeatureBounds | PrivateStandardize | None:
    """The estimator's ``scaling`` parameter checked against the design's ``n_features`` columns
    (``"private"`` is the default :class:`PrivateStandardize`)."""
    if scaling is None:
        return None
    if scaling == "private":
        scaling = PrivateStandardize()
    if not isinstance(scaling, (FeatureBounds, PrivateStandardize)):
        raise ValueError(f"scaling must be None, 'private', a PrivateStandardize or a FeatureBounds, got {scaling!r}.")
    j = scaling.intercept
    if j is not None and not 0 <= j < n_features:
        raise ValueError(
            f"scaling's intercept index {j} is not a column of X (it has {n_features}); pass "
            "intercept=None (no intercept: columns are scaled, not centred) or the intercept's index."
        )
    return scaling


#: the quantile of the raw per-sample norms at theta = 0 that ``clip="paper"`` takes (Section 4.1 of the core paper)
PAPER_QUANTILE = 0.9


def bound_search(estimator) -> AutoClip:
    """The configuration of the private bound searches: the estimator's :class:`AutoClip`, else the estimator's
    default (``_default_search``; :data:`PILOT_AUTOCLIP` unless the protocol finds its own working point)."""
    clip = getattr(estimator, "clip", None)
    return clip if isinstance(clip, AutoClip) else getattr(estimator, "_default_search", PILOT_AUTOCLIP)


def plan_budget(estimator, mu: float, inference, *, n_features: int, n_clients: int, n_samples: int,
                family: Family | None = None) -> BudgetPlan:
    """The fit's :class:`BudgetPlan`, decided from public facts before any release.

    The scaling spends ``scaling.budget`` of mu only when it rescales columns (or the ``family``'s
    response: :meth:`PrivateStandardize.scales_response`) privately and can locate them at that
    budget (:meth:`PrivateStandardize.locatable`; otherwise it warns and spends nothing); the clip
    search spends its :class:`AutoClip`'s ``budget`` when some bound is chosen privately
    (:func:`pending_bounds` says "search"); the inference spends ``inference.config.budget``
    (``inference``: a :class:`~privfedstat.inference.core.InferenceTask` or None). ``n_features``,
    ``n_clients`` and ``n_samples`` (N) describe the data (public).
    """
    d = n_features
    noises, factor = count_precision(estimator, n_clients, mu)
    scaling = scaling_config(getattr(estimator, "scaling", None), d)
    scaling_share = 0.0
    if isinstance(scaling, PrivateStandardize) and scaling.n_located(d, family):
        mu_scale = factor * scaling.budget * mu if math.isfinite(mu) else math.inf
        if scaling.locatable(n_samples, noises, d, mu_scale, family):  # public: decided before any release
            scaling_share = factor * scaling.budget
        else:
            sd = scaling.count_noise_sd(noises, d, mu_scale, family)
            warn(
                f"private scaling cannot locate the columns at this budget: the noise of each pooled count "
                f"(sd {sd:.3g}) is comparable to N = {n_samples}. The columns are left unscaled and no "
                "budget is spent on them. Give public FeatureBounds (scaling=...), a larger mu, or more data.",
                PrivacyNoiseWarning,
            )
    searched = pending_bounds(estimator, mu)[2] == "search"
    return BudgetPlan.split(mu, scaling=scaling_share, clip=factor * bound_search(estimator).budget if searched else 0.0,
                            inference=0.0 if inference is None else inference.config.budget)


def count_precision(estimator, n_clients: int, mu: float) -> tuple[int, float]:
    """The independent noises in a pooled count of a fit of ``estimator`` on ``n_clients`` clients, and the factor of
    the budgets of its stages of counts (the scaling, the bound searches): ``(n_clients, 1)``, each client adding its
    own noise; under secure aggregation (finite mu) ``(1, 1 / sqrt(n_clients))``.

    A secure count at ``mu_q / sqrt(m)`` carries the noise sd ``sqrt(m) / mu_q`` rows of the per-site count at
    ``mu_q``: the searches keep the per-site path's precision (their leans and outcomes, in rows), and the ``(1 - 1 /
    m)`` of their ``mu^2`` that the secure sum saves goes to the estimation (docs/guide/secure-aggregation.md,
    "Counts"). With equal sites the FedSGD pilot rounds of an :class:`AutoClip` (secure sums too) keep theirs as well.
    """
    if not sums_securely(estimator, mu):
        return n_clients, 1.0
    return 1, 1.0 / math.sqrt(n_clients)


def fit_scaler(estimator, session: Session, plan: BudgetPlan) -> Scaler | None:
    """Fit the feature rescaling requested by ``scaling`` (privately with ``plan.scaling``) and rescale the clients.

    Each client rescales its own columns with the public centres and scales (:func:`make_scaler`).
    """
    clients = session.clients
    scaler = make_scaler(estimator, functools.partial(column_count, session), int(np.sum(clients.sizes)),
                         clients.n_clients, clients.n_features, plan, clients.family)
    if scaler is not None:
        clients.rescale(scaler)
        _check_huber_threshold(clients.family, scaler)
    return scaler


#: a Huber threshold below this share of the located response's spread leaves the loss almost without curvature
HUBER_MIN_THRESHOLD = 0.05


def _check_huber_threshold(family, scaler: Scaler) -> None:
    """Warn when a located response makes Huber's threshold (in units of the response) tiny next to its spread.

    On the fitting scale the response's spread (the private 90% quantile of ``|y - c|``) is 1 and the
    threshold ``c / s``: below ``HUBER_MIN_THRESHOLD`` nearly every residual lies beyond it, the loss is almost
    the absolute error, its curvature (the rows inside the threshold) almost 0, and noisy Newton steps on it
    go far astray (post-processing of the released scale).
    """
    if family.name != "huber" or scaler.response_scale == 1.0 or family.param >= HUBER_MIN_THRESHOLD:
        return
    c = family.param * scaler.response_scale
    warn(
        f"Huber's threshold c = {c:.4g} (in units of the response) is {family.param:.2%} of the response's spread "
        f"(private 90% quantile of |y - centre|: {scaler.response_scale:.4g}): nearly every residual lies beyond it, "
        "so the loss is almost the absolute error and has almost no curvature. Give the threshold in the "
        f"response's units, e.g. family=Huber(c=1.345 * residual sd), or rescale y.",
        IllConditionedWarning,
    )


def make_scaler(estimator, count, n_samples: int, n_clients: int, n_features: int, plan: BudgetPlan,
                family: Family | None = None) -> Scaler | None:
    """The feature rescaling requested by ``scaling``: public bounds, or private centres and scales from ``count``
    (of the ``family``'s response too, where it is located).

    ``count(column, threshold, center, mu_q, stage)`` is the pooled (noisy) count of
    :meth:`Scaler.private` (a fit asks its clients, :func:`~privfedstat.federation.queries.column_count`;
    a plan asks a public design). Nothing to rescale gives None, or an identity :class:`Scaler`
    when an intercept is declared.
    """
    d = n_features
    scaling = scaling_config(getattr(estimator, "scaling", None), d)
    if scaling is None:
        return None
    if isinstance(scaling, FeatureBounds):
        return Scaler.from_bounds(scaling, d, family)
    if plan.scaling == 0:  # no column to rescale, or not locatable: nothing spent
        return None if scaling.intercept is None else Scaler(np.zeros(d), np.ones(d), scaling.intercept)
    noises, _ = count_precision(estimator, n_clients, plan.mu)
    return Scaler.private(scaling, count, n_samples, noises, d, plan.scaling, family)


def choose_bounds(estimator, session: Session, plan: BudgetPlan, scaler: Scaler | None = None) -> Setup:
    """Resolve the clipping bound(s) and return the protocol's :class:`Setup` (with ``plan.estimation``, and the
    ``scaler``'s public :meth:`~privfedstat.fitting.scaling.Scaler.square_norm` for ``step_size="auto"``).

    Fixed bounds are used as given; with mu = inf a bound left to choose is infinite unless an
    :class:`AutoClip` or ``"paper"`` asks for a choice (no privacy: no clipping, no bias); ``"paper"``
    takes the 90% quantile of the clients' raw norms at theta = 0 (not private: it warns and the
    ledger says so); otherwise the :class:`AutoClip` search (:func:`search_bounds`) spends
    ``plan.clip``, split equally in squares over its stages (search, pilot rounds of FedSGD,
    search at the pilot).
    """
    bounds, todo, how = pending_bounds(estimator, plan.mu)
    if how == "infinite":
        bounds.update(dict.fromkeys(todo, math.inf))
    elif how == "paper":
        warn(
            "clip='paper' sets B from the raw data (max over clients of the 90th percentile of "
            "per-sample norms at theta=0) without privacy accounting; the fit is not fully private. "
            "Use clip='auto' (default) for a private choice.",
            PrivacyLeakWarning,
        )
        theta0 = session.clients.initial_parameters()
        for which in todo:
            quantiles, _, answered = session.ask("norm_quantiles", which=which, theta=theta0, q=PAPER_QUANTILE)
            bounds[which] = float(np.max(quantiles[answered]))
    elif how == "search":
        _search(session, bounds, todo, bound_search(estimator), plan.clip)
    return Setup(bounds.get("gradient", math.inf), bounds.get("hessian", math.nan), plan.estimation,
                 None if scaler is None else scaler.square_norm())


def _search(session: Session, bounds: dict[str, float], todo: list[str], config: AutoClip, mu_clip: float) -> None:
    """Add to ``bounds`` the :class:`AutoClip` choice of the bounds ``todo`` on the session's clients,
    ``mu_clip``-GDP in all (:func:`autoclip_bounds`; the pilot is private FedSGD on every client with
    size weights)."""
    clients = session.clients

    def search(theta, quantile, mu_stage):
        return search_bounds(session, todo, theta, quantile, config, mu_stage)

    def pilot(theta0, clip, mu_stage):
        eta = resolve_step_size("auto", clients.family, clients.n_features)
        return server_gradient_descent(session.everyone(), theta0, clip=clip, n_iter=config.pilot_rounds,
                                       step_size=eta, mu=mu_stage, weights=session.size_weights,
                                       stage="clip-pilot")[0]

    bounds.update(autoclip_bounds(config, mu_clip, clients.initial_parameters(), search, pilot, fixed=bounds))


def autoclip_bounds(config: AutoClip, mu_clip: float, theta0: np.ndarray, search, pilot,
                    fixed: dict[str, float] | None = None) -> dict[str, float]:
    """The stages of an :class:`AutoClip` choice, ``mu_clip``-GDP in all (equal shares in squares).

    ``search(theta, quantile, mu_stage) -> {norm: bound}`` finds the ``quantile(norm)`` of the
    per-sample norms at theta (at theta^(0): :meth:`AutoClip.start_quantile`); with
    ``config.pilot_rounds`` a pilot ``pilot(theta0, clip, mu_stage) -> theta`` (``pilot_rounds``
    FedSGD rounds from theta^(0) with the gradient bound found and
    ``step_size="auto"``) moves to a working point, where ``search`` looks for the
    ``pilot_quantile``. ``fixed`` holds the user's bounds that are not searched (a numeric ``clip``
    is a complete setting: then only the Hessian bound is searched, and the pilot clips at the given
    B). A fit searches its clients (:func:`choose_bounds`); a plan searches a public design
    (:mod:`privfedstat.planning.power`).
    """
    mu_stage = mu_clip / math.sqrt(config.n_stages)
    bounds = dict(search(theta0, config.start_quantile, mu_stage))
    if config.pilot_rounds:
        clip = bounds["gradient"] if "gradient" in bounds else (fixed or {})["gradient"]
        bounds.update(search(pilot(theta0, clip, mu_stage), lambda which: config.pilot_quantile, mu_stage))
    return bounds


def pending_bounds(estimator, mu: float) -> tuple[dict[str, float], list[str], str]:
    """The user's fixed bounds by norm, the norms whose bound the fit must choose, and how it chooses them.

    How: ``"none"`` (every bound fixed), ``"infinite"`` (mu = inf and neither an :class:`AutoClip`
    nor ``"paper"`` asks: no clipping), ``"paper"`` (the ``PAPER_QUANTILE`` of the raw norms at
    theta = 0, not private) or ``"search"`` (the private :class:`AutoClip` search of
    :func:`bound_search`).
    """
    bounds, todo = _bounds_to_choose(estimator)
    if not todo:
        return bounds, todo, "none"
    clip = estimator.clip
    if clip != "paper" and not isinstance(clip, AutoClip) and math.isinf(mu):
        return bounds, todo, "infinite"
    return bounds, todo, "paper" if clip == "paper" else "search"


def _bounds_to_choose(estimator) -> tuple[dict[str, float], list[str]]:
    """The user's fixed bounds by norm, and the norms (of the estimator's ``_norms``) whose bound the fit must choose."""
    bounds: dict[str, float] = {}
    todo = []
    for which in estimator._norms:
        fixed = _fixed_bound(estimator, which)
        if fixed is None:
            todo.append(which)
        else:
            bounds[which] = fixed
    return bounds, todo


def _fixed_bound(estimator, which: str) -> float | None:
    """The user's fixed bound for ``which`` norm, or None if it must be chosen from data.

    ``hessian_clip=None`` follows ``clip``: chosen the same way when ``clip`` is ``"auto"``,
    ``"paper"`` or an :class:`AutoClip`; infinite when ``clip`` is infinite; chosen as by
    ``"auto"`` when ``clip`` is a finite number (so that one number, e.g. a grid search's, is a
    complete setting).
    """
    clip = estimator.clip
    value = clip if which == "gradient" else estimator.hessian_clip
    if value is None:
        if isinstance(clip, (str, AutoClip)) or math.isfinite(float(clip)):
            return None
        return math.inf
    if isinstance(value, (str, AutoClip)):
        return None
    return check_positive_float(value, f"{which} clip", allow_inf=True)


def resolve_weights(estimator, session: Session, clip: float, noise_var: np.ndarray | None = None) -> np.ndarray:
    """Server aggregation weights from the estimator's ``weights`` parameter, for the session's clients
    (:func:`weights_for` their public sizes). The protocol reports the result in its
    :class:`~privfedstat.federation.protocol.Run` (the inference aggregates with it)."""
    return weights_for(estimator, session.sizes, session.clients.n_params, clip, noise_var)


def weights_for(estimator, sizes: np.ndarray, n_params: int, clip: float, noise_var: np.ndarray | None = None
                ) -> np.ndarray:
    """Server aggregation weights from the estimator's ``weights`` parameter, for clients of public sizes n_i.

    ``"size"``: n_i / N. ``"optimal"`` (eq. (2) of the core paper, only where ``noise_var`` is
    given): w_i proportional to ``1 / (trace(Sigma)/n_i + p * s_i^2)``, with ``s_i^2`` the
    per-coordinate variance of client i's noise and trace(Sigma) replaced by its bound B^2
    (``clip``: clipped gradients have norm <= B), as Remark 3.3 suggests replacing it by a
    constant. An array is used as given (non-negative, summing to 1).
    """
    w = estimator.weights
    sizes = np.asarray(sizes, dtype=np.float64)
    m = sizes.size
    if isinstance(w, str):
        if w == "size":
            return sizes / sizes.sum()
        if w == "optimal":
            if noise_var is None:
                raise ValueError(f"weights='optimal' (eq. (2)) is defined for FedSGD and FedHybrid (FedIRLS: its own rule), not "
                                 f"{estimator.method}; use 'size' or an array.")
            B2 = clip**2 if math.isfinite(clip) else 1.0
            inv = 1.0 / (B2 / sizes + n_params * noise_var)
            return inv / inv.sum()
        raise ValueError(f"weights must be 'size', 'optimal' or an array of {m} numbers, got {w!r}.")
    arr = np.asarray(w, dtype=np.float64)
    if arr.shape != (m,) or np.any(~np.isfinite(arr)) or np.any(arr < 0):
        raise ValueError(f"weights must be {m} non-negative finite numbers (one per client), got shape {arr.shape}.")
    if abs(arr.sum() - 1.0) > 1e-8:
        raise ValueError(f"weights must sum to 1, they sum to {arr.sum():.6g}; divide by their sum.")
    return arr
