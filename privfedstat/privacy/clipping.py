"""Choosing the clipping bound B privately: :class:`AutoClip`, the default of ``clip="auto"``
(:data:`PILOT_AUTOCLIP`) and the noisy bisection both run (:func:`private_grid_quantile`).

The core paper (Section 4.1) sets B to the maximum over clients of the 90th percentile of the
per-sample gradient norms at theta = 0, computed from the raw data, and notes that this leaks; it
suggests spending a share of mu (e.g. mu/10) on B instead. :class:`AutoClip` does that:

* the per-sample norms at theta = 0 are compared with a public, data-independent geometric grid
  of ``n_grid`` candidate bounds between ``lower`` and ``upper``;
* the server finds the smallest grid point at which at least a fraction ``quantile`` of all
  samples (pooled over clients) has norm <= the candidate, by bisection. Each bisection step asks
  every client for its count of norms <= the candidate; a count changes by at most 1 when one
  datum is replaced (sensitivity 1), and each client adds Gaussian noise calibrated to its share
  of the budget. Bisection over a power-of-two grid always takes exactly ``log2(n_grid)`` queries,
  so the budget is fixed in advance: each query is ``mu_clip / sqrt(log2(n_grid))``-GDP and the
  whole search is ``mu_clip``-GDP per client.

The paper's bound is chosen at theta = 0, but the norms that get clipped are those at the working
point, and its 90% quantile leaves a clipping bias that dominates the MSE of the paper's Figure 3
design (N = 24000-56000, mu = 2): there the privacy noise is small and a larger bound costs
little. ``clip="auto"`` (:data:`PILOT_AUTOCLIP`) therefore spends the same 10% of mu on a search
at theta = 0, five private FedSGD rounds from 0 (the pilot) and a search for a high quantile at
the pilot (``pilot_quantile``). Chosen because on three Figure 3 scenarios it divides the MSE of
FedSGD, FedHybrid, FedAvg and FedNewton by 4-10 against the paper's bound, most of it from the
higher quantile and a further 10-35% from the pilot; measurements in ``benchmarks/RESULTS.md``.

The client sizes n_i are treated as public, as in the paper (they set the noise scales and the
aggregation weights). The estimate is the pooled quantile, not the paper's maximum of per-client
quantiles: a per-client quantile of a noisy count is too inaccurate at the paper's client sizes.
The result is always a grid point, so B lies in [lower, upper] for any data.

Accuracy: the pooled noisy count has standard deviation ``sqrt(m) / mu_query`` =
``sqrt(Q m) / mu_clip``, a relative error of about ``sqrt(Q m) / (mu_clip N)`` with Q = log2(n_grid)
queries, m clients and N samples (about 0.4% for m = 50, n_i = 400, mu = 2; about 9% for m = 20,
n_i = 30). A wrong upward decision returns a bound several times the quantile and inflates all
later noise, so decisions lean downwards by ``margin`` noise standard deviations (see
:class:`AutoClip`); with very small N * mu, a fixed ``clip`` or a larger ``budget`` is still better.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

__all__ = ["AutoClip", "PILOT_AUTOCLIP", "private_grid_quantile", "grid_quantile_outcomes", "search_level"]


@dataclass(frozen=True)
class AutoClip:
    """Private data-driven clipping bound (the default ``clip="auto"``).

    Parameters
    ----------
    quantile : float, default 0.9
        Target fraction of per-sample norms below the bound (the paper's 90th percentile).
    budget : float, default 0.1
        Fraction of each client's mu spent on choosing the bound(s): ``mu_clip = budget * mu``; the
        estimation gets ``sqrt(mu^2 - mu_clip^2)`` so that the total is exactly ``mu`` (GDP
        composition). The paper's Section 4.1 suggests mu/10.
    lower, upper : float, default 1e-2 and 1e4
        Range of the public candidate grid. Bounds outside it are clamped to it.
    n_grid : int, default 64
        Number of grid points; a power of two (bisection then takes ``log2(n_grid)`` queries).
    pilot_rounds : int, default 0
        0: the bound is the ``quantile`` of the per-sample norms at theta = 0 (the paper's
        Section 4.1; the simulation studies use ``AutoClip()``). k > 0: the bound is chosen at a
        private pilot estimate, the working point whose per-sample norms are what gets clipped:
        (1) the search at theta = 0 as above, (2) ``k`` private FedSGD rounds from 0 with that
        bound and ``step_size="auto"``, (3) a new search for the ``pilot_quantile`` of the norms
        at the pilot. The three stages share ``budget * mu`` equally in squares (each
        ``budget * mu / sqrt(3)``-GDP), so the whole choice is still exactly ``budget * mu``.
        ``clip="auto"`` uses :data:`PILOT_AUTOCLIP`.
    hessian_quantile : float or None, default None
        Target fraction of per-sample Hessian norms at theta = 0 below the Hessian bound (C_H);
        None: ``quantile``. FedIRLS raises it to ``pilot_quantile`` for families of unbounded
        curvature, whose Hessian at theta = 0 understates the curvature along the path.
    pilot_quantile : float, default 0.999
        Target fraction of per-sample norms at the pilot below the bound (stage 3). 0.999 rather
        than 0.99 because it raises the coverage of FedIRLS's 95% intervals by about 4 points on
        the coverage design of ``benchmarks/bench_coverage.py`` at the same median width (the
        clipped rows at the estimate, not the noise, bias the fits); measurements in
        ``benchmarks/RESULTS.md``.
    margin : float, default 2.0
        Each bisection step compares the noisy count with ``quantile * N - margin * sd``, where
        ``sd`` is the (public) standard deviation of the pooled count's noise. Overshooting
        (a bound far above the quantile) inflates every later noise scale, undershooting only
        clips a little more, so decisions lean towards smaller bounds: at any step the chance of
        a wrong upward decision is below Phi(-margin) (~2.3%). The effective target quantile is
        lowered by ``margin * sd / N`` (0.8% for 40 clients x 500 rows at mu = 2; 18% for
        20 x 30).
    coarse_lean : float, default 0.0
        Extra lean, in count-noise sds, of the queries whose wrong upward decision costs most: a
        query with k bisection levels below it sends a wrong "up" ``2^k`` grid points too high
        (x1.25 per point on the default grid: x2.4 at k = 2, x33 at k = 4, x1100 at k = 5), so its
        margin is ``margin + coarse_lean min(max(k - 1, 0), 3)`` (with ``coarse_lean = 0.5``: 2, 2,
        2.5, 3, 3.5, 3.5 sds from the last query to the first). Above the data's top every count is N, and with ``margin`` alone a
        high quantile's target sits only ``margin`` sds below it, so each such query goes up with
        probability ~Phi(-margin) and sends the bound far above every norm (measured in
        ``benchmarks/RESULTS.md``, "FedIRLS whitened refine rounds"). The extra lean lowers the
        effective quantile only where it lies next to a coarse query's grid point. FedIRLS's
        ``clip="auto"`` uses 0.5; the default 0 keeps the other estimators' searches (and the
        studies of the core paper's Section 4) as they were.
    """

    quantile: float = 0.9
    budget: float = 0.1
    lower: float = 1e-2
    upper: float = 1e4
    n_grid: int = 64
    margin: float = 2.0
    pilot_rounds: int = 0
    pilot_quantile: float = 0.999
    hessian_quantile: float | None = None
    coarse_lean: float = 0.0

    def __post_init__(self) -> None:
        if not 0 < self.quantile < 1:
            raise ValueError(f"AutoClip.quantile must lie in (0, 1), got {self.quantile}.")
        if not 0 < self.budget < 1:
            raise ValueError(f"AutoClip.budget must lie in (0, 1), got {self.budget}.")
        if not 0 < self.lower < self.upper < math.inf:
            raise ValueError(f"AutoClip needs 0 < lower < upper < inf, got lower={self.lower}, upper={self.upper}.")
        if self.n_grid < 2 or self.n_grid & (self.n_grid - 1):
            raise ValueError(f"AutoClip.n_grid must be a power of two >= 2, got {self.n_grid}.")
        if isinstance(self.pilot_rounds, bool) or not isinstance(self.pilot_rounds, int) or self.pilot_rounds < 0:
            raise ValueError(f"AutoClip.pilot_rounds must be an integer >= 0, got {self.pilot_rounds!r}.")
        if not 0 < self.pilot_quantile < 1:
            raise ValueError(f"AutoClip.pilot_quantile must lie in (0, 1), got {self.pilot_quantile}.")
        if self.hessian_quantile is not None and not 0 < self.hessian_quantile < 1:
            raise ValueError(f"AutoClip.hessian_quantile must lie in (0, 1) or be None, got {self.hessian_quantile}.")
        if not 0 <= self.margin < math.inf:
            raise ValueError(f"AutoClip.margin must be a finite number >= 0, got {self.margin}.")
        if not 0 <= self.coarse_lean < math.inf:
            raise ValueError(f"AutoClip.coarse_lean must be a finite number >= 0, got {self.coarse_lean}.")

    def start_quantile(self, which: str) -> float:
        """The quantile searched at theta = 0 for the bound of the ``which`` norm ("gradient" or "hessian")."""
        return self.hessian_quantile if which == "hessian" and self.hessian_quantile is not None else self.quantile

    @property
    def grid(self) -> np.ndarray:
        """The public candidate bounds, increasing."""
        return np.geomspace(self.lower, self.upper, self.n_grid)

    @property
    def n_queries(self) -> int:
        """Number of noisy count queries per estimated bound."""
        return int(math.log2(self.n_grid))

    def query_budget(self, mu: float, n_searches: int) -> float:
        """GDP budget of each count query when ``n_searches`` searches share ``mu`` (in squares)."""
        return mu / math.sqrt(n_searches * self.n_queries)

    @staticmethod
    def count_sd(n_clients: int, mu_query: float) -> float:
        """Standard deviation of a pooled noisy count: ``sqrt(m) / mu_query`` (sensitivity 1 per client; public);
        ``n_clients``: the independent noises in the count (the clients', or 1 for a secure sum)."""
        return math.sqrt(n_clients) / mu_query if math.isfinite(mu_query) else 0.0

    def target(self, quantile: float, n_total: float, n_clients: int, mu_query: float) -> Callable[[float], float]:
        """The count a search aims at, as a function of the grid point queried: ``quantile`` of the N samples,
        lowered by ``margin`` sds of the pooled count's noise (:meth:`count_sd`), and by ``coarse_lean`` more
        per bisection level below the point beyond the first, up to three."""
        grid, sd = self.grid, self.count_sd(n_clients, mu_query)

        def reach(threshold: float) -> float:
            i = int(np.searchsorted(grid, threshold))
            levels = ((i + 1) & -(i + 1)).bit_length() - 1  # bisection levels below grid point i
            return quantile * n_total - (self.margin + self.coarse_lean * min(max(levels - 1, 0), 3)) * sd

        return reach

    @property
    def n_stages(self) -> int:
        """Stages sharing the budget: the search at 0, and with a pilot the pilot and the search at it."""
        return 3 if self.pilot_rounds else 1


#: the bound of ``clip="auto"``: chosen at a private pilot estimate (see ``pilot_rounds`` and the module docstring)
PILOT_AUTOCLIP = AutoClip(pilot_rounds=5)


def private_grid_quantile(
    noisy_count: Callable[[float], float], grid: np.ndarray, target: float | Callable[[float], float]
) -> float:
    """Smallest grid point whose (noisy) count reaches ``target``, by bisection.

    Parameters
    ----------
    noisy_count : callable
        ``noisy_count(threshold)`` returns the privatized number of samples with norm <= threshold.
        It is called exactly ``log2(len(grid))`` times.
    grid : ndarray
        Increasing candidate thresholds, length a power of two.
    target : float or callable
        Count to reach (quantile times the public total sample size), or a public function
        ``target(threshold)`` of the grid point (decisions that lean more at some points:
        :meth:`AutoClip.target`, the scaling's top lean).
    """
    reach = target if callable(target) else (lambda _threshold: target)
    lo, hi = 0, len(grid) - 1
    while lo < hi:
        mid = (lo + hi) // 2
        threshold = float(grid[mid])
        if noisy_count(threshold) >= reach(threshold):
            hi = mid
        else:
            lo = mid + 1
    return float(grid[lo])


def grid_quantile_outcomes(count: Callable[[float], float], grid: np.ndarray, target: float, count_sd: float, *,
                           least: float = 0.0) -> dict[float, float]:
    """The distribution of :func:`private_grid_quantile`'s result when each count carries Gaussian noise.

    Each bisection step at grid point t compares ``count(t) + e`` (``e ~ N(0, count_sd^2)``,
    independent across steps) with ``target``: it goes down with probability
    ``Phi((count(t) - target) / count_sd)``. A result's probability is the product of the
    decisions on its path (``log2(len(grid))`` of them); with ``count_sd = 0`` the decisions are
    exact and the result is :func:`private_grid_quantile` on ``count``.

    Parameters
    ----------
    count : callable
        ``count(threshold)``: the noise-free number of samples with norm <= threshold.
    grid : ndarray
        Increasing candidate thresholds, length a power of two.
    target : float or callable
        Count to reach, or a function of the grid point (as :func:`private_grid_quantile` takes it).
    count_sd : float
        Standard deviation of a query's noise (:meth:`AutoClip.count_sd`).
    least : float, default 0
        Paths whose probability falls below it are not followed: their mass is missing from the result.

    Returns
    -------
    dict
        ``{grid point: probability}`` over the reachable results.
    """
    from scipy.stats import norm  # here, not at module level: scipy.stats is slow to import

    reach = target if callable(target) else (lambda _threshold: target)
    outcomes: dict[float, float] = {}
    paths = [(0, len(grid) - 1, 1.0)]
    while paths:
        lo, hi, prob = paths.pop()
        if lo == hi:
            outcomes[float(grid[lo])] = outcomes.get(float(grid[lo]), 0.0) + prob
            continue
        mid = (lo + hi) // 2
        gap = count(float(grid[mid])) - reach(float(grid[mid]))
        down = float(gap >= 0) if count_sd == 0 else float(norm.cdf(gap / count_sd))
        for branch, p in (((lo, mid), prob * down), ((mid + 1, hi), prob * (1.0 - down))):
            if p > 0 and p >= least:
                paths.append((*branch, p))
    return outcomes


def search_level(quantile: float | Callable[[str], float], which: str) -> float:
    """The quantile a bound search targets for the ``which`` norm: ``quantile(which)`` when the levels differ by
    norm (:meth:`AutoClip.start_quantile`), else ``quantile`` itself."""
    return quantile(which) if callable(quantile) else quantile
