"""Private queries that several stages of a fit share: bound searches, noisy counts, PSD-mean releases.

The clip search before the protocol, the inference's Hessian-bound search and the bootstrap's
row-norm search are one query (:func:`search_bounds`); the feature scaling's bisections ask the
same kind of pooled count of a column (:func:`column_count`); the inference's Hessian and score
releases and the bootstrap's moment releases are one PSD-mean release (:func:`release_psd_mean`);
the inference's share of clipped gradients is a pooled count (:func:`clipped_fraction`); the
inference's weighted means (Hessian, score, clipped excess) are :func:`private_mean`. Each is a
Gaussian mechanism run by the clients (in a secure fit a secure sum of their integer messages)
through the session's channel, so it is recorded in the ledger under the stage its caller names;
none reads raw data on the server.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

from .._linalg import vec_to_sym
from ..privacy.calibration import aggregated_noise_sd, hessian_sensitivity
from ..privacy.clipping import AutoClip, private_grid_quantile, search_level
from .secure import mean_noise_sd, message_spec, secure_mean, secure_total, verb_spec
from .server import aggregate
from .session import Session

__all__ = ["search_bounds", "column_count", "release_psd_mean", "private_mean", "planned_noise_sd", "clipped_fraction",
           "pearson_dispersion"]


def search_bounds(session: Session, todo: list[str], theta: np.ndarray, quantile: float | Callable[[str], float],
                  config: AutoClip, mu: float, stage: str = "clip") -> dict[str, float]:
    """The private ``quantile`` of the per-sample norms ``todo`` at ``theta`` (one search each), ``mu``-GDP in all.

    ``quantile``: one level for every norm, or a function of the norm's name giving its level.

    Ledger stages ``f"{stage}-{which}"``. Each query asks every live client for its noisy count
    (verb ``count_at_most``, sensitivity 1) and sums the replies (a secure sum in a secure fit:
    :meth:`~privfedstat.federation.session.Session.count`); the bisection
    (:func:`~privfedstat.privacy.clipping.private_grid_quantile`) runs on ``config``'s public grid
    and targets ``quantile`` of the live clients' public N, lowered by ``config.margin`` count-noise
    standard deviations (of the live clients' summed noises, or of the secure sum's one).
    """
    mu_query = config.query_budget(mu, len(todo))
    live = session.channel.live
    n_total, noises = float(np.sum(session.sizes[live])), session.count_noises(int(np.count_nonzero(live)))
    bounds = {}
    for which in todo:
        target = config.target(search_level(quantile, which), n_total, noises, mu_query)

        def noisy_count(threshold: float, which=which) -> float:
            return session.count("count_at_most", which=which, theta=theta, threshold=threshold, mu=mu_query,
                                 stage=f"{stage}-{which}")

        bounds[which] = private_grid_quantile(noisy_count, config.grid, target)
    return bounds


def column_count(session: Session, column: int, threshold: float, center: float | None, mu: float, stage: str) -> float:
    """The pooled noisy number of rows with ``x_column <= threshold`` (``center`` None) or
    ``|x_column - center| <= threshold``: each client's count (verb ``column_count``, sensitivity 1),
    ``mu``-GDP, summed over the clients that answered."""
    return session.count("column_count", column=column, threshold=threshold, center=center, mu=mu, stage=stage)


def release_psd_mean(session: Session, verb: str, bound: float, mu: float, weights: np.ndarray, stage: str, **request
                     ) -> tuple[np.ndarray, float]:
    """Ask the clients' ``verb`` for ``sym_to_vec`` of their PSD means (terms of Frobenius norm <= ``bound``) and aggregate.

    ``verb`` is ``"hessians"``, ``"score_outer"`` or ``"design_moments"`` with its ``request``
    arguments; the sensitivity is :func:`~privfedstat.privacy.calibration.hessian_sensitivity`
    of ``bound``. Returns the aggregated symmetric matrix and the standard deviation s of its
    diagonal noise.
    """
    v, sd = private_mean(session, verb, weights=weights, sensitivity=hessian_sensitivity(bound, session.sizes),
                         bound=bound, mu=mu, stage=stage, **request)
    p = int(round((math.sqrt(8 * v.size + 1) - 1) / 2))  # v has p (p + 1) / 2 entries
    return vec_to_sym(v, p), sd


def private_mean(session: Session, verb: str, *, weights: np.ndarray, sensitivity: np.ndarray, bound: float, mu: float,
                 stage: str, **request) -> tuple[np.ndarray, float]:
    """The weighted mean ``sum_i w_i s_i`` of the clients' messages of ``verb`` (``s_i`` of L2 sensitivity
    ``sensitivity[i]`` and norm at most ``bound``), ``mu``-GDP, and the per-coordinate sd of its noise (public).

    Each client adds its Gaussian noise (sd ``sqrt(sum_i w_i^2 sigma_i^2)``), or, in a secure fit, the clients'
    weighted messages are summed securely at the same ``mu`` (``secure_<verb>``,
    :func:`~privfedstat.federation.secure.secure_mean`): the sd is then that of the survivors' summed Skellam noise
    and rounding errors over their weight (:func:`~privfedstat.federation.secure.mean_noise_sd`), about
    ``1 / sqrt(m)`` of the per-site sum's with equal sites.
    """
    if session.secure is None or math.isinf(mu):
        v = session.mean(verb, weights=weights, sensitivity=sensitivity, mu=mu, stage=stage, **request)
        return v, aggregated_noise_sd(sensitivity, mu, weights)
    w = np.asarray(weights, dtype=np.float64)
    spec = message_spec(session, f"secure_{verb}", w, sensitivity, bound, mu, request)
    v = secure_mean(session, f"secure_{verb}", weights=w, spec=spec, sensitivity=w * sensitivity, stage=stage,
                    **request)
    return v, mean_noise_sd(spec, w, session.channel.live)


def planned_noise_sd(session: Session, verb: str, *, weights: np.ndarray, sensitivity: np.ndarray, mu: float,
                     **request) -> float:
    """The per-coordinate noise sd that :func:`private_mean` of ``verb`` would have with every live client answering
    (post-processing of public sizes, weights and budgets)."""
    if session.secure is None or math.isinf(mu):
        return aggregated_noise_sd(sensitivity, mu, weights)
    spec = message_spec(session, f"secure_{verb}", weights, sensitivity, 0.0, mu, request)
    return mean_noise_sd(spec, weights, session.channel.live)


def clipped_fraction(session: Session, theta: np.ndarray, clip: float, mu: float, stage: str) -> tuple[float, float]:
    """Private share of per-sample gradients clipped at ``theta`` (norm above ``clip``) and its sd.

    Each client releases its count of such rows (verb ``count_clipped``, sensitivity 1: one row
    replaced changes it by at most 1), ``mu``-GDP; the server sums them (a secure sum in a secure fit:
    :meth:`~privfedstat.federation.session.Session.count`) and divides by the public N of the clients
    that answered. The share is clipped to [0, 1] (post-processing).
    """
    total = session.count("count_clipped", theta=theta, clip=clip, mu=mu, stage=stage)
    live = session.channel.live  # the clients that answered (a failed one is no longer live)
    n_total = float(np.sum(session.sizes[live]))
    return float(np.clip(total / n_total, 0.0, 1.0)), session.count_sd(mu, int(np.count_nonzero(live))) / n_total


def pearson_dispersion(session: Session, theta: np.ndarray, bound: float, mu: float, n_params: int, stage: str
                       ) -> tuple[float, float]:
    """Private Pearson dispersion ``sum_j min(r_j^2, bound) / (N - p)`` at ``theta`` and its noise sd.

    ``r_j`` are the Pearson residuals ``(y_j - mu_j) / sqrt(V(mu_j))``: statsmodels' ``pearson_chi2 / df_resid``
    when nothing is capped (``bound`` inf, with mu = inf). Each client releases its capped sum (verb
    ``pearson_sum``, sensitivity ``bound``), ``mu``-GDP; the server sums them over the clients that answered
    (in a secure fit their secure sum, ``secure_pearson_sum``: each row's term centred by ``bound / 2`` and rounded
    into ``[-bound / 2, bound / 2]``, the server adding ``bound / 2`` per row of the survivors back).
    The cap only lowers the value (a conservative test of overdispersion).
    """
    if session.secure is not None and math.isfinite(mu):  # a secure sum (each row's centred term rounded into its ball)
        m = session.clients.n_clients
        spec = verb_spec("secure_pearson_sum", bound, float(np.max(session.sizes)) * bound / 2.0, 1, mu, m,
                         session.secure, int(np.sum(session.sizes)))
        total = secure_total(session, "secure_pearson_sum", spec=spec, sensitivity=bound, theta=theta, bound=bound,
                             stage=stage)
        live = session.channel.live
        df = float(np.sum(session.sizes[live])) - n_params
        return (total + float(np.sum(session.sizes[live])) * bound / 2.0) / df, \
            math.sqrt(spec.variance(int(np.count_nonzero(live)))) / df
    values, _, answered = session.ask("pearson_sum", theta=theta, bound=bound, mu=mu, stage=stage)
    m = int(np.count_nonzero(answered))
    df = float(np.sum(session.sizes[answered])) - n_params
    sd = math.sqrt(m) * bound / mu / df if math.isfinite(mu) else 0.0
    return float(aggregate(None, values, answered)[0]) / df, sd
