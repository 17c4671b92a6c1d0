"""Per-row outer products for secure aggregation: each row's root rounded into a ball, so that the PSD sensitivity
``sqrt(2) C / n_i`` of a Hessian-type release is attained exactly in integers.

Every row term of the Hessian-type verbs is an outer product ``v_j v_j^T`` of one root (a Hessian row ``sqrt(ell''_j)
x_j`` clipped, a clipped gradient, a clipped design row), of Frobenius norm ``||v_j||^2``. A site scales its roots by the
square root of the matrix quantum gamma and rounds each into the integer ball ``||a_j||^2 <= T_i``
(:func:`~privfedstat.privacy.secure_rounding.round_into_ball`), and sends its integer matrix ``S = sum_j a_j a_j^T`` as
the upper triangle with the off-diagonal entries doubled (``S_kk``, ``2 S_kl``) plus its noise share: ``Sk(lam)`` on the
diagonal, ``Sk(2 lam)`` off it (:func:`~privfedstat.privacy.secure_noise.add_shares`).

**Sensitivity.** One row replaced moves ``S`` by ``a a^T - b b^T``, ``||.||_F^2 = ||a||^4 + ||b||^4 - 2 (a.b)^2 <= 2
K^2`` whatever the rounding drew. The message is, in distribution, the full matrix ``S`` with ``Sk(lam)`` on each of its
``p^2`` entries with the entries ``(k, l)`` and ``(l, k)`` added (post-processing), whose integer shift has L2 norm
``||a a^T - b b^T||_F <= sqrt(2) K``: the ledger's ``Delta_2 = sqrt(2) K`` (``K`` for ``p = 1``, where ``|a^2 - b^2| <=
K``). It is attained: ``K = j^2 q`` (``q`` the largest even number ``<= p``), ``a = j (1, ..., 1)`` and ``b = j (1, -1,
1, -1, ...)`` on the first ``q`` coordinates (orthogonal lattice vectors of squared norm ``K``), :func:`outer_pattern`.
Decoded, the release is ``sym_to_vec`` of the summed matrix with the same noise sd on every coordinate, as for a site
message rounded as a whole (docs/guide/secure-aggregation.md, "Per-row outer products").

**Blocks.** Where Flower's SecAgg+ word cannot hold the sum of all rows at the bracket's ``K``, a site sends ``g``
matrices, of its rows ``j`` with ``j mod g = b`` (fixed by the row's index before any data is read), each with its
full noise share; the server learns each block's sum over the sites and adds them (:func:`~.secure_noise.decode`). One
row replaced moves one block by the same ``a a^T - b b^T`` and leaves the others' distribution unchanged (each row's
rounding uses its own uniforms; the blocks' noises are independent): the vector of blocks has the PLD of one release
(parallel composition), and the decoded sum ``g`` times its noise variance (docs, "Blocks").
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from . import secure_noise as sn
from .secure_noise import MAX_CHECKED_LAM, SLACK, IntegerNoise, SkellamSpec, _calibrated_lam, _modulus_bits
from .secure_rounding import WORD_BITS, gap_lambda, round_into_ball

__all__ = ["outer_spec", "outer_squares", "quantize_outer", "outer_pattern", "outer_size", "fewest_blocks", "block_rows"]


def outer_size(dim: int) -> int:
    """p, for ``dim = p (p + 1) / 2`` coordinates of ``sym_to_vec``."""
    p = int(round((math.sqrt(8 * int(dim) + 1) - 1) / 2))
    if p * (p + 1) // 2 != int(dim):
        raise ValueError(f"an outer-product release has p (p + 1) / 2 coordinates, got {dim!r}.")
    return p


def _order(p: int) -> int:
    """q: the largest even number at most ``p`` (1 for ``p = 1``)."""
    return max(int(p) - int(p) % 2, 1)


def _factor(p: int) -> float:
    """``Delta_2 / K``: ``sqrt(2)`` for ``p >= 2``, 1 for one coordinate."""
    return math.sqrt(2.0) if p > 1 else 1.0


def outer_spec(sensitivity: float, bound: float, dim: int, mu: float, n_clients: int, min_surviving: int,
               rows: int) -> SkellamSpec | None:
    """The arithmetic of a secure round whose sites send their rows' integer outer products (module docstring).

    Parameters
    ----------
    sensitivity : float
        Largest L2 sensitivity ``w_i sqrt(2) C / n_i`` of a site's weighted ``sym_to_vec`` message (its rows' terms of
        Frobenius norm at most ``w_i C / n_i``).
    bound : float
        Largest trace bound ``max_i w_i C`` of a site's message (its diagonal's reach), for the modulus.
    dim : int
        ``p (p + 1) / 2``.
    mu, n_clients, min_surviving, rows
        As :func:`~privfedstat.privacy.secure_rounding.row_spec`.

    Notes
    -----
    ``gamma = sensitivity / (sqrt(2) K)``, ``K = j^2 q``: the smallest ``j`` whose ``K`` is at least both the bracket's
    (``Lambda`` at least :func:`~privfedstat.privacy.secure_rounding.gap_lambda` of the attained pattern) and the rounding
    variance's (``rows`` rows' bound at most ``2 SLACK`` of the noise variance, the site-level rounding's price), at most
    the largest whose ``Lambda`` is at most :data:`MAX_CHECKED_LAM` and whose modulus fits Flower's SecAgg+ word. Where
    the word cannot hold the bracket's ``K`` (``N K`` above about ``2^(bits - 1)``: many rows), the fewest blocks ``g``
    whose block sums it holds (:func:`fewest_blocks`; each block of rows with the full noise, the decoded sum ``g``
    times the noise variance), then the largest ``K`` again. None where even one row per site and block is too much for
    the word, where the rows' rounding variance would exceed one block's noise variance (``N mu^2 / (2 p K) > 1``), or no
    ``K`` meets the budget: the caller rounds the site message as a whole instead (its rounding slack in the
    sensitivity).
    """
    d, m, k = int(dim), int(n_clients), int(min_surviving)
    sn.check_round(sensitivity, bound, mu, m, min_surviving)
    p = outer_size(d)
    q, f = _order(p), _factor(p)
    # Lambda = (f K)^2 c^2 / (2 mu^2), c = D sqrt(2 Lambda) >= 1; the pattern's coordinates carry 2 Lambda (p >= 2)
    lam_gap = gap_lambda(mu, max((q // 2) ** 2, 1)) / (2.0 if p > 1 else 1.0)
    k_gap = mu * math.sqrt(2.0 * lam_gap) / f
    k_var = rows * mu * mu / (2.0 * p * SLACK * f * f)  # rows K / p <= 2 SLACK (f K / mu)^2
    k_top = mu * math.sqrt(2.0 * MAX_CHECKED_LAM) * (1.0 - 1e-6) / f
    j_top = math.isqrt(int(k_top / q))
    j_gap = min(math.ceil(math.sqrt(k_gap / q)), j_top)
    j = min(max(j_gap, math.ceil(math.sqrt(k_var / q))), j_top)
    args = (sensitivity, bound, d, mu, m, k, rows)
    spec = _largest(j, j_gap, 1, args)
    if spec is None and j_gap >= 1:  # the word cannot hold the bracket's K: blocks of rows
        gap = _spec_at(j_gap * j_gap * q, *args)
        blocks = None if gap is None else fewest_blocks(gap.outer, gap.quantum, gap.lam, args)
        spec = None if blocks is None else _largest(j, j_gap, blocks, args)
    # rounding-dominated (large N): the site message rounded as a whole is less noisy
    return spec if spec is not None and rows * sn.outer_row_variance(spec.outer, d) <= 2.0 * k * spec.lam else None


def _largest(j: int, j_gap: int, blocks: int, args: tuple) -> SkellamSpec | None:
    """The spec of the largest ``K = i^2 q``, ``j_gap <= i <= j``, whose modulus with ``blocks`` blocks fits the word; None
    where ``j_gap``'s does not."""
    q = _order(outer_size(args[2]))
    while j >= 1:
        spec = _spec_at(j * j * q, *args, blocks=blocks)
        if spec is None:
            j = math.floor(j * 0.99)
        elif spec.bits <= WORD_BITS:
            return spec
        elif j > j_gap:  # the reach scales with K = j^2 q: a bit fewer per halving of K, down to the bracket's
            j = max(min(j - 1, math.floor(j * 2.0 ** ((WORD_BITS - spec.bits) / 2.0))), j_gap)
        else:
            return None
    return None


def block_rows(rows: int, n_clients: int, blocks: int) -> int:
    """The most rows of all sites in one block, ``sum_i ceil(n_i / g) <= m + (N - m) / g`` (row ``j`` of a site in block
    ``j mod g``)."""
    return int(n_clients) + (int(rows) - int(n_clients)) // int(blocks)


def _block_bits(radius: int, quantum: float, lam: float, blocks: int, args: tuple) -> int:
    """The modulus of a block's sum: every coordinate's reach is at most the site messages' ``m bound / gamma`` and the
    block's rows' ``K`` each (``a_k^2 <= ||a||^2 <= K``, ``|2 a_k a_l| <= a_k^2 + a_l^2``), plus its noise's tail."""
    sensitivity, bound, d, mu, m, k, rows = args
    reach = min(m * bound / quantum, float(radius) * block_rows(rows, m, blocks))
    return _modulus_bits(reach, d, 2.0 * m * lam)  # Sk(2 lam) off the diagonal


def fewest_blocks(radius: int, quantum: float, lam: float, args: tuple) -> int | None:
    """The fewest blocks ``g >= 2`` whose sums Flower's word holds at ``K = radius`` (a bisection: the bits fall with
    ``g``); None where even ``g = N`` (one row per site and block) does not fit."""
    rows = int(args[6])

    def fits(g: int) -> bool:
        return _block_bits(radius, quantum, lam, g, args) <= WORD_BITS

    if rows < 2 or not fits(rows):
        return None
    lo, hi = 1, rows  # not fits(lo) (g = 1 was tried), fits(hi)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if fits(mid) else (mid, hi)
    return hi


def _spec_at(radius: int, sensitivity: float, bound: float, d: int, mu: float, m: int, min_surviving: int, rows: int,
             blocks: int = 1) -> SkellamSpec | None:
    """The spec of ``K = radius`` in ``blocks`` blocks; None where its ``Lambda`` is above the checked range."""
    p = outer_size(d)
    l2 = _factor(p) * radius
    quantum = sensitivity / (math.sqrt(2.0) * radius)
    try:
        lam = _calibrated_lam(l2, mu, min_surviving)
    except ValueError:
        return None
    bits = _block_bits(radius, quantum, lam, blocks, (sensitivity, bound, d, mu, m, min_surviving, rows))
    return SkellamSpec(quantum, lam, bits, min_surviving, l2, min(2.0 * p * radius, l2 * l2), rounding=False, dim=d,
                       rows=rows, outer=radius, blocks=blocks)


def outer_squares(spec: SkellamSpec, sensitivity) -> np.ndarray:
    """Each site's squared root radius in quanta, ``T_i = min(floor(Delta_i / (sqrt(2) gamma) (1 + 1e-12)), K)`` for its
    weighted message's sensitivity ``Delta_i = sensitivity[i]`` (a row term of Frobenius norm ``Delta_i / sqrt(2)``)."""
    r = np.asarray(sensitivity, dtype=np.float64) / (math.sqrt(2.0) * spec.quantum)
    return np.minimum(np.floor(r * (1.0 + 1e-12)), spec.outer).astype(np.int64)


def quantize_outer(roots: Sequence[np.ndarray], spec: SkellamSpec, sensitivity, rngs: Sequence[np.random.Generator]
                   ) -> np.ndarray:
    """Each site's integer matrix ``S = sum_j a_j a_j^T`` of its roots rounded into the ball ``||a||^2 <= T_i``, as the
    ``sym_to_vec`` order's upper triangle with off-diagonal entries doubled, int64 (n_sites, g p (p + 1) / 2): the
    ``g = spec.blocks`` matrices of its rows ``j mod g = b``, ``b = 0, ..., g - 1``, one after the other.

    ``roots[i]`` (n_i, p) are site i's scaled roots in message units (``v_j`` with ``v_j v_j^T`` its rows' terms of its
    weighted message), ``rngs[i]`` its stream."""
    p = outer_size(spec.dim)
    rows, cols = np.triu_indices(p)
    fold = np.where(rows == cols, 1, 2)
    thresholds = outer_squares(spec, sensitivity)
    g = int(spec.blocks)
    out = np.zeros((len(rngs), g, rows.size), dtype=np.int64)
    for i, rng in enumerate(rngs):
        x = np.asarray(roots[i], dtype=np.float64).reshape(-1, p) / math.sqrt(spec.quantum)
        a = round_into_ball(x, int(thresholds[i]), rng)
        for b in range(g):
            out[i, b] = (a[b::g].T @ a[b::g])[rows, cols] * fold
    return out.reshape(len(rngs), -1)


def outer_pattern(noise: IntegerNoise) -> list[tuple[float, tuple[int, ...]]]:
    """The shift pattern of an outer-product release that data within its stated sensitivity produce with certainty, as
    ``(Lambda, shifts)`` groups of its coordinates: roots on the lattice (the rounding leaves them) ``a = j (1, ..., 1)``,
    ``b = j (1, -1, 1, -1, ...)`` on the first ``q`` coordinates (``K = j^2 q``), whose ``a a^T - b b^T`` is ``2 j^2`` on
    the ``(q / 2)^2`` pairs where ``b`` has opposite signs, ``4 j^2`` once folded, off the diagonal (``Sk(2 Lambda)``):
    ``||.||_F = sqrt(2) K``, the ledger's ``Delta_2``; for ``p = 1``, ``a = sqrt(K)``, ``b = 0``: ``K`` on one
    ``Sk(Lambda)`` coordinate."""
    p = outer_size(noise.dim)
    if p == 1:
        return [(noise.lam, (int(noise.outer),))]
    q = _order(p)
    jj = int(noise.outer) // q
    return [(2.0 * noise.lam, (4 * jj,) * ((q // 2) ** 2))]
