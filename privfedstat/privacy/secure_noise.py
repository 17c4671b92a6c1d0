"""Distributed integer noise for secure aggregation: quantization, Skellam noise, its calibration and accounting.

Under secure aggregation the server learns only the sum of the sites' messages. Each site then
adds a *share* of the noise, and the shares must sum to a distribution whose privacy is known:
the Skellam distribution ``Sk(lam, lam) = Poisson(lam) - Poisson(lam)`` (variance ``2 lam``)
is closed under sums, so the sum of ``n`` sites' ``Sk(lam)`` is ``Sk(n lam)`` (Agarwal, Kairouz
& Liu 2021). The messages must be integers for the modular sum of secure aggregation, so each
site first scales its clipped, weighted message ``u_i`` by ``1 / gamma`` (``gamma`` the
*quantum*) and rounds it stochastically (``floor(u / gamma + U)``, ``U`` uniform on [0, 1)).

**Sensitivity of the integer message.** With the same uniforms for two neighbouring data sets,
each coordinate of the rounded messages differs by at most ``|x_j - x'_j| + 1``, so the integer
shift ``v`` has ``||v||_2 <= Delta / gamma + sqrt(d)`` and ``||v||_1 <= sqrt(d) Delta / gamma + d``
(and ``||v||_1 <= ||v||_2^2``, integers); the output is a mixture over the uniforms of shifted
noise, and by joint convexity of the hockey-stick and Renyi divergences the worst coupled pair
bounds it. ``Delta`` is the L2 sensitivity of the weighted real message ``w_i s_i``.

**Accounting.** The release is ``mu``-GDP with ``mu = Delta_2 D(Lambda)`` (:func:`skellam_gdp_step`): one
coordinate's pair ``(Sk, Sk + k)`` has monotone likelihood ratio (the Skellam pmf is log-concave), so its
tradeoff curve is spanned by the threshold tests, and it lies above the Gaussian ``G_{k D}`` when the
Gaussianised tail ``F(x) = Phi^-1(1 - P(Sk >= x))`` rises by at most ``D`` per integer step: ``D`` is its
steepest step, computed for each release's ``Lambda`` wherever the tail is above :data:`TAIL`
(:func:`skellam_steps`); so far always the central one, ``F(1) - F(0) = D_0(Lambda) = 2 sqrt(2)
erfinv(P(Sk(Lambda) = 0)) = (1 + 1 / (12 Lambda) + ...) / sqrt(2 Lambda)`` (:func:`skellam_gdp_mu`;
docs/guide/secure-aggregation.md, "Accounting", says what is proven and what is computed). The coordinates
compose as GDP (Dong, Roth & Su 2022,
Corollary 3.3: ``sqrt(sum_j (k_j D)^2) <= Delta_2 D``) and a mixture over the uniforms keeps it (joint
convexity), so the ledger composes secure releases with the Gaussian ones in GDP and its epsilon is the
exact GDP conversion. :func:`~.secure_rdp.skellam_rdp` (Agarwal, Kairouz & Liu 2021, Theorem 3.5: ``eps(alpha) <=
alpha Delta_2^2 / (4 Lambda) + min((2 alpha Delta_2^2 + 6 Delta_1) / (16 Lambda^2), 3 Delta_1 / (4 Lambda))``,
with ``2 alpha`` for their ``2 alpha - 1``) is the purely analytical bound, about 9% looser in epsilon after the
Renyi conversion (:meth:`~privfedstat.privacy.ledger.PrivacyLedger.renyi_epsilon`). A one-coordinate release's
exact privacy profile is :func:`skellam_delta` at its worst shift :attr:`IntegerNoise.exact_shift`, its PLD
:func:`skellam_pld` (dp-accounting, connect-the-dots); the ledger composes those exactly (:func:`secure_pld`). For
several coordinates no shift pattern is the worst at every delta, so the GDP bound stays (docs, "Exact accounting",
which measures how far it is from the exact epsilon: :meth:`~privfedstat.privacy.ledger.PrivacyLedger.epsilon_bracket`).

**Per-row rounding.** The row verbs round each row's contribution into a ball of radius ``k sqrt(d)`` quanta instead
(:mod:`.secure_rounding`): no rounding slack, ``Delta_2 = 2 k sqrt(d)`` attained by rows on the lattice, one rounding
error per row in the variance (``SkellamSpec.row_reach``, ``rows``); the PSD verbs round each row's root and send the
integer outer products (:mod:`.secure_outer`, ``SkellamSpec.outer``: ``Delta_2 = sqrt(2) K`` attained).

**Dropouts.** Every site's share is calibrated for ``min_surviving`` sites: with ``n >= min_surviving`` survivors the
sum carries ``Sk(n lam)``, at least the declared noise; below it the round is refused.

**Modular sum.** Messages are residues modulo ``2^bits``; the sum decodes to the signed integer in ``[-2^(bits-1),
2^(bits-1))``. :func:`skellam_spec` chooses ``bits`` so that the true sum lies there except with probability at most
:data:`WRAP_PROBABILITY` per round (Bernstein's bound on the Skellam tail, union over coordinates).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

__all__ = ["SkellamSpec", "IntegerNoise", "skellam_spec", "count_spec", "quantize", "add_shares", "encode", "decode",
           "skellam_log_pmf", "skellam_gdp_mu", "skellam_gdp_step",
           "skellam_steps", "SLACK", "WRAP_PROBABILITY", "MAX_BITS", "MAX_CHECKED_LAM", "TAIL",
           "STEP_RESOLUTION", "outer_row_variance", "outer_folds", "check_round"]

#: the rounding slack sqrt(d) is at most this fraction of the integer sensitivity Delta / gamma: the noise sd grows
#: by at most 1 / 128 < 1% for it (each halving of SLACK costs one bit of modulus)
SLACK = 2.0**-7
#: probability per round that the modular sum wraps around (Bernstein's tail bound, union over coordinates)
WRAP_PROBABILITY = 2.0**-40
#: the widest modulus: residues and their sums stay exact in float64 and int64
MAX_BITS = 52
#: the largest Lambda whose Gaussianised steps are computed (0.3-0.9 s; scipy's ive is nan at 2 Lambda = 2e9): a budget
#: needing more gets a coarser quantum (:func:`skellam_spec`)
MAX_CHECKED_LAM = 1e8
MORE_BUDGET = "a larger mu, fewer rounds (n_rounds, n_iter) or aggregation='local' give the round more budget."
#: the steps are checked wherever the Skellam's tail probability is above this (36.4 sds and more): ``exp(-25)`` above
#: the mass where scipy's ive flushes to 0, so that the grid's missing tail is negligible there
TAIL = 1e-290
#: relative float resolution of the computed steps (their log-space tail sums; measured: at most 1.5e-9 up to
#: Lambda = 5e8, docs/guide/secure-aggregation.md)
STEP_RESOLUTION = 2e-9


@dataclass(frozen=True)
class SkellamSpec:
    """The arithmetic of one secure-aggregation round, the same for every site (public).

    Attributes
    ----------
    quantum : float
        gamma: a message ``u`` is sent as the integer ``round(u / gamma)`` (stochastic rounding).
    lam : float
        Each site's Skellam parameter: its noise share is ``Sk(lam, lam)`` per coordinate (variance ``2 lam``).
    bits : int
        The modulus is ``2^bits``.
    min_surviving : int
        Fewest sites whose shares make the declared noise (``min_surviving lam`` is the declared sum's parameter).
    l2, l1 : float
        Integer L2 and L1 sensitivity of the worst site's message (rounding slack included).
    rounding : bool, default True
        The site messages are real and rounded stochastically to the quantum (:func:`skellam_spec`: rounding slack in
        the sensitivities); False: they are integers already (counts, :func:`count_spec`), or sums of rows rounded into
        a ball (``row_reach``), without rounding slack.
    dim : int
        Coordinates per message (d; 0: not stated, as for a spec built by hand).
    row_reach : int, default 0
        k: each row is rounded into the ball of radius ``k sqrt(d)`` quanta
        (:func:`~privfedstat.privacy.secure_rounding.row_spec`); 0: the site's message is rounded as a whole.
    rows : int, default 0
        With ``row_reach`` or ``outer``: the rows of all sites, each with its rounding error (the variance bound).
    outer : int, default 0
        K: each row's root is rounded into the ball ``||a||^2 <= K`` and the site sends its rows' integer outer products
        ``sum_j a_j a_j^T``, off-diagonal entries doubled (:mod:`~privfedstat.privacy.secure_outer`); 0: not an outer
        product release.
    blocks : int, default 1
        With ``outer``: g, each site sends ``g`` such matrices, of its rows ``j`` with ``j mod g = b``, each with its full
        noise share, and the server adds the block sums (:func:`decode`): a word that cannot hold the sum of all rows
        holds a block's.
    """

    quantum: float
    lam: float
    bits: int
    min_surviving: int
    l2: float
    l1: float
    rounding: bool = True
    dim: int = 0
    row_reach: int = 0
    rows: int = 0
    outer: int = 0
    blocks: int = 1

    def __post_init__(self) -> None:
        if not (self.quantum > 0 and math.isfinite(self.quantum)):
            raise ValueError(f"quantum must be positive and finite, got {self.quantum!r}.")
        if not (self.lam >= 0 and math.isfinite(self.lam)):
            raise ValueError(f"lam must be non-negative and finite, got {self.lam!r}.")
        if not 2 <= int(self.bits) <= MAX_BITS:
            raise ValueError(f"bits must lie in [2, {MAX_BITS}], got {self.bits!r}.")
        if int(self.min_surviving) < 1:
            raise ValueError(f"min_surviving must be a positive integer, got {self.min_surviving!r}.")
        if not (int(self.blocks) == 1 or int(self.blocks) > 1 and self.outer):
            raise ValueError(f"blocks must be 1, or a larger integer for an outer-product release; got {self.blocks!r}.")

    def noise(self, shares: int) -> IntegerNoise:
        """The integer noise of a sum over ``shares`` sites' messages."""
        return IntegerNoise(self.quantum, self.lam * shares, self.l2, self.l1, int(shares), int(self.dim), self.rounding,
                            int(self.rows), int(self.outer), int(self.blocks))

    def variance(self, shares: int) -> float:
        """Upper bound on the per-coordinate variance, in message units, of the sum over ``shares`` sites of the
        rounding errors (at most 1/4 each: one per site, or one per row with ``row_reach``; none for integer messages)
        and the noise (2 lam each): :attr:`IntegerNoise.variance` of :meth:`noise`."""
        return self.noise(shares).variance


@dataclass(frozen=True)
class IntegerNoise:
    """What a ledger keeps of a secure release: the summed Skellam noise and the integer sensitivities.

    Attributes
    ----------
    quantum : float
        gamma (the release's unit, in message units).
    lam : float
        Lambda: parameter of the summed noise ``Sk(Lambda, Lambda)`` (variance ``2 Lambda``, integer units).
    l2, l1 : float
        Integer L2 and L1 sensitivities of the worst site's message.
    shares : int
        Number of sites whose noise is in the sum (the survivors).
    dim : int
        Coordinates of the release (d; 0: not stated).
    rounding : bool, default True
        The site messages were rounded stochastically to the quantum, rounding slack in ``l2`` and ``l1``
        (:attr:`SkellamSpec.rounding`; False for counts and for rows rounded into a ball).
    rows : int, default 0
        Rows rounded one by one into a ball (:attr:`SkellamSpec.rows`, all sites'): the rounding errors in the sum.
    outer : int, default 0
        K of an outer-product release (:attr:`SkellamSpec.outer`); 0 otherwise.
    blocks : int, default 1
        Blocks of an outer-product release (:attr:`SkellamSpec.blocks`): a neighbour moves one, so the release has the PLD
        of one block (``Lambda``, ``l2``); the decoded sum of the blocks carries ``blocks`` times its noise variance.
    """

    quantum: float
    lam: float
    l2: float
    l1: float
    shares: int
    dim: int = 0
    rounding: bool = True
    rows: int = 0
    outer: int = 0
    blocks: int = 1

    @property
    def variance(self) -> float:
        """Upper bound on the per-coordinate variance of the sum in message units: ``gamma^2 (2 Lambda + e / 4)``,
        the summed Skellam noise and the ``e`` rounding errors (at most 1/4 each): ``e = shares`` for site messages
        rounded as a whole, ``rows`` for rows rounded one by one, none for integer messages; for an outer-product release
        ``rows`` times a row's bound averaged over the coordinates (:func:`outer_row_variance`) and ``blocks`` noises."""
        if self.outer:
            return self.quantum**2 * (2.0 * self.lam * self.blocks + self.rows * outer_row_variance(self.outer, self.dim))
        errors = (self.shares if self.rounding else 0) + self.rows
        return self.quantum**2 * (2.0 * self.lam + 0.25 * errors)

    @property
    def exact_shift(self) -> int | None:
        """The worst integer shift of a one-coordinate release within its stated sensitivity, ``floor(Delta_2)`` (``1e-12``
        relative guards the float sum ``Delta_2 = Delta / gamma + 1``, at least ``ceil(Delta / gamma)``, the most the
        stochastic rounding moves one coordinate, and one more where ``Delta / gamma`` is an integer, as the calibration
        makes it: a margin for the float error of ``u / gamma``): its exact privacy loss distribution is
        :func:`skellam_pld`; None for ``d > 1`` (or not stated), whose worst shift pattern is not known
        (docs/guide/secure-aggregation.md, "Accounting")."""
        return int(math.floor(self.l2 * (1.0 + 1e-12))) if self.dim == 1 and self.lam > 0 else None

    @property
    def gdp_mu(self) -> float:
        """``Delta_2 D(Lambda)``: the release is ``gdp_mu``-GDP (:func:`skellam_gdp_step`); ``D(Lambda) sqrt(2 Lambda)``
        exceeds 1 by about ``1 / (12 Lambda)``."""
        step = skellam_gdp_step(self.lam)  # inf below Lambda ~ 3e-17 (P(Sk = 0) = 1 in floats): the log-space steps
        return self.l2 * (float(np.max(skellam_steps(self.lam))) if math.isinf(step) and self.lam > 0 else step)

    @property
    def gdp_factor(self) -> float:
        """``D(Lambda) sqrt(2 Lambda)``: the GDP parameter over ``Delta_2 / sd`` (1 + about ``1 / (12 Lambda)``; 1
        without noise, where ``Delta_2 / sd`` is already infinite)."""
        return 1.0 if self.lam == 0 else skellam_gdp_step(self.lam) * math.sqrt(2.0 * self.lam)

    def colluding(self, t: int) -> IntegerNoise:
        """The noise left when ``t`` sites share their noise with the server (they subtract it): ``shares - t`` shares."""
        left = self.shares - int(t)
        lam = self.lam * max(left, 0) / self.shares if self.shares else 0.0
        return IntegerNoise(self.quantum, lam, self.l2, self.l1, max(left, 0), self.dim, self.rounding, self.rows,
                            self.outer, self.blocks)


def outer_row_variance(radius: int, dim: int) -> float:
    """Bound on one row's rounding variance of an outer-product release (:attr:`SkellamSpec.outer` ``K``), summed over
    the ``d = dim = p (p + 1) / 2`` coordinates of ``sym_to_vec`` and divided by ``d``, in quanta^2: with ``a = x + e``
    (``x`` the scaled root, ``||x||^2 <= K``, ``e`` its stochastic rounding error, variance ``<= 1/4`` per
    coordinate), ``Var(a_k^2) <= (|x_k| + 1/2)^2`` and ``2 Var(a_k a_l) <= (x_k^2 + x_l^2) / 2 + 1/8``, whose sum is at
    most ``(p + 1) K / 2 + sqrt(p K) + p / 4 + p (p - 1) / 16`` (docs/guide/secure-aggregation.md, "Per-row outer
    products")."""
    p, k = int(round((math.sqrt(8 * int(dim) + 1) - 1) / 2)), float(radius)
    return ((p + 1) * k / 2.0 + math.sqrt(p * k) + p / 4.0 + p * (p - 1) / 16.0) / int(dim)


def check_round(sensitivity: float, bound: float, mu: float, n_clients: int, min_surviving: int) -> None:
    """Refuse a secure round whose sensitivity, message bound, budget or fewest survivors no integer noise can serve."""
    if not (sensitivity > 0 and math.isfinite(sensitivity) and bound >= 0 and math.isfinite(bound)):
        raise ValueError("secure aggregation needs a positive, finite sensitivity and a finite message bound (set a finite "
                         "clipping bound).")
    if not (mu > 0 and math.isfinite(mu)):
        raise ValueError(f"secure aggregation needs a finite budget mu > 0, got {mu!r}.")
    if not 1 <= int(min_surviving) <= int(n_clients):
        raise ValueError(f"min_surviving must lie in [1, {n_clients}] (the number of sites), got {min_surviving!r}.")


def skellam_spec(sensitivity: float, bound: float, dim: int, mu: float, n_clients: int,
                 min_surviving: int) -> SkellamSpec:
    """The quantum, noise share and modulus of a secure round with budget ``mu`` (as GDP parameter of the sum).

    Parameters
    ----------
    sensitivity : float
        Largest L2 sensitivity ``w_i Delta_i`` of a site's weighted message (message units).
    bound : float
        Largest L2 norm of a site's weighted message ``w_i s_i`` (after clipping), for the modulus.
    dim : int
        Coordinates per message (d).
    mu : float
        Budget of the round: ``Delta_2 D(Lambda) = mu`` (:func:`skellam_gdp_mu`) for the sum of ``min_surviving`` shares.
    n_clients, min_surviving : int
        Sites asked, and the fewest whose shares are enough (the round is refused below it).

    Notes
    -----
    ``gamma = SLACK Delta / sqrt(d)`` makes the rounding slack ``sqrt(d)`` a fraction ``SLACK`` of ``Delta / gamma``:
    ``Delta_2 = (1 + SLACK) Delta / gamma``; where that would need ``Lambda`` above :data:`MAX_CHECKED_LAM`, ``gamma``
    is the finest whose ``Lambda`` is at most it (``Delta_2 = mu sqrt(2 MAX_CHECKED_LAM)``, up to ``1e-6``), the slack
    a larger fraction (refused above 1/4). The modulus holds ``sum_i (||u_i||_inf / gamma + 1)`` plus the noise tail
    ``t`` with ``2 d exp(-t^2 / (2 (2 Lambda_max + t / 3))) <= WRAP_PROBABILITY`` (Bernstein; ``Lambda_max = n_clients
    lam``, every site surviving).
    """
    d, m, k = int(dim), int(n_clients), int(min_surviving)
    check_round(sensitivity, bound, mu, m, k)
    quantum = SLACK * sensitivity / math.sqrt(d)
    reach_l2 = mu * math.sqrt(2.0 * MAX_CHECKED_LAM) * (1.0 - 1e-6)  # the largest l2 whose Lambda is checked
    if sensitivity / quantum + math.sqrt(d) > reach_l2:  # a coarser quantum keeps Lambda where its steps are checked
        if reach_l2 < 5.0 * math.sqrt(d):
            raise ValueError(f"the secure round's budget mu = {mu:g} is too small for {d} coordinates (integer noise Lambda "
                             f"above {MAX_CHECKED_LAM:g} or a rounding slack above 1/4 of the sensitivity): {MORE_BUDGET}")
        quantum = sensitivity / (reach_l2 - math.sqrt(d))
    l2 = sensitivity / quantum + math.sqrt(d)
    l1 = min(math.sqrt(d) * sensitivity / quantum + d, l2 * l2)
    lam = _calibrated_lam(l2, mu, k)
    bits = _modulus_bits(m * (bound / quantum + 1.0), d, m * lam)
    if bits > MAX_BITS:
        raise ValueError(f"the secure sum needs {bits} bits (> {MAX_BITS}): the messages' bound {bound:g} is too large "
                         f"for their sensitivity {sensitivity:g}; clip the messages more tightly.")
    return SkellamSpec(quantum, lam, bits, k, l2, l1, dim=d)


@lru_cache(maxsize=256)
def count_spec(mu: float, n_clients: int, min_surviving: int, bound: int) -> SkellamSpec:
    """The arithmetic of a secure count: each site's number of rows (of at most ``bound``) meeting a condition.

    A count is an integer and one row replaced moves it by at most 1, so it is sent as it is (quantum 1, no rounding:
    integer sensitivities ``Delta_2 = Delta_1 = 1``) with its Skellam share, calibrated as :func:`skellam_spec` does
    (``D(min_surviving lam) = mu``); the modulus holds ``n_clients (bound + 1)`` plus the noise tail.
    """
    m, k = int(n_clients), int(min_surviving)
    if not (mu > 0 and math.isfinite(mu)):
        raise ValueError(f"secure aggregation needs a finite budget mu > 0, got {mu!r}.")
    if not 1 <= k <= m:
        raise ValueError(f"min_surviving must lie in [1, {m}] (the number of sites), got {min_surviving!r}.")
    lam = _calibrated_lam(1.0, mu, k)
    bits = _modulus_bits(m * (float(bound) + 1.0), 1, m * lam)
    if bits > MAX_BITS:
        raise ValueError(f"a secure count of up to {bound} rows per site needs {bits} bits (> {MAX_BITS}).")
    return SkellamSpec(1.0, lam, bits, k, 1.0, 1.0, rounding=False, dim=1)


def _modulus_bits(reach: float, dim: int, lam_max: float) -> int:
    """Bits of a modulus whose signed range holds ``reach`` (the largest |sum| of the messages, in quanta) plus the
    summed noise's tail ``t``: ``2 d exp(-t^2 / (2 (2 Lambda_max + t / 3))) <= WRAP_PROBABILITY`` (Bernstein)."""
    log_term = math.log(2.0 * dim / WRAP_PROBABILITY)
    tail = log_term / 3.0 + math.sqrt(log_term * (log_term / 9.0 + 4.0 * lam_max))
    return max(2, math.ceil(math.log2(reach + tail + 1.0)) + 1)


def skellam_gdp_mu(lam: float) -> float:
    """``D_0(Lambda) = 2 sqrt(2) erfinv(P(Sk(Lambda) = 0))``, the central step ``F(1) - F(0)`` of the Gaussianised tail
    ``F(x) = Phi^-1(1 - P(Sk >= x))`` (``F(0) = -F(1)`` by symmetry, ``Phi^-1((1 + p) / 2) = sqrt(2) erfinv(p)``); inf
    for ``Lambda = 0`` (no noise). The release's GDP constant is the steepest step, :func:`skellam_gdp_step`.
    """
    from scipy.special import erfinv, ive
    if lam == 0:
        return math.inf
    z = 2.0 * lam
    # P(Sk = 0) = exp(-z) I_0(z); scipy's ive returns nan from z of about 2^31 on, so above 1e4 its asymptotic series
    # (A&S 9.7.1; the first omitted term is below 1e-17 relative there, as close as ive agrees with it)
    p0 = float(ive(0, z)) if z < 1e4 else (1 + 1 / (8 * z) + 9 / (128 * z * z) + 225 / (3072 * z**3)) / math.sqrt(
        2 * math.pi * z)
    return 2.0 * math.sqrt(2.0) * float(erfinv(p0))


@lru_cache(maxsize=4)  # up to 4 MB each (Lambda = 1e8); skellam_gdp_step keeps their maximum
def skellam_steps(lam: float) -> np.ndarray:
    """Upper bounds on the unit steps ``F(x + 1) - F(x)``, ``x = 0, 1, ...``, of the Gaussianised tail of ``Sk(Lambda)``
    at every ``x`` whose tail ``P(Sk >= x)`` is above :data:`TAIL` (the steps at ``x < 0`` mirror them:
    ``F(-x) = -F(x + 1)``); read-only, the last few cached.

    The pmf ``exp(-2 Lambda) I_x(2 Lambda)`` (scipy's ``ive``) is summed in log space from the last integer ``N`` where it
    is above ``exp(-700)`` (where ``ive`` flushes to 0); the mass beyond ``N`` is at most ``p(N) r / (1 - r)``, ``r = p(N) /
    p(N - 1)`` (log-concave pmf: the ratios decrease), at most about ``1e-11`` of the tail wherever that is above :data:`TAIL`;
    each step is bounded with the tail at ``x`` raised by it and the tail at ``x + 1`` not.
    """
    from scipy.special import ive, ndtri_exp
    z = 2.0 * lam
    if not 0 < lam <= MAX_CHECKED_LAM:
        raise ValueError(f"the steps of Sk(Lambda) are computed for 0 < Lambda <= {MAX_CHECKED_LAM:g}, got {lam!r}.")
    x = np.arange(0.0, math.ceil(40.0 * math.sqrt(z)) + 64.0)
    with np.errstate(divide="ignore"):
        log_pmf = np.log(ive(x, z))
    log_pmf = log_pmf[:int(np.flatnonzero(log_pmf > -700.0)[-1]) + 1]  # ive is 0 from about exp(-701) on
    log_r = log_pmf[-1] - log_pmf[-2] if log_pmf.size > 1 else -math.inf  # >= every later log ratio
    log_beyond = log_pmf[-1] + log_r - math.log(-math.expm1(log_r))
    log_tail = np.logaddexp.accumulate(log_pmf[::-1])[::-1][1:]  # the grid's part of log P(Sk >= x), x = 1, 2, ...
    keep = log_tail > math.log(TAIL)
    lo, hi = log_tail[keep], np.logaddexp(log_tail[keep], log_beyond)
    f_hi = -ndtri_exp(lo)  # F(x), x = 1, 2, ..., from above (less tail) and from below (more tail)
    f_lo = -ndtri_exp(hi)
    steps = np.concatenate([[2.0 * f_hi[0]], f_hi[1:] - f_lo[:-1]])
    steps.setflags(write=False)
    return steps


@lru_cache(maxsize=4096)
def skellam_gdp_step(lam: float) -> float:
    """``D(Lambda)``: ``Sk(Lambda) + v`` against ``Sk(Lambda)`` is ``D ||v||_2``-GDP for integer shifts ``v`` (inf for
    ``Lambda = 0``): the steepest unit step of the Gaussianised tail, checked for this ``Lambda``
    (:func:`skellam_steps`): the exact central step :func:`skellam_gdp_mu` when no step is above it by more than the
    check's float resolution :data:`STEP_RESOLUTION`, the steepest computed step otherwise; above
    :data:`MAX_CHECKED_LAM` (more survivors than a calibration at it counted on), that of ``MAX_CHECKED_LAM``. Cached
    per ``Lambda``."""
    if lam == 0:
        return math.inf
    if lam > MAX_CHECKED_LAM:  # Sk(Lambda) is Sk(MAX_CHECKED_LAM) plus independent noise: post-processing
        return skellam_gdp_step(MAX_CHECKED_LAM)
    central, steepest = skellam_gdp_mu(lam), float(np.max(skellam_steps(lam)))
    return central if steepest <= central * (1.0 + STEP_RESOLUTION) else steepest


def _calibrated_lam(l2: float, mu: float, shares: int) -> float:
    """Each of ``shares`` sites' ``lam`` with ``l2 D(shares lam) = mu`` up to rounding, never above ``mu``.

    First with the central step ``D_0``: the fixed point of ``Lambda = (l2 / mu)^2 c(Lambda)^2 / 2``, ``c = D_0 sqrt(2
    Lambda)`` (1 + about ``1 / (12 Lambda)``, slowly varying: a contraction), raised by ulps until the bound holds; then
    with the steepest step of the ``Lambda`` the sum carries (:func:`skellam_gdp_step`), raised where it is above."""
    base = (l2 / mu) ** 2 / 2.0
    lam = base
    for _ in range(100):
        c = skellam_gdp_mu(lam) * math.sqrt(2.0 * lam)
        if not math.isfinite(c) or abs(base * c * c - lam) <= 1e-15 * lam:
            break
        lam = base * c * c
    step = 4e-16
    while not l2 * skellam_gdp_mu(lam) <= mu:  # doubling steps: ends for any finite mu > 0
        lam, step = lam * (1.0 + step), 2.0 * step
    if lam > MAX_CHECKED_LAM:
        raise ValueError(f"the secure round's budget mu = {mu:g} needs integer noise Lambda = {lam:.3g} above "
                         f"{MAX_CHECKED_LAM:g} (its GDP constant's checked range): {MORE_BUDGET}")
    share, best = lam / shares, math.inf
    for _ in range(64):  # the central step is the steepest wherever it was checked: usually one pass (docs)
        excess = l2 * skellam_gdp_step(share * shares) / mu
        if excess <= 1.0:
            best = min(best, share)
            if excess >= 1.0 - 1e-12:
                return share
        share *= excess * excess * (1.0 + 1e-15)
    if math.isinf(best):
        raise ValueError(f"no Lambda within 64 steps meets the budget mu = {mu:g} (Lambda = {lam:.6g}).")
    return best


def quantize(values: np.ndarray, spec: SkellamSpec, rngs: Sequence[np.random.Generator]) -> np.ndarray:
    """Each site's message ``u_i`` of the rows of ``values`` (n_sites, d) rounded stochastically to the grid of the
    quantum: ``floor(u_i / gamma + U_i)`` (int64), ``U_i`` the next uniforms of site i's stream ``rngs[i]``; an integer
    message (``spec.rounding`` False) as it is (ValueError if it is not an integer multiple of the quantum)."""
    values = np.asarray(values, dtype=np.float64)
    if not spec.rounding:  # integer messages (counts): sent as they are
        x = values / spec.quantum
        if not np.array_equal(x, np.round(x)):
            raise ValueError("a secure count's messages must be integer multiples of its quantum.")
        return x.astype(np.int64)
    out = np.empty(values.shape, dtype=np.int64)
    for i, rng in enumerate(rngs):
        x = values[i] / spec.quantum
        out[i] = np.floor(x + rng.random(x.shape)).astype(np.int64)
    return out


def add_shares(rounded: np.ndarray, spec: SkellamSpec, rngs: Sequence[np.random.Generator]) -> np.ndarray:
    """``(rounded_i + Sk(lam)) mod 2^bits`` per site (int64): each site's Skellam share from its stream ``rngs[i]``."""
    out = np.empty(rounded.shape, dtype=np.int64)
    modulus = 1 << int(spec.bits)
    # an outer release: Sk(2 lam) off the diagonal, in each of its blocks
    lam = spec.lam * np.tile(outer_folds(int(spec.dim)), int(spec.blocks)) if spec.outer else spec.lam
    for i, rng in enumerate(rngs):
        shape = rounded[i].shape
        out[i] = np.mod(rounded[i] + (rng.poisson(lam, shape) - rng.poisson(lam, shape)), modulus)
    return out


def outer_folds(dim: int) -> np.ndarray:
    """1 on the diagonal, 2 off it, in the order of ``sym_to_vec`` (upper triangles, row by row) of ``dim = p (p + 1) /
    2`` coordinates: how many entries of a symmetric matrix each coordinate of an outer-product message sums."""
    p = int(round((math.sqrt(8 * int(dim) + 1) - 1) / 2))
    rows, cols = np.triu_indices(p)
    return np.where(rows == cols, 1.0, 2.0)


def encode(values: np.ndarray, spec: SkellamSpec, rngs: Sequence[np.random.Generator]) -> np.ndarray:
    """Each site's integer message ``(round(u_i / gamma) + Sk(lam)) mod 2^bits`` (:func:`quantize`, then
    :func:`add_shares`), one row per site. Rows of sites that send nothing are drawn and encoded like the others
    (their streams advance in lockstep)."""
    return add_shares(quantize(values, spec, rngs), spec, rngs)


def decode(residues: np.ndarray, spec: SkellamSpec) -> np.ndarray:
    """The modular sum of the rows of ``residues`` as signed integers, in message units (times gamma); for an
    outer-product release (``spec.outer``) ``sym_to_vec`` of the summed matrix (its folded entries over ``sqrt(2)``), its
    blocks' signed sums added."""
    modulus = 1 << int(spec.bits)
    total = np.mod(np.asarray(residues, dtype=np.int64).sum(axis=0), modulus)
    signed = np.where(total >= modulus // 2, total - modulus, total)
    if spec.outer:  # each block's sum within the signed range: the integer sums of the blocks added
        signed = signed.reshape(int(spec.blocks), -1).sum(axis=0)
    signed = signed.astype(np.float64) * spec.quantum
    if spec.outer:  # folded entries 2 S_kl: sym_to_vec's sqrt(2) S_kl
        signed = signed * np.where(outer_folds(int(spec.dim)) > 1.0, 1.0 / math.sqrt(2.0), 1.0)
    return signed


def skellam_log_pmf(lam: float, support: np.ndarray) -> np.ndarray:
    """``log P(Sk(lam, lam) = k)`` at the integers ``support``: ``log(exp(-2 lam) I_k(2 lam))``, by the scaled Bessel ive."""
    from scipy.special import ive
    with np.errstate(divide="ignore"):
        return np.log(ive(np.abs(np.asarray(support, dtype=np.float64)), 2.0 * lam))
