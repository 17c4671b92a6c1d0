"""Feature scaling without silent leaks.

Gradient methods with a fixed step size diverge on raw covariates (ages in years, incomes), so the
estimators can fit on affinely rescaled columns ``x'_j = (x_j - c_j) / s_j`` and report the
coefficients on the original scale. The centre and scale come either from

* :class:`FeatureBounds` -- public, data-independent bounds (e.g. a questionnaire's ranges): no
  privacy cost; or
* :class:`PrivateStandardize` -- a private estimate spending a declared share of each client's mu:
  for every scaled column the pooled median (centre) and the pooled ``quantile`` of
  ``|x_j - centre|`` (scale) are found by noisy bisection on public grids, with client counts of
  sensitivity 1, exactly as :class:`~privfedstat.privacy.AutoClip` does for the clipping bound.
  Only the order of magnitude matters: the rescaling is a reparametrisation, and privacy comes
  from the per-sample gradient clipping, so a rough private estimate is enough.

Centring needs an intercept column (``intercept``) to absorb it; without one, columns are only
scaled. Back-transformation (for each output column of Theta): ``theta_j = theta'_j / s_j`` for
scaled j, ``theta_0 = theta'_0 - sum_j c_j theta'_j / s_j``.

The response of a location family (Gaussian, Huber: the loss is a function of ``y - z``) is located
the same way: ``y' = (y - c_y) / s_y`` (and an offset ``o' = o / s_y``), so that a response far
from 0 -- test scores around 600, wages in dollars -- puts the coefficients on the fitting scale at
the scale of 1, where the trust region of the Newton steps and the clipping searches start; the
fitted ``theta'`` maps back as ``s_y theta'`` plus ``c_y`` on the intercept (before the columns'
map), an exact reparametrisation of least squares (Huber's threshold is divided by ``s_y``:
:meth:`~privfedstat.families.Family.for_response_scale`).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from statistics import NormalDist

import numpy as np

from ..data.federated import FederatedData
from ..families import Family
from ..federation.clients import RESPONSE
from ..privacy.clipping import private_grid_quantile

__all__ = ["FeatureBounds", "PrivateStandardize", "Scaler", "MAX_SCALED", "reference_mean_square"]

#: the scale search's target stays this many leans (``margin`` sds each) below N: above the data's top every
#: count is N, so a noisy count falling under the target there sends the bisection orders of magnitude up (a
#: binary column, 28% ones, 10 sites, mu = 0.8: 1.3% of searches at 1.5 leans, 3 sds; Phi(-6) ~ 1e-9 per query at 3)
TOP_LEAN = 3.0
#: points spaced evenly in the bracket of the centre's coarse search (log2 of it more queries per column)
CENTRE_REFINE = 16
#: a private centre within this of 0 is taken as 0. The median of a column with an atom at 0 and no values in (0, 1)
#: (a dummy with about half ones) has the same count at every grid point in between, so the noisy search may stop
#: anywhere there (1.7e-15 in a measured fit); the atom then lies outside the centre's resolution, the scale search
#: lands between it and the ones, and the column was divided by 4e-8 (148 schools of 23 pupils, mu = 2).
#: 1e-6 is far below the spread of any column whose centre matters (the centre only shifts it)
ZERO_CENTRE = 1e-6
#: rescaled values are clamped to [-MAX_SCALED, MAX_SCALED]: (x - c) / s overflows for huge finite x
MAX_SCALED = 1e300


def reference_mean_square(quantile: float) -> float:
    """Mean square of a normal column divided by the ``quantile`` of its absolute deviations from its median,
    ``1 / z_((1 + quantile) / 2)^2`` (0.370 at 0.9): what :class:`PrivateStandardize` leaves a column whose scale
    search aimed at that quantile (the step's public ``mean ||x||^2``, :meth:`Scaler.square_norm`). The search aims
    at ``quantile`` plus its lean, at most :data:`TOP_LEAN` leans below N (so at most 0.925; small sites at small mu
    aim lower, and their columns come out larger than 1), and rounds up to its grid, which only lowers
    the mean square; other shapes at 0.9: uniform 0.41, Laplace 0.38, t_3 0.54, a binary column (scale 1, its atom
    at the centre) at most 0.5 (docs/algorithms/fedsgd.md, "The step on privately scaled columns")."""
    return 1.0 / NormalDist().inv_cdf((1.0 + quantile) / 2.0) ** 2


@dataclass(frozen=True)
class FeatureBounds:
    """Public bounds for each column; columns with ``lower == upper`` (e.g. the intercept) are left alone.

    Parameters
    ----------
    lower, upper : sequence of float, one per column of X
    intercept : int or None
        Index of the intercept column (used to absorb the centring), or None.
    response : (float, float) or None, default None
        Public bounds of a Gaussian or Huber response (a score's range, 0 to 1000): it is centred at their
        midpoint (with an intercept) and scaled by their half-range, as :class:`PrivateStandardize` locates it
        privately; None leaves the response as it is.
    """

    lower: tuple[float, ...]
    upper: tuple[float, ...]
    intercept: int | None = 0
    response: tuple[float, float] | None = None

    def __post_init__(self) -> None:
        lo, hi = np.asarray(self.lower, float), np.asarray(self.upper, float)
        if lo.shape != hi.shape or lo.ndim != 1 or not np.all(np.isfinite(lo) & np.isfinite(hi)) or np.any(hi < lo):
            raise ValueError("FeatureBounds needs finite lower <= upper, one pair per column.")
        if self.response is not None:
            r = np.asarray(self.response, float)
            if r.shape != (2,) or not np.all(np.isfinite(r)) or not r[0] < r[1]:
                raise ValueError(f"FeatureBounds.response needs finite (lower, upper) with lower < upper, got "
                                 f"{self.response!r}.")


@dataclass(frozen=True)
class PrivateStandardize:
    """Private centre/scale per column, spending ``budget * mu`` of each client's GDP budget.

    Both searches run on public geometric grids spanning ``1e-15`` to ``1e15`` (covariates on any
    scale from 1e-12 to 1e12 are resolved to within a factor 1.31; the centre's symmetric grid
    has half the points per sign, a factor 1.72, and is refined by :data:`CENTRE_REFINE` more
    points spaced evenly inside the bracket it found: a centre 1.72 times the median of a column
    whose spread is small next to its level -- years of schooling -- moves the column's mass away
    from 0, correlates it with the intercept and inflated its privacy noise several-fold), and
    their noisy decisions lean by ``margin`` noise standard deviations towards the harmless side:

    * the centre (pooled median) leans towards 0: a centre far outside the data (possible when
      the count noise is comparable to N) shifts the column by much more than its spread, and
      the intercept then absorbs ``c_j theta_j / s_j`` with all its noise; a centre within
      :data:`ZERO_CENTRE` of 0 is 0 (an atom at 0 is then at the centre);
    * the scale is the pooled ``quantile`` of the *non-zero* deviations ``|x_j - c_j|``: one
      more noisy count gives the number ``n_0`` of deviations equal to 0, and the search targets
      ``n_0 + quantile (N - n_0)``. A binary or rare column has an atom at its centre; the
      plain quantile of ``|x_j - c_j|`` then falls on the atom (randhie's ``hlthf``, 7.7% ones,
      at quantile 0.9), every count between 0 and 1 is the same, and the noisy bisection
      returned any grid point down to 1e-11 (fits up to 1e10 SE from the MLE). Without the
      atom the scale is the magnitude of the non-zero values (1 for a binary column, 1e12 for
      a rare column on that scale);
    * a column whose deviations nearly all lie within the centre's refine step (its spread below
      the centre's resolution: calendar years, stepped by 53 years near 2000) is located again
      inside that step with its scale search's log2(n_grid) queries, whose result would be
      discarded: three bisect the step (8 points, 6.6 years; the centre at the found bracket's
      midpoint), one counts the deviations within that bracket's half-width, and where they clear
      it as the scale's target clears an atom the other four search the scale on 16 geometric
      points from the half-width to twice the step (a factor 1.26 between points); where they do
      not (a spread below that resolution too, or an atom), the four bisect the bracket further
      (0.4 years) and the scale stays 1. A centre 24 years above such a column made it nearly
      collinear with the intercept (a rare-outcome logistic 5.5 SE from the MLE), and a model
      year left at its own spread (scale 1, deviations up to 40) set the clipping bound of every
      coefficient (privacy sds 1.6 times those of the same fit with the year scaled); see
      ``docs/algorithms/fedirls.md``;
    * the scale leans upwards: a scale far below the spread blows the column up and divides
      its coefficient's noise by ``s_j``, whereas a scale too large only shrinks the column
      (its coefficient towards 0).

    A column mostly at its centre, whose non-zero deviations are too few to locate above the
    noise (fewer than about ``3.5 margin sd``; constant columns at mu = inf), is left unscaled:
    right for indicator columns (dummies of a factor), the common case; a rare column on a
    huge scale then stays on it (clipping still bounds its sensitivity). With noise
    comparable to N (public: ``N < 3.5 margin sd``, see :meth:`locatable`; tiny sites, small mu)
    no search can locate anything: the estimator then spends none of the scaling budget, leaves
    the columns unscaled and warns (a noise-driven centre far outside the data, or a scale 1e-11
    of the spread, put wine and spector fits up to 1e9 SE off; shrinking every column to ~0
    pinned the coefficients at 0).

    Parameters
    ----------
    budget : float, default 0.25
        Share of mu spent on all columns (and the response) together (6.25% of mu^2 under composition in squares: a
        column whose scale is off by an order of magnitude costs far more than the estimation
        loses to it; at 0.1, 60 sites of 120 rows at mu = 2 left a 0-100 column unscaled in one fit
        of five, 54 SE from the MLE).
    columns : tuple of int or None
        Columns to rescale; None = every column except ``intercept``.
    intercept : int or None, default 0
        Index of the intercept column, or None (then columns are scaled, not centred).
    quantile : float, default 0.9
        Scale = pooled ``quantile`` of ``|x_j - centre|`` (before the margin).
    n_grid : int, default 256
        Points per public grid (a power of two; log2(n_grid) queries per search).
    margin : float, default 2.0
        Lean of each decision, in standard deviations ``sd = sqrt(m) / mu_q`` of the pooled
        count's noise (public; ``mu_q`` is the budget of one query): the centre search compares
        the noisy count with ``N/2 + margin sd`` below 0 and ``N/2 - margin sd`` from 0 up; the
        scale search with ``n_0 + quantile (N - n_0) + margin sd``, lowered to
        ``N - TOP_LEAN margin sd`` (so that the top of the data is reached reliably). Its result is
        used only if the target is at least ``n_0 + 2 margin sd`` (the atom is cleared
        reliably: the noisy ``n_0`` and the noisy count each contribute one sd); otherwise the
        column is left unscaled. A wrong decision against the lean has probability below
        Phi(-margin) per step.
    response : bool, default True
        Also locate the response of a location family (gaussian, huber; see the module): centred
        (with an intercept) and scaled like a column, sharing ``budget`` with the columns as one
        more. The coefficients, their covariance and Huber's threshold are mapped exactly, so it
        changes the fit only through the fitting scale: a response far from 0 would otherwise be
        reached by Newton steps from theta = 0 that grow round by round and that the private rounds
        may not finish (the fit then warns and withholds its intervals). A penalised fit's
        ``alpha`` then acts on the rescaled response as it acts on the rescaled columns.
    """

    budget: float = 0.25
    columns: tuple[int, ...] | None = None
    intercept: int | None = 0
    quantile: float = 0.9
    n_grid: int = 256
    margin: float = 2.0
    response: bool = True
    _range: tuple[float, float] = field(default=(1e-15, 1e15), repr=False)

    def __post_init__(self) -> None:
        if not 0 < self.budget < 1:
            raise ValueError(f"PrivateStandardize.budget must lie in (0, 1), got {self.budget}.")
        if not 0 < self.quantile < 1:
            raise ValueError(f"PrivateStandardize.quantile must lie in (0, 1), got {self.quantile}.")
        if self.n_grid < 4 or self.n_grid & (self.n_grid - 1):
            raise ValueError(f"n_grid must be a power of two >= 4, got {self.n_grid}.")
        if not 0 <= self.margin < math.inf:
            raise ValueError(f"PrivateStandardize.margin must be a finite number >= 0, got {self.margin}.")

    def queries_per_column(self) -> int:
        """Noisy count queries per rescaled column: the centre search (with an intercept) and its
        refinement, the count of zero deviations and the scale search; each search takes log2(n_grid)."""
        searches = 2 if self.intercept is not None else 1
        refine = int(math.log2(CENTRE_REFINE)) if self.intercept is not None else 0
        return searches * int(math.log2(self.n_grid)) + refine + 1

    def scales_response(self, family: Family | None) -> bool:
        """Whether the response is located too: ``response`` and a :attr:`~privfedstat.families.Family.location`
        family (a ``family`` of None: the columns alone)."""
        return self.response and family is not None and family.location

    def n_located(self, n_features: int, family: Family | None = None) -> int:
        """Columns rescaled, plus one for the response when it is (:meth:`scales_response`)."""
        return len(self.columns_to_scale(n_features)) + int(self.scales_response(family))

    def count_noise_sd(self, n_clients: int, n_features: int, mu: float, family: Family | None = None) -> float:
        """sd of the noise of one pooled count when the whole procedure has budget ``mu`` (public); ``n_clients``: the
        independent noises in the count (the clients', or 1 for a secure sum)."""
        if math.isinf(mu):
            return 0.0
        mu_q = mu / math.sqrt(self.n_located(n_features, family) * self.queries_per_column())
        return math.sqrt(n_clients) / mu_q

    def locatable(self, n_samples: int, n_clients: int, n_features: int, mu: float, family: Family | None = None
                  ) -> bool:
        """Whether any pooled count can be located above its noise: ``N >= 3.5 margin sd`` (public)."""
        return n_samples >= 3.5 * self.margin * self.count_noise_sd(n_clients, n_features, mu, family)

    def columns_to_scale(self, n_features: int) -> list[int]:
        """The columns this configuration rescales for a design with ``n_features`` columns."""
        if self.columns is None:
            return [j for j in range(n_features) if j != self.intercept]
        return list(self.columns)


class Scaler:
    """Affine rescaling of columns (and of a location family's response), fitted from a :class:`FeatureBounds`
    or privately."""

    def __init__(self, center: np.ndarray, scale: np.ndarray, intercept: int | None, response_center: float = 0.0,
                 response_scale: float = 1.0, mean_square: np.ndarray | None = None) -> None:
        self.center = center
        self.scale = scale
        self.intercept = intercept
        self.response_center = float(response_center)
        self.response_scale = float(response_scale)
        #: public bound on each column's mean square on the fitting scale (1: public bounds, the intercept, a column
        #: left as it is; :func:`reference_mean_square` for a column divided by a private scale)
        self.mean_square = np.ones(len(scale)) if mean_square is None else np.asarray(mean_square, dtype=np.float64)

    def square_norm(self) -> float:
        """``sum_j mean_square_j``: the public ``mean ||x||^2`` of the rescaled design that sets ``step_size="auto"``
        (:func:`~privfedstat.families.curvature.auto_step_size`)."""
        return float(np.sum(self.mean_square))

    @classmethod
    def from_bounds(cls, bounds: FeatureBounds, n_features: int, family: Family | None = None) -> Scaler:
        """The public rescaling of ``bounds`` (its ``response`` bounds need a location ``family``)."""
        lo, hi = np.asarray(bounds.lower, float), np.asarray(bounds.upper, float)
        if lo.size != n_features:
            raise ValueError(f"FeatureBounds has {lo.size} columns but X has {n_features}.")
        half = hi / 2 - lo / 2  # (hi - lo) / 2 and (lo + hi) / 2 overflow for bounds near the largest double
        center = np.where(half > 0, lo / 2 + hi / 2, 0.0)
        scale = np.where(half > 0, half, 1.0)
        if bounds.intercept is None:
            center[:] = 0.0
        else:
            center[bounds.intercept], scale[bounds.intercept] = 0.0, 1.0
        response = (0.0, 1.0)
        if bounds.response is not None:
            if family is None or not family.location:
                raise ValueError("FeatureBounds.response bounds a Gaussian or Huber response; the "
                                 f"{getattr(family, 'name', 'given')} family's response cannot be rescaled.")
            r_lo, r_hi = (float(v) for v in bounds.response)
            response = (0.0 if bounds.intercept is None else r_lo / 2 + r_hi / 2, r_hi / 2 - r_lo / 2)
        return cls(center, scale, bounds.intercept, *response)

    @classmethod
    def private(cls, config: PrivateStandardize, noisy_count, n_samples: int, n_clients: int, n_features: int,
                mu: float, family: Family | None = None) -> Scaler:
        """Estimate centre and scale privately from noisy pooled counts.

        ``noisy_count(column, threshold, center, mu_q, stage)`` asks every client for its number of
        rows with ``x_column <= threshold`` (``center`` None) or ``|x_column - center| <= threshold``,
        privatized with budget ``mu_q`` (sensitivity 1, the clients' verb ``column_count``), and
        returns their sum; ``column`` :data:`RESPONSE` counts the response. ``mu`` is the budget of
        the whole procedure; ``n_samples`` (N), ``n_clients`` (the independent noises in a pooled count:
        the clients', or 1 for a secure sum), ``n_features`` and the ``family`` (whether its response is
        located: :meth:`PrivateStandardize.scales_response`) are public.
        """
        d = n_features
        cols = config.columns_to_scale(d)
        keys: list[int | str] = [*cols, *([RESPONSE] if config.scales_response(family) else [])]
        center, scale = np.zeros(d), np.ones(d)
        if not keys:
            return cls(center, scale, config.intercept)
        lo, hi = config._range
        grid = np.geomspace(lo, hi, config.n_grid)
        half = grid[:: 2]  # n_grid / 2 points: the symmetric centre grid has n_grid points, 0 included
        sym = np.concatenate([-half[::-1], [0.0], half[:-1]])
        if not config.locatable(n_samples, n_clients, d, mu, family):
            raise ValueError("private scaling cannot locate the columns at this budget; check "
                             "PrivateStandardize.locatable() first (the estimators do).")
        mu_q = mu / math.sqrt(len(keys) * config.queries_per_column()) if math.isfinite(mu) else math.inf
        lean = config.margin * config.count_noise_sd(n_clients, d, mu, family)
        n_total = float(n_samples)

        def count(key: int | str, centre: float | None):
            def noisy(threshold: float) -> float:
                return noisy_count(key, threshold, centre, mu_q, f"scaling-{key}" if key == RESPONSE else f"scaling-x{key}")
            return noisy

        def median_target(t: float) -> float:
            return 0.5 * n_total + (lean if t < 0 else -lean)

        def locate(key: int | str) -> tuple[float, float]:
            centre, atom = 0.0, 0.0
            if config.intercept is not None:
                coarse = private_grid_quantile(count(key, None), sym, median_target)
                k = int(np.searchsorted(sym, coarse))
                below = float(sym[k - 1]) if k > 0 else coarse
                fine = np.linspace(below, coarse, CENTRE_REFINE + 1)[1:]  # the bracket (sym[k-1], sym[k]]
                centre = private_grid_quantile(count(key, None), fine, median_target)
                centre = 0.0 if abs(centre) <= ZERO_CENTRE else centre
                atom = float(fine[1] - fine[0])  # an atom at the median lies within a fine step of the centre
            dev = count(key, centre)  # counts of |x - centre| <= t
            n_zero = min(max(dev(atom), 0.0), n_total)  # deviations within the centre's resolution (an atom there)
            top = n_total - TOP_LEAN * lean  # reached reliably by the top of the data
            target = min(n_zero + config.quantile * (n_total - n_zero) + lean, top)
            clears_atom = n_zero + 2 * lean <= target  # (post-processing of released counts)
            if clears_atom or config.intercept is None:
                s = private_grid_quantile(dev, grid, target)  # runs without an intercept: the budget is fixed
                if clears_atom and n_zero < n_total:  # the quantile aimed at among the non-zero deviations
                    aimed[key] = (target - n_zero) / (n_total - n_zero)
                return centre, (s if clears_atom and s > lo else 1.0)
            # nearly every deviation lies within one step of the centre (a spread below the centre's resolution: years
            # near 2000, 53-year steps): the scale search's log2(n_grid) queries, whose result would be discarded,
            # locate the column inside that step instead (docs/algorithms/fedirls.md, "Columns whose spread is below
            # the centre's resolution"): a few bisect it, one counts the deviations within the half-bracket around its
            # midpoint, and the rest search the scale above that where they clear it, else bisect that bracket further
            bits = int(math.log2(config.n_grid))
            if centre == 0.0:  # an indicator's zeros: its atom at 0 is all the step holds (the queries bisect it, as
                centre, _ = _bisected(count(key, None), -atom, 0.0, bits, median_target)  # every column spends them)
                return (0.0 if abs(centre) <= ZERO_CENTRE else centre), 1.0
            centre, radius = _bisected(count(key, None), centre - atom, centre, (bits - 1) // 2, median_target)
            rest = bits - 1 - (bits - 1) // 2
            dev = count(key, centre)
            target = min(config.quantile * n_total + lean, top)
            if min(max(dev(radius), 0.0), n_total) + 2 * lean <= target:
                aimed[key] = target / n_total
                within = np.geomspace(radius, 2.0 * atom, 2**rest)
                return (0.0 if abs(centre) <= ZERO_CENTRE else centre), private_grid_quantile(dev, within, target)
            centre, _ = _bisected(count(key, None), centre - radius, centre + radius, rest, median_target)
            return (0.0 if abs(centre) <= ZERO_CENTRE else centre), 1.0

        aimed: dict[int | str, float] = {}  # the quantile of |x - centre| each scale search aimed at (public)
        for j in cols:
            center[j], scale[j] = locate(j)
        response = locate(RESPONSE) if RESPONSE in keys else (0.0, 1.0)
        mean_square = np.array([reference_mean_square(aimed[j]) if j in aimed and scale[j] != 1.0 else 1.0
                                for j in range(d)])  # a scale of 1: the column as given
        return cls(center, scale, config.intercept, *response, mean_square=mean_square)

    def fitting_family(self, family: Family) -> Family:
        """The family on the fitting scale: ``family`` with its response rescaled (a location family), else itself."""
        return family if self.response_scale == 1.0 else family.for_response_scale(self.response_scale)

    def transform(self, data: FederatedData) -> FederatedData:
        """Rescale every column (and the response, with its offset); the declared intercept column is set to 1,
        its value in the data domain.

        A client never inspects the intercept column's values (an error raised on one row's value
        would itself be a release): declaring a column the intercept declares it constant 1.

        Rescaled values are clamped to ``[-MAX_SCALED, MAX_SCALED]``: for huge finite entries the
        affine map overflows to +-inf, and non-finite data would be rejected -- an error on one
        dataset and not on its neighbour. The clamp is a fixed, data-independent map of each row,
        so it costs no privacy; it changes only entries whose rescaled magnitude exceeds 1e300.
        """
        y, offset = data.y, data.offset
        if (self.response_center, self.response_scale) != (0.0, 1.0):
            with np.errstate(over="ignore"):
                y = _clamped((y - self.response_center) / self.response_scale)
                offset = None if offset is None else _clamped(offset / self.response_scale)
        return FederatedData(self.transform_rows(data.X), y, data.offsets, offset)

    def transform_rows(self, X: np.ndarray) -> np.ndarray:
        """The rows of ``X`` (n, d) rescaled as :meth:`transform` rescales a client's (a new array)."""
        with np.errstate(over="ignore"):
            Z = _clamped((X - self.center) / self.scale)
        if self.intercept is not None:
            Z[:, self.intercept] = 1.0
        return Z

    def coef_to_original(self, theta: np.ndarray) -> np.ndarray:
        """Map coefficients of shape (d,) or (d, q) fitted on the fitting scale to the original scale (an affine
        map: the response's centre enters the intercept)."""
        t = theta * self.response_scale
        if self.intercept is not None:
            t = t.copy()
            t[self.intercept] += self.response_center
        t = t / (self.scale if theta.ndim == 1 else self.scale[:, None])
        if self.intercept is not None:
            t[self.intercept] -= self.center @ t
        return t


def _bisected(noisy: Callable[[float], float], lo: float, hi: float, queries: int, target: Callable[[float], float]
              ) -> tuple[float, float]:
    """The median of a column known to lie in ``(lo, hi]``, by ``queries`` noisy counts of ``x <= t`` on ``2**queries``
    evenly spaced points: the midpoint of the bracket the bisection finds, and that bracket's half-width."""
    points = np.linspace(lo, hi, 2**queries + 1)[1:]
    radius = (hi - lo) / (2 * points.size)
    return private_grid_quantile(noisy, points, target) - radius, radius


def _clamped(values: np.ndarray) -> np.ndarray:
    """``values`` (a new array, computed with overflow allowed) clamped to ``[-MAX_SCALED, MAX_SCALED]`` in place."""
    return np.clip(values, -MAX_SCALED, MAX_SCALED, out=values)
