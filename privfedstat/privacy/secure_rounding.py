"""Per-row quantization for secure aggregation: each row's contribution rounded into a ball, so that the integer
sensitivity is attained exactly.

A site's message is the sum of its rows' contributions ``v_j`` (a weighted mean's terms ``(w_i / n_i) s_j``, or a sum's
terms). Each row is rounded stochastically to the integer lattice of the quantum gamma, ``a_j = floor(v_j / gamma + U)``,
*conditioned* on ``||a_j||_2 <= R_i`` (the row's radius in quanta): the rows whose rounding left the ball are rounded
again with fresh uniforms, at most :data:`PASSES` times, and a row still outside then is rounded toward zero
coordinatewise (which never increases the norm). The site sends ``sum_j a_j`` plus its Skellam share. One row replaced
moves that integer sum by ``a - b`` with both in the ball: ``||a - b||_2 <= 2 R`` whatever the rounding drew, with no
rounding slack, and the pair ``a = (k, ..., k)``, ``b = -a`` (rows on the lattice, rounded to themselves) attains it when
``R = k sqrt(d)``; :func:`row_spec` calibrates the quantum so (docs/guide/secure-aggregation.md, "Accounting").

The radius comes from the public request: a row of a site whose weighted message has L2 sensitivity ``Delta_i`` (one row
replaced: ``2 x`` the row's bound) has radius ``Delta_i / (2 gamma)``, capped at the spec's ``k sqrt(d)``; the ball is
checked in integers (``||a||^2 <= T_i``, :func:`radius_squares`), so the guarantee holds exactly.

Every pass draws uniforms for all of a site's rows (used by the rows still outside), so each row's rounding depends on
its own value and uniforms only: two neighbouring data sets rounded with the same stream differ in the changed row
alone (the replay fuzzer's coupling), and the site's stream advances by the same amount whatever the data.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from .._linalg import row_norm_bounds
from .gdp import epsilon_from_mu
from .secure_noise import MAX_BITS, MAX_CHECKED_LAM, SLACK, SkellamSpec, _calibrated_lam, _modulus_bits, check_round

__all__ = ["row_spec", "radius_squares", "quantize_rows", "round_into_ball", "gap_lambda", "PASSES", "BRACKET_GAP", "GAP_DELTA",
           "WORD_BITS"]

#: the widest modulus (bits) of Flower's SecAgg+ word: it sums the residues modulo ``2^bits`` itself, up to 30 bits
#: (its int32 cast), whatever the number of sites (:func:`privfedstat.flower.secagg.flower_ranges`)
WORD_BITS = 30

#: the smallest row radius (in ``sqrt(d)`` quanta) taken to fit Flower's SecAgg+ word: the resolution of a site message
#: rounded as a whole (``1 / SLACK``); below it the modulus grows instead (up to :data:`MAX_BITS`, in process)
MIN_REACH = int(1 / SLACK)

#: redraws of a row whose rounding left its ball (a row on the sphere stays outside each pass with probability about
#: 1/2, so about ``n 2^-PASSES`` of n clipped rows are rounded toward zero instead: a bias below 1 quantum per 65 536
#: clipped rows)
PASSES = 16

#: the largest gap, per release, between the GDP epsilon of a per-row release and the exact epsilon of its attained
#: balanced pattern that :func:`row_spec` accepts: ``1e-7``, a tenth of the ``1e-6`` accounting target, for fits that
#: compose 10-30 per-row releases (docs/guide/secure-aggregation.md, "Per-row quantization")
BRACKET_GAP = 1e-7
#: the delta at which :data:`BRACKET_GAP` is met (the ledger's default)
GAP_DELTA = 1e-5


def gap_lambda(mu: float, dim: int) -> float:
    """The ``Lambda`` from which a per-row release of budget ``mu`` and ``d = dim`` coordinates keeps its bracket within
    :data:`BRACKET_GAP` at :data:`GAP_DELTA`: ``(0.65 + 0.35 mu) mu eps'(mu) / (sqrt(d) BRACKET_GAP)``.

    The gap falls like ``1 / Lambda``: the exact pattern behaves like GDP at ``mu (1 - a / Lambda)``, so the gap is
    ``a mu eps'(mu) / Lambda``, ``eps'(mu) = phi(-eps / mu + mu / 2) / (e^eps Phi(-eps / mu - mu / 2))`` the slope of
    the GDP conversion; ``a sqrt(d) <= 0.65 + 0.35 mu`` is the measured envelope (``d`` 2-12, ``mu`` 0.1-3, dp-accounting
    at ``1e-5``; docs/guide/secure-aggregation.md, "Per-row quantization", and benchmarks/RESULTS.md)."""
    from scipy.special import log_ndtr
    eps = epsilon_from_mu(mu, GAP_DELTA)
    a = -eps / mu + mu / 2.0
    slope = math.exp(-0.5 * a * a - 0.5 * math.log(2.0 * math.pi) - eps - float(log_ndtr(-eps / mu - mu / 2.0)))
    return (0.65 + 0.35 * mu) * mu * slope / (math.sqrt(dim) * BRACKET_GAP)


def row_spec(sensitivity: float, bound: float, dim: int, mu: float, n_clients: int, min_surviving: int,
             rows: int) -> SkellamSpec:
    """The arithmetic of a secure round whose sites round each row into a ball (:func:`quantize_rows`).

    Parameters
    ----------
    sensitivity : float
        Largest L2 sensitivity ``w_i Delta_i`` of a site's weighted message (message units; one row replaced moves
        it by at most twice the row's bound).
    bound : float
        Largest L1 bound of a coordinate of a site's message, ``max_i sum_j ||v_j||`` (message units), for the modulus.
    dim : int
        Coordinates per message (d).
    mu : float
        Budget of the round: ``2 R D(Lambda) = mu`` for the sum of ``min_surviving`` shares.
    n_clients, min_surviving : int
        Sites asked, and the fewest whose shares are enough.
    rows : int
        Rows of all sites together (how many rounding errors a sum can carry: its variance bound).

    Notes
    -----
    ``R = k sqrt(d)`` with ``k`` the smallest integer whose ``Lambda`` is at least :func:`gap_lambda` (the bracket
    within :data:`BRACKET_GAP`: ``Lambda >= 2 k^2 d / mu^2``), at most the largest whose ``Lambda`` is at most
    :data:`MAX_CHECKED_LAM` (with the central step; 2% less while a steeper step needs more) and whose modulus fits the
    word of Flower's SecAgg+ (so that in-process and deployed fits have the same arithmetic), unless that needs ``k``
    below :data:`MIN_REACH`: then at most :data:`MAX_BITS` bits;
    ``gamma = sensitivity / (2 R)``, integer sensitivities ``Delta_2 = 2 R``
    and ``Delta_1 = 2 k d``. The modulus holds ``n_clients bound / gamma`` plus the noise tail.
    """
    d, m = int(dim), int(n_clients)
    check_round(sensitivity, bound, mu, m, min_surviving)
    reach_l2 = mu * math.sqrt(2.0 * MAX_CHECKED_LAM) * (1.0 - 1e-6)  # the largest l2 whose Lambda is checked
    k = math.floor(reach_l2 / (2.0 * math.sqrt(d)))
    # Lambda = 2 k^2 d c^2 / mu^2 with c = D sqrt(2 Lambda) >= 1: this k reaches gap_lambda
    k = min(k, max(1, math.ceil(mu * math.sqrt(gap_lambda(mu, d) / (2.0 * d)))))
    fits = _word_reach(k, sensitivity, bound, d, mu, m, int(min_surviving))
    k = fits if fits >= MIN_REACH else min(k, MIN_REACH)
    while k >= 1:
        spec = _spec_at(k, sensitivity, bound, d, mu, m, int(min_surviving), int(rows))
        if spec is None:  # a step steeper than the central one needs a Lambda above the checked range: a smaller k
            k = math.floor(k * 0.98)
        else:
            target = WORD_BITS if k > MIN_REACH else MAX_BITS
            if spec.bits <= target:
                return spec
            # the data's reach scales with k: a bit fewer per halving, down to the word where k stays above MIN_REACH
            k = math.floor(k * 2.0 ** (target - spec.bits))
            k = max(k, MIN_REACH) if target < MAX_BITS else k
    raise ValueError(f"the secure round's budget mu = {mu:g} is too small for {d} coordinates (or the messages' bound "
                     f"too large for {MAX_BITS} bits): no per-row radius of at least sqrt(d) quanta fits; give the round "
                     "more budget.")


def _word_reach(k_top: int, sensitivity: float, bound: float, d: int, mu: float, m: int, min_surviving: int) -> int:
    """The largest ``k <= k_top`` whose modulus fits the word (:data:`WORD_BITS`) with ``Lambda`` taken 3% above ``2 k^2
    d / mu^2`` (the calibration's ``c^2`` and a steeper step, without a step check); 0 if none. The bits grow with ``k``
    (the reach ``m bound / gamma`` and ``Lambda`` do): a bisection. :func:`row_spec` checks the spec it returns."""
    def fits(k: int) -> bool:
        lam = 1.03 * 2.0 * k * k * d / (mu * mu)
        return _modulus_bits(m * bound * 2.0 * k * math.sqrt(d) / sensitivity, d, m * lam / min_surviving) <= WORD_BITS

    if fits(k_top):
        return k_top
    lo, hi = 0, k_top  # fits(lo) (or lo = 0), not fits(hi)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if fits(mid) else (lo, mid)
    return lo


def _spec_at(k: int, sensitivity: float, bound: float, d: int, mu: float, m: int, min_surviving: int, rows: int
             ) -> SkellamSpec | None:
    """The spec of row radius ``k sqrt(d)``; None where its ``Lambda`` is above the checked range."""
    quantum = sensitivity / (2.0 * k * math.sqrt(d))
    l2 = 2.0 * k * math.sqrt(d)
    try:
        lam = _calibrated_lam(l2, mu, min_surviving)
    except ValueError:
        return None
    bits = _modulus_bits(m * bound / quantum, d, m * lam)
    return SkellamSpec(quantum, lam, bits, min_surviving, l2, min(2.0 * k * d, l2 * l2), rounding=False, dim=d,
                       row_reach=k, rows=rows)


def radius_squares(spec: SkellamSpec, sensitivity) -> np.ndarray:
    """Each site's squared row radius in quanta, an integer ``T_i = min(floor((Delta_i / (2 gamma))^2 (1 + 1e-12)),
    k^2 d)`` for its weighted message's sensitivity ``Delta_i = sensitivity[i]`` (the ``1e-12`` absorbs the float
    error of the calibration, which makes the worst site's ``T`` exactly ``k^2 d``)."""
    r = np.asarray(sensitivity, dtype=np.float64) / (2.0 * spec.quantum)
    cap = spec.row_reach * spec.row_reach * int(spec.dim)
    return np.minimum(np.floor(r * r * (1.0 + 1e-12)), cap).astype(np.int64)


def quantize_rows(rows: Sequence[np.ndarray], spec: SkellamSpec, sensitivity, rngs: Sequence[np.random.Generator]
                  ) -> np.ndarray:
    """Each site's sum of its rows rounded into the ball (module docstring), int64 of shape (n_sites, d).

    ``rows[i]`` (n_i, d) are site i's row contributions in message units (their sum is its message), ``sensitivity[i]``
    its weighted message's sensitivity (:func:`radius_squares`), ``rngs[i]`` its stream (one draw of it seeds the
    rounding's generator). A row above its radius (float error of the clipping) is first scaled onto it.
    """
    thresholds = radius_squares(spec, sensitivity)
    out = np.zeros((len(rngs), int(spec.dim)), dtype=np.int64)
    for i, rng in enumerate(rngs):
        x = np.asarray(rows[i], dtype=np.float64).reshape(-1, int(spec.dim)) / spec.quantum
        out[i] = round_into_ball(x, int(thresholds[i]), rng).sum(axis=0)
    return out


def round_into_ball(x: np.ndarray, threshold: int, rng: np.random.Generator) -> np.ndarray:
    """The rows of ``x`` (n, d; in quanta) rounded stochastically into the integer ball ``||a||^2 <= threshold``
    (module docstring), int64 (n, d); one draw of ``rng`` seeds the rounding's generator (also for n = 0). A row above
    the radius (float error of the clipping) is first scaled onto it."""
    gen = np.random.Generator(np.random.PCG64(rng.integers(0, 2**63, size=4)))
    x = np.array(x, dtype=np.float64)
    if x.shape[0] == 0:
        return np.zeros(x.shape, dtype=np.int64)
    limit = math.sqrt(float(threshold))
    norms = row_norm_bounds(x)  # >= the norm for every finite row: the scaled rows are within the radius
    over = norms > limit
    if np.any(over):
        x[over] *= (limit / norms[over])[:, None]
    a = np.floor(x + gen.random(x.shape)).astype(np.int64)
    outside = np.einsum("ij,ij->i", a, a) > threshold
    for _ in range(PASSES - 1):
        if not np.any(outside):
            break
        u = gen.random(x.shape)  # every row's uniforms: a row's rounding depends on its own draws alone
        a[outside] = np.floor(x[outside] + u[outside]).astype(np.int64)
        outside[outside] = np.einsum("ij,ij->i", a[outside], a[outside]) > threshold
    a[outside] = np.trunc(x[outside]).astype(np.int64)  # toward zero: |a_c| <= |x_c|, so ||a|| <= ||x|| <= radius
    return a
