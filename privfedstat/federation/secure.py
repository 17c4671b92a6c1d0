"""Secure aggregation: the sites send quantized messages with integer noise shares, the server learns only their sum.

The client side is the verbs ``secure_gradients`` and ``secure_hessians`` (registered in the verb
table): each site computes the message of ``gradients`` (its mean of per-sample gradients clipped
to B) or ``hessians`` (``sym_to_vec`` of its mean Hessian clipped to C_H), weights it by its
public aggregation weight ``w_i`` (so the sum is the weighted mean's numerator), and
sends ``encode(w_i g_i)`` (:func:`~privfedstat.privacy.secure_noise.encode`: stochastic rounding
to the quantum gamma, its Skellam share, a residue modulo ``2^bits``; the gradient-type verbs round each row into a
ball, :data:`ROW_VERBS`, and the PSD verbs each row's root, sending the integer outer products, :data:`OUTER_VERBS`);
the scalar verbs
``secure_count_at_most``, ``secure_column_count``, ``secure_count_clipped`` (integer counts, sent as
they are: :func:`~privfedstat.privacy.secure_noise.count_spec`) and ``secure_pearson_sum`` send a
count or a sum with weight 1. The server side is :func:`secure_mean` (:func:`secure_total` for the
scalar sums): it refuses the round when fewer than ``spec.min_surviving`` sites answered
(nothing is unmasked), records one release for the *sum* (the worst site's sensitivity, the
survivors' summed noise), and decodes the modular sum.

In process the secure sum is emulated: the server receives every site's residue and adds them,
the arithmetic of a Flower deployment, where SecAgg+ adds them (:mod:`privfedstat.flower.secagg`)
instead and hands the server the sum alone. The ledger records what the protocol reveals (the
sum), so the guarantee it states is the one towards a server that runs the protocol.

A site's randomness (its uniforms for the rounding, its Skellam share) comes from a generator seeded
with the bit patterns of four draws of its own noise stream
(:class:`~privfedstat.privacy.mechanisms.ClientNoise`, or the OS CSPRNG in secure mode), so runs
with one seed are identical and the sites' draws stay in lockstep whoever answers.
"""

from __future__ import annotations

import math

import numpy as np

from .._linalg import sym_to_vec
from ..exceptions import ClientFailureError
from ..privacy.ledger import Release
from ..privacy.secure_noise import MAX_CHECKED_LAM, SkellamSpec, add_shares, decode, outer_folds, quantize, skellam_spec
from ..privacy.secure_outer import outer_spec, outer_squares, quantize_outer
from ..privacy.secure_rounding import quantize_rows, radius_squares, row_spec
from .clients import Reply
from .verbs import Verb, design_moments, get, one_value, parameter_moments, parameters, register

__all__ = ["secure_mean", "secure_total", "message_spec", "verb_spec", "mean_noise_sd", "secure_count",
           "privatize_integer", "share_release", "SecureAggregationRefused", "sums_securely", "secure_sites",
           "site_generators", "least_round_mu", "AGGREGATIONS", "ROW_VERBS", "OUTER_VERBS"]

#: the secure verbs whose sites round each row's contribution into a ball (:mod:`~privfedstat.privacy.secure_rounding`:
#: the integer sensitivity attained exactly)
ROW_VERBS = frozenset({"secure_gradients", "secure_clipped_excess", "secure_pearson_sum"})
#: the PSD verbs, whose sites round each row's root into a ball and send the integer outer products
#: (:mod:`~privfedstat.privacy.secure_outer`: the PSD sensitivity ``sqrt(2) C / n_i`` attained exactly); a Hessian
#: of a multinomial model (per-row terms of rank K - 1) is rounded as a whole
OUTER_VERBS = frozenset({"secure_hessians", "secure_score_outer", "secure_design_moments"})

#: how a fit's server combines messages: each site adds its full Gaussian noise ("local"), or the sites' integer
#: noise shares are summed under secure aggregation ("secure")
AGGREGATIONS = ("local", "secure")


class SecureAggregationRefused(ClientFailureError):
    """Fewer sites survived a secure round than its noise is calibrated for: the sum is not unmasked."""


def secure_count(min_surviving: int | None, n_clients: int, mu: float, participation) -> int:
    """The fewest surviving sites of a secure fit (``min_surviving``; None: every site), checked against what secure
    aggregation needs: every site asked each round. (With mu = inf nothing is noised and the estimators aggregate
    as without it.)"""
    if participation is not None:
        raise ValueError("aggregation='secure' needs every site in every round (participation=None).")
    k = n_clients if min_surviving is None else int(min_surviving)
    if not 1 <= k <= n_clients:
        raise ValueError(f"min_surviving must lie in [1, {n_clients}] (the number of sites), got {min_surviving!r}.")
    return k


def sums_securely(estimator, mu: float) -> bool:
    """Whether a fit of ``estimator`` at ``mu`` sums its releases securely: ``aggregation="secure"`` and a finite mu."""
    return getattr(estimator, "aggregation", "local") == "secure" and not math.isinf(mu)


def secure_sites(estimator, n_clients: int, mu: float, participation) -> int | None:
    """The fewest surviving sites of a fit of ``estimator`` that :func:`sums_securely` (:func:`secure_count`), else
    None (each client adds its own Gaussian noise)."""
    if not sums_securely(estimator, mu):
        return None
    return secure_count(estimator.min_surviving, n_clients, mu, participation)


def site_generators(noise) -> list[np.random.Generator]:
    """One generator per site, seeded with the 64-bit patterns of four standard normal draws of the site's own noise
    stream (the streams advance in lockstep)."""
    draws = np.ascontiguousarray(noise.standard_normal((4,)))
    bits = draws.view(np.uint64).reshape(noise.n_clients, 4)
    return [np.random.Generator(np.random.PCG64(np.random.SeedSequence([int(b) for b in row]))) for row in bits]


def _secure_release(clients, statistic, theta, weights, sensitivity, spec: SkellamSpec, stage: str, active) -> Reply:
    """Each site's ``encode(w_i s_i)`` for ``s_i = statistic(oracle, theta)``: weighted, quantized, with its noise share.

    ``sensitivity`` (per site) is that of ``w_i s_i``; the release record a site attaches is its own share (sd
    ``gamma sqrt(2 lam)``), replaced by the server with the sum's (:func:`secure_mean`).
    """
    answered, failing = clients._begin(active)
    s = clients._answering(answered, statistic, theta)
    w = np.asarray(weights, dtype=np.float64)
    residues, _, rec = privatize_integer(w[:, None] * s, clients._noise, spec, sensitivity, stage)
    return clients._reply(residues, [rec], answered, failing)


def _secure_row_release(clients, row_statistic, theta, weights, sensitivity, spec: SkellamSpec, stage: str, active,
                        mean: bool = True, center: float = 0.0) -> Reply:
    """Each site's sum of its rows' contributions ``v_j = c_i (s_j - center)``, each rounded into its ball
    (:func:`~privfedstat.privacy.secure_rounding.quantize_rows`), with its noise share: ``c_i = w_i / n_i`` for a mean
    (the rows of ``w_i s_i``), ``w_i`` for a sum; ``row_statistic(oracle, theta)`` gives every row's ``s_j`` (N, d)."""
    answered, failing = clients._begin(active)
    o = clients._oracle
    rows, off = row_statistic(o, theta), o.data.offsets
    scale = np.asarray(weights, dtype=np.float64) / (np.asarray(o.sizes, dtype=np.float64) if mean else 1.0)
    values = [scale[i] * (rows[off[i]:off[i + 1]] - center) for i in range(len(scale))]
    residues, _, rec = privatize_integer(values, clients._noise, spec, sensitivity, stage)
    return clients._reply(residues, [rec], answered, failing)


def _secure_outer_release(clients, root_statistic, theta, weights, sensitivity, spec: SkellamSpec, stage: str, active
                          ) -> Reply:
    """Each site's integer outer products of its rows' roots ``sqrt(w_i / n_i) v_j`` (``v_j v_j^T`` the rows' terms of
    its mean; :func:`~privfedstat.privacy.secure_outer.quantize_outer`), with its noise share;
    ``root_statistic(oracle, theta)`` gives every row's ``v_j`` (N, p)."""
    answered, failing = clients._begin(active)
    o = clients._oracle
    roots, off = root_statistic(o, theta), o.data.offsets
    scale = np.sqrt(np.asarray(weights, dtype=np.float64) / np.asarray(o.sizes, dtype=np.float64))
    values = [scale[i] * roots[off[i]:off[i + 1]] for i in range(len(scale))]
    residues, _, rec = privatize_integer(values, clients._noise, spec, sensitivity, stage)
    return clients._reply(residues, [rec], answered, failing)


def _psd_release(clients, statistic, root_statistic, theta, weights, sensitivity, spec: SkellamSpec, stage: str,
                 active) -> Reply:
    """A PSD verb's secure release: the rows' integer outer products for a spec with ``outer``
    (:func:`_secure_outer_release`), else ``sym_to_vec`` of the site's mean rounded as a whole (:func:`_secure_release`)."""
    if spec.outer:
        return _secure_outer_release(clients, root_statistic, theta, weights, sensitivity, spec, stage, active)
    return _secure_release(clients, lambda o, t: sym_to_vec(statistic(o, t)), theta, weights, sensitivity, spec, stage,
                           active)


def privatize_integer(values, noise, spec: SkellamSpec, sensitivity, stage: str) -> tuple[np.ndarray, np.ndarray, Release]:
    """The sites' integer mechanism: site i's weighted message (``values[i]``, of L2 sensitivity ``sensitivity[i]``)
    rounded to the quantum with its stream's uniforms, plus its Skellam share, modulo ``2^bits``; for a spec with
    ``row_reach``, ``values[i]`` are its rows' contributions (n_i, d), each rounded into its ball and summed
    (:func:`~privfedstat.privacy.secure_rounding.quantize_rows`); for a spec with ``outer``, its rows' roots (n_i, p),
    whose integer outer products it sends (:func:`~privfedstat.privacy.secure_outer.quantize_outer`; the rounded
    message returned is their ``sym_to_vec``, one per block).

    Returns the residues (as float64, exact below 2^53), the rounded messages in message units (``gamma`` times the
    integers: what the stated sensitivity bounds) and the site's share record. Looked up on this module by the verbs,
    so that a test's tap sees every secure release.
    """
    rngs = site_generators(noise)
    if spec.outer:
        rounded = quantize_outer(values, spec, sensitivity, rngs)
        unit = spec.quantum * np.tile(np.where(outer_folds(spec.dim) > 1.0, 1.0 / math.sqrt(2.0), 1.0), spec.blocks)
    else:
        rounded = quantize_rows(values, spec, sensitivity, rngs) if spec.row_reach else quantize(values, spec, rngs)
        unit = spec.quantum
    residues = add_shares(rounded, spec, rngs)
    return residues.astype(np.float64), rounded * unit, share_release(spec, sensitivity, rounded.shape[1], stage)


def share_release(spec: SkellamSpec, sensitivity, dim: int, stage: str, answered: np.ndarray | None = None) -> Release:
    """The record of the sites' integer messages of ``dim`` coordinates: each site's sensitivity ``sensitivity[i]``
    plus the rounding slack ``gamma sqrt(d)`` (none for integer messages: counts), or, for rows rounded into a ball,
    twice its rows' radius ``2 gamma sqrt(T_i)`` (:func:`~privfedstat.privacy.secure_rounding.radius_squares`), for
    integer outer products ``sqrt(2) gamma T_i`` (:func:`~privfedstat.privacy.secure_outer.outer_squares`); its
    share's sd ``gamma sqrt(2 lam)`` (zeros for sites outside ``answered``). It follows from the public request: a
    Flower server builds it for the sites SecAgg+ summed."""
    if spec.outer:  # Delta_2 = sqrt(2) T_i (T_i for p = 1)
        sens = spec.quantum * (spec.l2 / spec.outer) * outer_squares(spec, sensitivity).astype(np.float64)
    elif spec.row_reach:
        sens = 2.0 * spec.quantum * np.sqrt(radius_squares(spec, sensitivity).astype(np.float64))
    else:
        sens = np.asarray(sensitivity, dtype=np.float64) + (spec.quantum * np.sqrt(dim) if spec.rounding else 0.0)
    sigma = np.full(sens.shape, spec.quantum * np.sqrt(2.0 * spec.lam))
    if answered is not None:
        sens, sigma = np.where(answered, sens, 0.0), np.where(answered, sigma, 0.0)
    return Release(stage, -1, "aggregated", sens, sigma, integer=spec.noise(1))


def _secure_gradients(clients, theta, *, clip: float, weights, sensitivity, spec: SkellamSpec, stage: str,
                      active=None) -> Reply:
    """``gradients`` under secure aggregation: each site's mean of per-sample gradients clipped to B, times ``w_i``,
    each row rounded into its ball."""
    return _secure_row_release(clients, lambda o, t: o.row_gradients(t, clip), theta, weights, sensitivity, spec,
                               stage, active)


def _secure_hessians(clients, theta, *, hessian_clip: float, gradient_clip: float | None = None, weights, sensitivity,
                     spec: SkellamSpec, stage: str, active=None) -> Reply:
    """``hessians`` under secure aggregation: each site's mean Hessian clipped to C_H (the clipped score's Jacobian with
    ``gradient_clip``), times ``w_i``, as its rows' integer outer products (:func:`_psd_release`)."""
    return _psd_release(clients, lambda o, t: o.hessians(t, hessian_clip, gradient_clip),
                        lambda o, t: o.row_hessian_roots(t, hessian_clip, gradient_clip), theta, weights, sensitivity,
                        spec, stage, active)


def _secure_score_outer(clients, theta, *, clip: float, weights, sensitivity, spec: SkellamSpec, stage: str,
                        active=None) -> Reply:
    """``score_outer`` under secure aggregation: each site's mean of ``g g^T`` (gradients clipped to ``clip``), times
    ``w_i``, as its rows' integer outer products."""
    return _psd_release(clients, lambda o, t: o.score_outer(t, clip), lambda o, t: o.row_gradients(t, clip), theta,
                        weights, sensitivity, spec, stage, active)


def _secure_design_moments(clients, *, row_clip: float, weights, sensitivity, spec: SkellamSpec, stage: str,
                           active=None) -> Reply:
    """``design_moments`` under secure aggregation: each site's mean of ``x x^T`` (rows clipped to ``row_clip``), times
    ``w_i``, as its rows' integer outer products."""
    return _psd_release(clients, lambda o, _: o.design_moments(row_clip), lambda o, _: o.row_design_roots(row_clip),
                        None, weights, sensitivity, spec, stage, active)


def _secure_clipped_excess(clients, theta, *, clip: float, outer: float, weights, sensitivity, spec: SkellamSpec,
                           stage: str, active=None) -> Reply:
    """``clipped_excess`` under secure aggregation: each site's mean of ``clip_{B'}(g_j) - clip_B(g_j)``, times ``w_i``,
    each row rounded into its ball."""
    return _secure_row_release(clients, lambda o, t: o.row_clipped_excess(t, clip, outer), theta, weights,
                               sensitivity, spec, stage, active)


def _secure_count_at_most(clients, which: str, theta, threshold: float, *, weights, sensitivity, spec: SkellamSpec,
                          stage: str, active=None) -> Reply:
    """``count_at_most`` under secure aggregation: each site's number of rows whose ``which`` norm is <= ``threshold``
    (an integer; sensitivity 1, weight 1)."""
    return _secure_release(clients, clients._counts_at_most(which, threshold), theta, weights, sensitivity, spec,
                           stage, active)


def _secure_column_count(clients, column, threshold: float, *, center: float | None = None, weights, sensitivity,
                         spec: SkellamSpec, stage: str, active=None) -> Reply:
    """``column_count`` under secure aggregation: each site's number of rows with ``x_j <= t`` or ``|x_j - c| <= t``."""
    return _secure_release(clients, lambda o, _: o.column_counts(column, threshold, center)[:, None], None, weights,
                           sensitivity, spec, stage, active)


def _secure_count_clipped(clients, theta, *, clip: float, weights, sensitivity, spec: SkellamSpec, stage: str,
                          active=None) -> Reply:
    """``count_clipped`` under secure aggregation: each site's number of rows whose gradient norm exceeds B."""
    return _secure_release(clients, lambda o, t: o.clipped_counts(t, clip)[:, None], theta, weights, sensitivity, spec,
                           stage, active)


def _secure_pearson_sum(clients, theta, *, bound: float, weights, sensitivity, spec: SkellamSpec, stage: str,
                        active=None) -> Reply:
    """``pearson_sum`` under secure aggregation: each site's sum of its squared Pearson residuals capped at ``bound``
    less ``n_i bound / 2`` (sensitivity ``bound``): each row's term, centred to ``[-bound / 2, bound / 2]``, rounded into
    that interval (the server adds ``bound / 2`` per row back)."""
    return _secure_row_release(clients, lambda o, t: o.row_pearson_terms(t, bound)[:, None], theta, weights,
                               sensitivity, spec, stage, active, mean=False, center=bound / 2.0)


def _blocked(shape):
    """A PSD verb's reply shape: ``spec.blocks`` times ``shape``'s coordinates (the request's spec; one block without
    it, as :func:`message_spec` asks)."""
    def rule(n_params: int, n_features: int, request) -> tuple[int, ...]:
        spec = request.get("spec")
        return (math.prod(shape(n_params, n_features, request)) * (1 if spec is None else int(spec.blocks)),)
    return rule


_SECURE = dict(per_client=("weights", "sensitivity", "active"), records=(("spec", SkellamSpec),))
register(Verb("secure_gradients", shape=parameters, **_SECURE), in_process=_secure_gradients)
register(Verb("secure_hessians", shape=_blocked(parameter_moments), **_SECURE), in_process=_secure_hessians)
register(Verb("secure_score_outer", shape=_blocked(parameter_moments), **_SECURE), in_process=_secure_score_outer)
register(Verb("secure_design_moments", shape=_blocked(design_moments), **_SECURE), in_process=_secure_design_moments)
register(Verb("secure_clipped_excess", shape=parameters, **_SECURE), in_process=_secure_clipped_excess)
register(Verb("secure_count_at_most", shape=one_value, **_SECURE), in_process=_secure_count_at_most)
register(Verb("secure_column_count", shape=one_value, **_SECURE), in_process=_secure_column_count)
register(Verb("secure_count_clipped", shape=one_value, **_SECURE), in_process=_secure_count_clipped)
register(Verb("secure_pearson_sum", shape=one_value, **_SECURE), in_process=_secure_pearson_sum)


def summed_release(reply: Reply, spec: SkellamSpec) -> Release:
    """The release of a secure sum: the survivors' sensitivities, the sd of their summed noise
    ``gamma sqrt(2 n lam)`` (the sum of n Skellam shares is Skellam), from the reply's share record."""
    share, answered = reply.releases[0], reply.answered
    n = int(np.count_nonzero(answered))
    sigma = np.where(answered, spec.quantum * np.sqrt(2.0 * spec.lam * n), 0.0)
    return Release(share.stage, -1, "aggregated", share.sensitivity, sigma, integer=spec.noise(n))


def verb_spec(verb: str, sensitivity: float, bound: float, dim: int, mu: float, n_clients: int, min_surviving: int,
              rows: int, outputs: int = 1) -> SkellamSpec:
    """The arithmetic of a secure round of ``verb``: rows rounded into a ball for :data:`ROW_VERBS`
    (:func:`~privfedstat.privacy.secure_rounding.row_spec`, ``rows`` all sites' rows), rows' roots for
    :data:`OUTER_VERBS` (:func:`~privfedstat.privacy.secure_outer.outer_spec`, in blocks of rows where the 30-bit word
    of Flower's SecAgg+ cannot hold the bracket's radius otherwise; not the Hessians of a model of ``outputs > 1``, whose
    row terms are not outer products, nor where even blocks do not fit or the rows' rounding variance would exceed the
    noise's), the site message rounded as a whole otherwise
    (:func:`~privfedstat.privacy.secure_noise.skellam_spec`); arguments as theirs."""
    if verb in ROW_VERBS:
        return row_spec(sensitivity, bound, dim, mu, n_clients, min_surviving, rows)
    if verb in OUTER_VERBS and not (verb == "secure_hessians" and outputs > 1):
        spec = outer_spec(sensitivity, bound, dim, mu, n_clients, min_surviving, rows)
        if spec is not None:
            return spec
    return skellam_spec(sensitivity, bound, dim, mu, n_clients, min_surviving)


def least_round_mu(verb: str, dim: int) -> float:
    """The smallest budget of a secure round of ``verb`` with ``dim`` coordinates that :func:`verb_spec` serves whatever
    the sensitivity and bound (public: ``d`` and the checked range of Lambda): the integer sensitivity is at most
    ``mu sqrt(2 MAX_CHECKED_LAM)``, and it must reach ``2 sqrt(d)`` for rows rounded into a ball (:func:`row_spec`: a
    radius of at least ``sqrt(d)`` quanta), ``5 sqrt(d)`` for a message rounded as a whole (:func:`skellam_spec`: a
    rounding slack of at most 1/4; an outer-product release that cannot serve a budget falls back to it)."""
    reach = (2.0 if verb in ROW_VERBS else 5.0) * math.sqrt(int(dim))
    return reach / (math.sqrt(2.0 * MAX_CHECKED_LAM) * (1.0 - 1e-6))


def message_spec(session, verb: str, weights: np.ndarray, sensitivity, bound: float, mu: float, request: dict
                 ) -> SkellamSpec:
    """The arithmetic of a secure mean of ``verb``'s messages ``w_i s_i`` at budget ``mu`` (the sum's GDP parameter,
    every site's share counted from ``session.secure`` survivors on): sensitivity ``max_i w_i Delta_i``
    (``sensitivity[i] = Delta_i``), norm at most ``max_i w_i bound``, the coordinates of the verb's reply."""
    w = np.asarray(weights, dtype=np.float64)
    clients = session.clients
    dim = math.prod(get(verb).shape(clients.n_params, clients.n_features, request))
    return verb_spec(verb, float(np.max(w * np.asarray(sensitivity, dtype=np.float64))), float(np.max(w)) * bound, dim,
                     mu, clients.n_clients, session.secure, int(np.sum(session.sizes)),
                     clients.n_params // clients.n_features)


def mean_noise_sd(spec: SkellamSpec, weights: np.ndarray, answered: np.ndarray) -> float:
    """Per-coordinate sd of the noise of a secure mean (:func:`secure_mean`) over the sites ``answered``: the sum's
    ``sqrt(spec.variance(n))`` (its Skellam noise and the rounding errors) over their weight ``sum_i w_i``."""
    answered = np.asarray(answered, dtype=bool)
    denominator = float(np.asarray(weights, dtype=np.float64)[answered].sum())
    return math.sqrt(spec.variance(int(np.count_nonzero(answered)))) / denominator


def secure_mean(session, verb: str, *, weights: np.ndarray, spec: SkellamSpec, **request) -> np.ndarray:
    """The weighted mean ``sum_i w_i s_i / sum_i w_i`` over the surviving sites, learnt through their secure sum.

    Raises :class:`SecureAggregationRefused` (nothing recorded, nothing decoded) when fewer than
    ``spec.min_surviving`` sites answered; else records the sum's release (the survivors' sensitivity, the sd of
    their summed noise ``gamma sqrt(2 n lam)``) and applies the fit's failure policy to sites that failed.
    """
    total, denominator = _secure_sum(session, verb, weights, spec, request, mean=True)
    return total / denominator


def secure_total(session, verb: str, *, spec: SkellamSpec, sensitivity: float = 1.0, **request) -> float:
    """The sum over the surviving sites of a secure scalar ``verb`` (the counts ``secure_count_at_most``,
    ``secure_column_count``, ``secure_count_clipped``: sensitivity 1; ``secure_pearson_sum``), weight 1 each, as
    :func:`secure_mean` learns and records it."""
    m = session.clients.n_clients
    return float(_secure_sum(session, verb, np.ones(m), spec, dict(request, sensitivity=np.full(m, sensitivity)),
                             mean=False)[0][0])


def _secure_sum(session, verb: str, weights, spec: SkellamSpec, request: dict, mean: bool) -> tuple[np.ndarray, float]:
    """The decoded sum of the survivors' messages and what the server divides it by: the survivors' weight ``sum_i
    w_i`` for a mean (:func:`secure_mean`), 1 for a sum; the release is recorded with that publication weight
    ``1 / divisor`` for each survivor (the published value is ``sum_i r_i / divisor``)."""
    reply = getattr(session.clients, verb)(weights=weights, spec=spec, **request)
    answered = reply.answered
    n = int(np.count_nonzero(answered))
    if n < spec.min_surviving:
        raise SecureAggregationRefused(
            f"secure round {request.get('stage', verb)!r}: {n} site(s) answered, fewer than min_surviving = "
            f"{spec.min_surviving}; the sum is not unmasked (its noise would fall short of the declared guarantee).")
    divisor = float(np.asarray(weights, dtype=np.float64)[answered].sum()) if mean else 1.0
    values = session.channel.receive(Reply(reply.values, (summed_release(reply, spec),), answered, reply.failed,
                                           reply.leak, reply.error),
                                     weights=answered / (divisor if divisor > 0 else 1.0))
    if not divisor > 0:
        raise ClientFailureError("no site with a positive weight answered this secure round.")
    return decode(values[answered], spec), divisor
