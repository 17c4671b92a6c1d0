"""Exact accounting of Poisson-subsampled Gaussian compositions (privacy loss distributions).

Two privacy units, two accountants
----------------------------------
**Record-level units** (the core paper): one row of one client's data. The guarantee a client
gets is a guarantee *towards the server*, and the server knows which clients took part in each
round, so sampling clients does **not** amplify it: every release is a plain Gaussian mechanism
``N(0, sigma^2)`` on a statistic of L2 sensitivity ``Delta``, i.e. ``mu = Delta / sigma``-GDP, and
``k`` of them compose *exactly* to ``sqrt(mu_1^2 + ... + mu_k^2)``-GDP (Dong, Roth & Su 2022,
Corollary 3.3). :mod:`privfedstat.privacy.gdp` does that arithmetic and the ledger applies it; no
accountant from this module is involved.

**Client-level units**: a client's whole dataset (DP-FedAvg of McMahan et al. 2018,
Fed-alpha-NormEC). Each round the server includes every client independently with probability
``q`` (Poisson participation) and releases the sum of the participants' clipped updates, each in
the ball of radius 1 after dividing by the clip, plus ``N(0, z^2)`` noise, ``z`` the *noise
multiplier* (noise sd per radius of that ball: ``2 sigma / Delta`` for a release of replacement
sensitivity ``Delta``). Towards an observer who sees only the released aggregates, not who
participated, the subsampling amplifies privacy. The ``T``-fold composition of this
Poisson-subsampled Gaussian mechanism is not GDP, and its ``(epsilon, delta)`` curve has no closed
form: this module computes it with the privacy loss distribution (PLD) accountant of
``dp-accounting`` (:class:`dp_accounting.pld.PLDAccountant`,
``PoissonSampledDpEvent(q, GaussianDpEvent(z))`` composed ``T`` times). Its discretization of the
privacy loss is *pessimistic* (the library's default): the reported epsilon is an upper bound on
the true one, tighter as ``value_discretization_interval`` shrinks (about 1e-5 relative at the
default 1e-4).

Neighbouring relation
---------------------
The package's unit is *replaced*, not added or removed: two datasets are neighbours when one
client's whole dataset is swapped for another (as one row is swapped at record level). Every
epsilon here is therefore computed under ``relation="replace"`` (dp-accounting's
``NeighboringRelation.REPLACE_ONE``): the worst pair is a contribution ``x`` against the antipodal
``-x``, ``(1-q) N(0, z^2) + q N(1, z^2)`` against ``(1-q) N(0, z^2) + q N(-1, z^2)``. At ``q = 1``
it is exactly the GDP of the server's view, ``2 sqrt(T) / z``. ``relation="add_remove"`` (one
client's data added or removed; the convention of Opacus and of most published DP-FedAvg numbers)
is offered to compare with those: for the same mechanism its epsilon is smaller, by a factor of
about 1.5 to 2.2 at common ``q``, ``z``, ``T`` (2 and more without sampling; e.g. 7.05 against
10.52 at ``q = 0.1``, ``z = 1``, ``T = 100``, ``delta = 1e-5``).

Two cases need no PLD. Without subsampling (every ``q = 1``) the composition *is* GDP: blocks
``(z_j, 1, T_j)`` compose exactly to ``mu = sqrt(sum_j T_j / z_j^2)``-GDP (Corollary 3.3), whose
``(epsilon, delta)`` curve is exact (:func:`privfedstat.privacy.gdp.epsilon_from_mu`); that is
used, and it is instantaneous at any epsilon. With a noise multiplier below :data:`PLD_MIN_NOISE`
the PLD's privacy-loss range grows like ``1 / z^2`` (a minute per epsilon at ``z = 0.05``), so
such a composition is accounted as if nothing were subsampled: Poisson subsampling only lowers
the privacy loss, so this is an upper bound (it forgoes the amplification, small at such low
noise).

Why never a CLT/GDP approximation
---------------------------------
The central limit theorem of Bu, Dong, Long & Su (2020) says the composition is approximately
``mu_clt``-GDP with ``mu_clt = q * sqrt(T * (exp(1 / z^2) - 1))``. That is an *approximation*, and
it errs on the unsafe side for realistic parameters: at ``q = 0.1``, ``z = 1``, ``T = 100``,
``delta = 1e-5`` under add/remove (the relation it is stated for) it gives ``epsilon ~ 6.01`` while
the PLD upper bound is ``epsilon ~ 7.05``.
Reporting it would understate the privacy loss, so this package never uses it for a subsampled
epsilon.

References
----------
Dong, J., Roth, A. and Su, W. J. (2022). Gaussian differential privacy. JRSS-B 84(1), 3-37.
Bu, Z., Dong, J., Long, Q. and Su, W. J. (2020). Deep learning with Gaussian differential
privacy. Harvard Data Science Review 2(3).
Koskela, A., Jalko, J. and Honkela, A. (2020). Computing tight differential privacy guarantees
using FFT. AISTATS.
Doroshenko, V., Ghazi, B., Kamath, P., Kumar, R. and Manurangsi, P. (2022). Connect the dots:
tighter discrete approximations of privacy loss distributions. PETS.
McMahan, H. B., Ramage, D., Talwar, K. and Zhang, L. (2018). Learning differentially private
recurrent language models. ICLR.
"""

from __future__ import annotations

import functools
import math
import operator
from collections.abc import Iterable

import dp_accounting
from dp_accounting.pld import PLDAccountant

from .gdp import delta_from_mu, epsilon_from_mu, mu_from_epsilon_delta

__all__ = [
    "RELATIONS",
    "subsampled_gaussian_epsilon",
    "subsampled_gaussian_delta",
    "noise_multiplier_for_epsilon",
    "heterogeneous_epsilon",
]

_Events = tuple[tuple[float, float, int], ...]

#: neighbouring relations of the accountant: the package's unit is replaced ("replace"); "add_remove" compares
#: with libraries that add or remove a unit
RELATIONS = {
    "replace": dp_accounting.NeighboringRelation.REPLACE_ONE,
    "add_remove": dp_accounting.NeighboringRelation.ADD_OR_REMOVE_ONE,
}
#: compositions with a noise multiplier below this are accounted without subsampling (exact GDP: an upper bound)
PLD_MIN_NOISE = 0.5
#: GDP parameter of one unsubsampled round per unit of 1 / z under each relation (a replaced contribution moves
#: the sum by the ball's diameter 2, an added or removed one by its radius 1)
_GDP_SCALE = {"replace": 2.0, "add_remove": 1.0}


# --------------------------------------------------------------------------- validation
def _open_unit(x: float, name: str) -> float:
    x = float(x)
    if not 0 < x < 1:
        raise ValueError(f"{name} must lie in (0, 1), got {x}.")
    return x


def _positive_finite(x: float, name: str) -> float:
    x = float(x)
    if not (x > 0 and math.isfinite(x)):
        raise ValueError(f"{name} must be > 0 and finite, got {x}.")
    return x


def _event(noise_multiplier: float, sampling_rate: float, steps: int) -> tuple[float, float, int]:
    z = _positive_finite(noise_multiplier, "noise_multiplier")
    q = float(sampling_rate)
    if not 0 < q <= 1:
        raise ValueError(f"sampling_rate must lie in (0, 1], got {q}.")
    if isinstance(steps, bool):
        raise ValueError(f"steps must be an integer >= 1, got {steps!r}.")
    try:
        t = operator.index(steps)
    except TypeError:
        raise ValueError(f"steps must be an integer >= 1, got {steps!r}.") from None
    if t < 1:
        raise ValueError(f"steps must be an integer >= 1, got {t}.")
    return z, q, t


def _relation(relation: str) -> str:
    if relation not in RELATIONS:
        raise ValueError(f"relation must be one of {sorted(RELATIONS)}, got {relation!r}.")
    return relation


def _gdp_mu(events: _Events, relation: str) -> float:
    """GDP parameter of unsubsampled blocks ``(z_j, ., T_j)``: ``c sqrt(sum_j T_j / z_j^2)``, c = 2 (replace) or 1."""
    return _GDP_SCALE[relation] * math.sqrt(math.fsum(t / (z * z) for z, _, t in events))


def _events(events: Iterable[tuple[float, float, int]]) -> _Events:
    out = []
    for e in events:
        if len(e) != 3:
            raise ValueError(f"each event must be (noise_multiplier, sampling_rate, steps), got {e!r}.")
        out.append(_event(*e))
    if not out:
        raise ValueError("events must hold at least one (noise_multiplier, sampling_rate, steps) block.")
    return tuple(out)


# --------------------------------------------------------------------------- the PLD accountant
def _accountant(events: _Events, relation: str, value_discretization_interval: float) -> PLDAccountant:
    accountant = PLDAccountant(RELATIONS[relation], value_discretization_interval=value_discretization_interval)
    for z, q, t in events:
        accountant.compose(dp_accounting.PoissonSampledDpEvent(q, dp_accounting.GaussianDpEvent(z)), t)
    return accountant


# The scalar results are cached, not the accountants: a PLD holds up to millions of floats.
@functools.lru_cache(maxsize=1024)
def _epsilon(events: _Events, delta: float, relation: str, value_discretization_interval: float) -> float:
    return float(_accountant(events, relation, value_discretization_interval).get_epsilon(delta))


@functools.lru_cache(maxsize=1024)
def _delta(events: _Events, epsilon: float, relation: str, value_discretization_interval: float) -> float:
    return float(_accountant(events, relation, value_discretization_interval).get_delta(epsilon))


# --------------------------------------------------------------------------- public API
def heterogeneous_epsilon(
    events: Iterable[tuple[float, float, int]],
    delta: float,
    *,
    relation: str = "replace",
    value_discretization_interval: float = 1e-4,
) -> float:
    """Epsilon of a composition of several Poisson-subsampled Gaussian blocks, in one PLD.

    Block ``j`` is ``T_j`` rounds of the Poisson-subsampled Gaussian mechanism with sampling rate
    ``q_j`` and noise multiplier ``z_j`` (e.g. the stages of one fit that use different noise);
    all blocks are composed in a single ``dp_accounting.pld.PLDAccountant``, which is tighter than
    adding the blocks' epsilons.

    Parameters
    ----------
    events : iterable of (float, float, int)
        The blocks ``(z_j, q_j, T_j)``: noise multiplier ``z_j > 0`` (noise sd per radius of the
        ball a unit's contribution lies in), sampling rate ``q_j`` in (0, 1], number of rounds
        ``T_j >= 1``.
    delta : float
        Target delta, in (0, 1).
    relation : {"replace", "add_remove"}, default "replace"
        Neighbouring relation: one unit replaced (the package's) or added/removed (see the module
        docstring).
    value_discretization_interval : float, default 1e-4
        Grid step of the (pessimistic) privacy-loss discretization; smaller is tighter and slower.

    Returns
    -------
    float
        The smallest epsilon such that the composition is (epsilon, delta)-DP under ``relation``,
        as bounded from above by the pessimistic PLD.

    References
    ----------
    Koskela, Jalko & Honkela (2020); Doroshenko et al. (2022); ``dp-accounting``'s PLD library.
    Without subsampling, or with a noise multiplier below :data:`PLD_MIN_NOISE`, the exact GDP
    composition instead (see the module docstring).
    """
    events = _events(events)
    delta = _open_unit(delta, "delta")
    relation = _relation(relation)
    interval = _positive_finite(value_discretization_interval, "value_discretization_interval")
    if all(q == 1.0 for _, q, _ in events) or any(z < PLD_MIN_NOISE for z, _, _ in events):
        return epsilon_from_mu(_gdp_mu(events, relation), delta)
    return _epsilon(events, delta, relation, interval)


def subsampled_gaussian_epsilon(
    noise_multiplier: float,
    sampling_rate: float,
    steps: int,
    delta: float,
    *,
    relation: str = "replace",
    value_discretization_interval: float = 1e-4,
) -> float:
    """Epsilon of ``T`` rounds of the Poisson-subsampled Gaussian mechanism (PLD accountant).

    Each round includes every unit independently with probability ``q`` and releases a sum of
    contributions in the ball of radius 1 plus ``N(0, z^2)`` noise. ``q = 1`` is the plain Gaussian
    mechanism, whose ``T``-fold composition is exactly ``2 sqrt(T) / z``-GDP under replacement
    (``sqrt(T) / z`` under add/remove), converted exactly (:func:`privfedstat.privacy.gdp.epsilon_from_mu`;
    see :func:`heterogeneous_epsilon`).

    Parameters
    ----------
    noise_multiplier : float
        Noise standard deviation per radius of the ball a unit's contribution lies in (z), > 0.
    sampling_rate : float
        Poisson sampling probability of each unit per round (q), in (0, 1].
    steps : int
        Number of composed rounds (T), >= 1.
    delta : float
        Target delta, in (0, 1).
    relation : {"replace", "add_remove"}, default "replace"
        Neighbouring relation (see :func:`heterogeneous_epsilon`).
    value_discretization_interval : float, default 1e-4
        Grid step of the (pessimistic) privacy-loss discretization.

    Returns
    -------
    float
        Epsilon (an upper bound from the pessimistic PLD) under ``relation``.

    Examples
    --------
    >>> round(subsampled_gaussian_epsilon(1.0, 0.1, 100, 1e-5, relation="add_remove"), 2)
    7.05
    """
    return heterogeneous_epsilon([(noise_multiplier, sampling_rate, steps)], delta, relation=relation,
                                 value_discretization_interval=value_discretization_interval)


def subsampled_gaussian_delta(
    noise_multiplier: float,
    sampling_rate: float,
    steps: int,
    epsilon: float,
    *,
    relation: str = "replace",
    value_discretization_interval: float = 1e-4,
) -> float:
    """Delta of ``T`` rounds of the Poisson-subsampled Gaussian mechanism at a given epsilon.

    The counterpart of :func:`subsampled_gaussian_epsilon`: the smallest delta (an upper bound
    from the pessimistic PLD) such that the composition is (epsilon, delta)-DP.

    Parameters
    ----------
    noise_multiplier, sampling_rate, steps, relation, value_discretization_interval
        As in :func:`subsampled_gaussian_epsilon` (z, q, T, neighbouring relation, grid step).
    epsilon : float
        Target epsilon, > 0 and finite.

    Returns
    -------
    float
        Delta, in [0, 1].
    """
    z, q, t = _event(noise_multiplier, sampling_rate, steps)
    epsilon = _positive_finite(epsilon, "epsilon")
    relation = _relation(relation)
    interval = _positive_finite(value_discretization_interval, "value_discretization_interval")
    if q == 1.0 or z < PLD_MIN_NOISE:  # exact GDP, as in heterogeneous_epsilon
        return delta_from_mu(_gdp_mu(((z, q, t),), relation), epsilon)
    return _delta(((z, q, t),), epsilon, relation, interval)


def noise_multiplier_for_epsilon(
    target_epsilon: float,
    delta: float,
    sampling_rate: float,
    steps: int,
    *,
    relation: str = "replace",
    tol: float = 1e-3,
) -> float:
    """The smallest noise multiplier whose ``T``-round subsampled epsilon is at most the target.

    A bracketing search on ``z`` (as Opacus' ``get_noise_multiplier``, with secant steps in
    log epsilon against log z instead of halving): the bracket is doubled until its upper end
    meets the target, then shrunk until the upper end's epsilon lies within ``tol`` below the
    target. The returned ``z`` always satisfies ``target - tol <= epsilon(z) <= target``, with
    epsilon from :func:`subsampled_gaussian_epsilon` at its default discretization. Without
    subsampling (``q = 1``) ``z = c sqrt(T) / mu`` (c = 2 for replace, 1 for add/remove) with ``mu``
    the GDP parameter of the target,
    exact and instantaneous; when that ``z`` is below :data:`PLD_MIN_NOISE` it is returned for
    every ``q`` (its epsilon is at most the target; the search would build PLDs too wide to be
    quick). The search
    itself runs on a 10x coarser PLD grid (about 10x cheaper; pessimistic, so its epsilons lie
    slightly above) to within ``tol / 2``, then checks, and if need be continues, on the default
    grid. Results are cached per (target, delta, q, T, relation, tol).

    Parameters
    ----------
    target_epsilon : float
        Privacy budget epsilon, > 0 and finite.
    delta : float
        Target delta, in (0, 1).
    sampling_rate : float
        Poisson sampling probability per round (q), in (0, 1].
    steps : int
        Number of composed rounds (T), >= 1.
    relation : {"replace", "add_remove"}, default "replace"
        Neighbouring relation (see :func:`heterogeneous_epsilon`).
    tol : float, default 1e-3
        Accepted shortfall of epsilon below the target, > 0.

    Returns
    -------
    float
        The noise multiplier ``z``.

    Raises
    ------
    ValueError
        For invalid input, or when ``tol`` is finer than the epsilon curve can be resolved (the
        bracket shrinks to machine precision first).
    """
    target = _positive_finite(target_epsilon, "target_epsilon")
    tol = _positive_finite(tol, "tol")
    _event(1.0, sampling_rate, steps)  # validates q and T before any PLD is built
    delta = _open_unit(delta, "delta")
    relation = _relation(relation)
    # without subsampling the composition is c sqrt(T) / z-GDP: z in closed form (raised by 1e-9 relative so that
    # the rounding of mu_from_epsilon_delta never lands above the target); also a valid z for any q <= 1
    full = _GDP_SCALE[relation] * math.sqrt(operator.index(steps)) / mu_from_epsilon_delta(target, delta) * (1.0 + 1e-9)
    if sampling_rate == 1.0 or full < PLD_MIN_NOISE:
        return full  # q < 1 here: the PLD at such low noise is too slow; the amplification is forgone
    return _noise_multiplier(target, delta, float(sampling_rate), operator.index(steps), relation, tol)


#: grid step of the PLDs the search evaluates before the final check at the default 1e-4: about 10x cheaper, and
#: its (pessimistic) epsilons lie within 1e-5 relative above the default's
_SEARCH_INTERVAL = 1e-3


@functools.lru_cache(maxsize=256)
def _noise_multiplier(target: float, delta: float, q: float, steps: int, relation: str, tol: float) -> float:
    """The search of :func:`noise_multiplier_for_epsilon`: on the coarse grid to within ``tol / 2``, then on the
    default grid from that point (one evaluation when it already lies within ``tol`` below the target; else the
    search goes on there, so the guarantee is always the default grid's)."""
    def coarse(z: float) -> float:
        return subsampled_gaussian_epsilon(z, q, steps, delta, relation=relation,
                                           value_discretization_interval=_SEARCH_INTERVAL)

    def fine(z: float) -> float:
        return subsampled_gaussian_epsilon(z, q, steps, delta, relation=relation)

    _, hi = _search(coarse, target, 0.5 * tol, 0.0, 1.0)
    return _search(fine, target, tol, 0.0, hi)[1]


def _search(eps, target: float, tol: float, lo: float, hi: float) -> tuple[float, float]:
    """Double ``hi`` until ``eps(hi) <= target``, then shrink [lo, hi] until ``target - tol <= eps(hi)``.

    The bracket keeps ``eps(lo) > target >= eps(hi)``; each new point is the secant of log epsilon against log z
    (the Illinois rule: an end kept twice has its value halved; the midpoint while lo = 0), about 3x fewer
    evaluations than halving."""
    eps_hi = eps(hi)
    while eps_hi > target:
        lo, hi = hi, 2.0 * hi
        eps_hi = eps(hi)
    f_lo = math.log(eps(lo) / target) if lo > 0 else math.inf
    f_hi, kept = math.log(eps_hi / target) if eps_hi > 0 else -math.inf, 0
    while target - eps_hi > tol:
        mid = 0.5 * (lo + hi)
        if mid <= lo or mid >= hi:
            raise ValueError(
                f"tol={tol} is finer than the epsilon curve resolves: the bracket [{lo}, {hi}] reached "
                f"machine precision with epsilon {eps_hi} (target {target}). Use a larger tol."
            )
        if math.isfinite(f_lo) and math.isfinite(f_hi):
            log_lo, log_hi = math.log(lo), math.log(hi)
            secant = math.exp(log_hi - f_hi * (log_hi - log_lo) / (f_hi - f_lo))
            mid = secant if lo < secant < hi else mid
        eps_mid = eps(mid)
        f_mid = math.log(eps_mid / target) if eps_mid > 0 else -math.inf
        if eps_mid > target:
            lo, f_lo = mid, f_mid
            f_hi, kept = (0.5 * f_hi if kept == 1 else f_hi), 1
        else:
            hi, eps_hi, f_hi = mid, eps_mid, f_mid
            f_lo, kept = (0.5 * f_lo if kept == -1 else f_lo), -1
    return lo, hi
