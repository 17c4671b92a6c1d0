"""Exact accounting of one-coordinate secure releases: the privacy profile of Skellam noise against its shift and
dp-accounting's privacy loss distribution from it (docs/guide/secure-aggregation.md, "Exact accounting, and what is not
exact"). A vector release keeps the GDP bound of :mod:`.secure_noise`: no single shift pattern is the worst at every
delta there; :func:`achievable_epsilon` is the lower end of the bracket around its exact epsilon (the epsilon of shift
patterns that messages within the stated sensitivity produce with certainty)."""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence

import numpy as np

from .secure_noise import IntegerNoise, skellam_log_pmf
from .secure_outer import outer_pattern

__all__ = ["skellam_delta", "skellam_pld", "secure_pld", "EXACT_PLD_MAX_MU", "achievable_shifts", "achievable_epsilon",
           "PATTERNS"]

#: the shift patterns of :func:`achievable_shifts`
PATTERNS = ("balanced", "single", "max-and-ones")


def skellam_delta(lam: float, shift: int, epsilons: np.ndarray) -> np.ndarray:
    """The exact privacy profile ``delta(eps) = sum_x (q(x) - e^eps p(x))_+`` of ``Q = Sk(lam) + shift`` against ``P =
    Sk(lam)`` at each of ``epsilons`` (the pair is symmetric: the same with P and Q exchanged).

    The likelihood ratio ``q / p`` increases (log-concave pmf), so the sum runs over ``x >= t``, ``t`` the first ``x``
    whose loss ``log q(x) - log p(x)`` exceeds ``eps``: ``delta = P(Sk >= t - shift) - e^eps P(Sk >= t)``, from the pmf
    (:func:`skellam_log_pmf`) summed in log space over ``|x| <= 40`` sds ``+ 64 + shift`` (the mass beyond is below
    ``1e-300``)."""
    k, eps = int(shift), np.asarray(epsilons, dtype=np.float64)
    if k < 1 or not lam > 0:
        raise ValueError(f"the profile needs lam > 0 and an integer shift >= 1, got lam={lam!r}, shift={shift!r}.")
    reach = int(math.ceil(40.0 * math.sqrt(2.0 * lam))) + 64 + k
    x = np.arange(-reach, reach + 1)
    log_p = skellam_log_pmf(lam, x)
    log_tail = np.logaddexp.accumulate(log_p[::-1])[::-1]  # log P(Sk >= x) on the grid
    ok = np.flatnonzero(np.isfinite(log_p[k:]) & np.isfinite(log_p[:-k]))
    loss = log_p[:-k][ok] - log_p[k:][ok]  # log q(x) - log p(x) at x = x[k + ok], increasing
    t = k + ok[np.minimum(np.searchsorted(loss, eps, side="right"), ok.size - 1)]  # index of the threshold
    beyond = np.searchsorted(loss, eps, side="right") >= ok.size  # eps above every loss: only the grid's tail
    with np.errstate(over="ignore"):
        delta = np.exp(log_tail[t - k]) * -np.expm1(np.minimum(eps + log_tail[t] - log_tail[t - k], 0.0))
    return np.where(beyond, 0.0, delta)


def skellam_pld(lam: float, shifts: Sequence[int], value_discretization_interval: float = 1e-4):
    """dp-accounting's privacy loss distribution of ``Sk(lam)`` against ``Sk(lam) + k`` per coordinate, composed over
    the coordinates' integer ``shifts``: each coordinate's by pessimistic connect-the-dots (Doroshenko et al. 2022)
    from its exact profile (:func:`skellam_delta`) at every loss of an ``x`` where both pmfs are above ``1e-40`` (rounded
    down and up to the grid; the mass beyond, below about ``1e-35``, goes to the infinite loss or to the lowest point:
    pessimistic). Connect-the-dots errs by far less than ``value_discretization_interval`` per composition (about
    ``4e-9`` in epsilon per composition at ``1e-4``, measured on Gaussians)."""
    from dp_accounting.pld import pld_pmf
    from dp_accounting.pld.privacy_loss_distribution import PrivacyLossDistribution
    vdi, pld = float(value_discretization_interval), None
    for k, count in sorted(Counter(int(abs(s)) for s in shifts if s).items()):
        reach = int(math.ceil(40.0 * math.sqrt(2.0 * lam))) + 64 + k
        log_p = skellam_log_pmf(lam, np.arange(-reach, reach + k + 1))
        keep = (log_p[:-k] > -92.0) & (log_p[k:] > -92.0)  # both pmfs above 1e-40 (an interval: log-concave)
        loss = (log_p[:-k][keep] - log_p[k:][keep]) / vdi  # increasing in x
        rounded = np.unique(np.concatenate([np.floor(loss), np.ceil(loss)]))
        one = PrivacyLossDistribution(pld_pmf.create_pmf_pessimistic_connect_dots(
            vdi, rounded.astype(np.int64), skellam_delta(lam, k, rounded * vdi))).self_compose(count)
        pld = one if pld is None else pld.compose(one)
    return pld


#: the largest GDP of the rest for which the ledger builds the exact PLD (its grid grows in mu: 7 s, 0.5 GB at mu = 8,
#: 46 s, 2.8 GB at 32; it lowers epsilon by <= 0.03 of 65 at 8, benchmarks/RESULTS.md "New users (n3)"); above: GDP's
EXACT_PLD_MAX_MU = 16.0


def secure_pld(noises: Sequence[IntegerNoise], mu: float, value_discretization_interval: float = 1e-4):
    """dp-accounting's PLD of a ``mu``-GDP mechanism composed with the one-coordinate secure releases ``noises`` (each at
    its worst shift :attr:`IntegerNoise.exact_shift`, by its exact PLD :func:`skellam_pld`), the Gaussian by
    connect-the-dots too; releases with the same ``(Lambda, shift)`` self-composed."""
    from dp_accounting.pld.privacy_loss_distribution import from_gaussian_mechanism, identity
    vdi = float(value_discretization_interval)
    pld = from_gaussian_mechanism(1.0 / mu, value_discretization_interval=vdi, use_connect_dots=True) if mu > 0 \
        else identity(vdi)
    for (lam, k), count in Counter((n.lam, n.exact_shift) for n in noises).items():
        if k is None:
            raise ValueError("secure_pld composes one-coordinate releases with noise only (exact_shift not None).")
        pld = pld.compose(skellam_pld(lam, [k], vdi).self_compose(count))
    return pld


def achievable_shifts(noise: IntegerNoise, pattern: str = "balanced") -> tuple[int, ...]:
    """An integer shift pattern ``v`` that two neighbouring messages within the release's stated sensitivity produce
    with certainty: messages on the quantum's grid (stochastic rounding leaves them where they are) that differ by ``v``
    quanta, ``||v||_2 <= R``, ``R = Delta / gamma = Delta_2 - sqrt(d)`` (``Delta_2`` for integer messages, counts, and
    for rows rounded into a ball, :mod:`.secure_rounding`, whose balanced pattern ``(2k, ..., 2k)`` is ``Delta_2``
    itself: a row at ``(k, ..., k)`` replaced by one at ``-(k, ..., k)``).

    ``pattern``: ``"balanced"``, ``floor(R / sqrt(d))`` in every coordinate, one more in as many as fit; ``"single"``,
    ``floor(R)`` in one coordinate; ``"max-and-ones"``, 1 in the other ``d - 1`` coordinates and the most that fits in
    the first. Their PLDs (:func:`skellam_pld`) are the exact privacy of the mechanism for such data, so their epsilon
    is at most the release's (its worst neighbours'). ``R^2`` carries ``1e-12`` relative for the float sum ``Delta_2``
    (the calibration makes ``R / sqrt(d) = 1 / SLACK`` exactly in real arithmetic)."""
    d = int(noise.dim)
    if d < 1:
        raise ValueError("achievable_shifts needs the release's coordinates (IntegerNoise.dim >= 1).")
    reach = noise.l2 - (math.sqrt(d) if noise.rounding else 0.0)
    r2 = reach * reach * (1.0 + 1e-12)
    if pattern == "single" or d == 1:
        return (math.isqrt(int(math.floor(r2))),)
    if pattern == "balanced":
        base = math.isqrt(int(math.floor(r2 / d)))
        raised = min(d, int((r2 - d * base * base) // (2 * base + 1)))
        return (base + 1,) * raised + (base,) * (d - raised)
    if pattern == "max-and-ones":
        return (math.isqrt(int(math.floor(r2 - (d - 1)))),) + (1,) * (d - 1)
    raise ValueError(f"pattern must be one of {PATTERNS}, got {pattern!r}.")


def achievable_epsilon(noises: Sequence[IntegerNoise], delta: float, value_discretization_interval: float = 1e-4,
                       patterns: Sequence[str] = PATTERNS) -> float:
    """A lower bound on the exact epsilon (at ``delta``) of the secure releases ``noises`` composed: for each pattern,
    every release at that achievable shift pattern (:func:`achievable_shifts`; an outer-product release at its attained
    pattern, :func:`~privfedstat.privacy.secure_outer.outer_pattern`), their exact PLDs (:func:`skellam_pld`,
    less dp-accounting's pessimism: about ``4e-9`` per composition and the grid's ``value_discretization_interval``
    per release at most) composed, the largest epsilon over ``patterns``; 0 without releases, inf with one without
    noise."""
    if any(n.lam == 0 for n in noises):
        return math.inf
    best = 0.0
    for pattern in patterns:
        pld = None
        groups = Counter(group for n in noises for group in (outer_pattern(n) if n.outer else
                                                             [(n.lam, achievable_shifts(n, pattern))]))
        for (lam, shifts), count in groups.items():
            one = skellam_pld(lam, shifts, value_discretization_interval).self_compose(count)
            pld = one if pld is None else pld.compose(one)
        if pld is not None:
            best = max(best, float(pld.get_epsilon_for_delta(delta)))
    return best
