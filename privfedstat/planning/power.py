"""Plan a private federated study before spending any budget: standard errors, interval widths, power.

:func:`plan_study` predicts, from public design information only, what the default ``glm()`` fit
(or the fit the keywords ask for) will report: each coefficient's standard error split into its
sampling and privacy parts, the interval's half-width against the non-private one, and the power
of the Wald test of ``coef = 0``. :meth:`StudyPlan.required` inverts it (the mu, the number of
sites or the rows per site for a target half-width or power); :meth:`StudyPlan.curve` and
:meth:`StudyPlan.plot` show the price of privacy against mu; :meth:`StudyPlan.compare` (and
``fit.summary(plan=...)``) sets a fit's realised privacy share next to the plan's.

How the prediction follows the fit, stage by stage (each through the function the fit itself
runs, fed with the design instead of the clients):

1. the budget plan (:func:`~privfedstat.fitting.stages.plan_budget`, with the inference task
   of :func:`~privfedstat.inference.core.plan_inference`);
2. the private scaling (:func:`~privfedstat.fitting.stages.make_scaler`): its noisy bisections
   run on the design's exact counts (``N`` times the share of design rows), so the centres and
   scales are those a fit gets without count noise (the decisions still lean by the fit's margins);
3. the clipping bounds (:func:`~privfedstat.fitting.stages.autoclip_bounds`): the same
   searches on the design's exact counts of per-sample norms (y | x integrated exactly), the pilot
   as the noise-free population FedSGD path. The search the fit runs again at its located point
   (FedIRLS's refine bounds, at theta* of the first bounds) is taken with its count noise: its
   bisection's decisions are Gaussian with the public count sd, so its result is a distribution
   over neighbouring grid points (:func:`~privfedstat.privacy.clipping.grid_quantile_outcomes`;
   at 100 sites x 100 rows and mu = 0.5 the bound B lands on 3-4 grid points 25% apart), and
   every later step is planned for each outcome of probability at least
   :data:`~privfedstat.planning.irls.LEAST_OUTCOME`;
4. the privacy noise: the estimator's own noise model for these public settings (the schedule its
   ``plan_schedule`` builds, as the fit builds it, whose stages the plan walks:
   :meth:`~privfedstat.algorithms.fedirls.schedule.IRLSSchedule.planned_noise`), at the
   H of step 5 (the Jacobian the fit reports with), averaged over the noise of the last released Hessian
   (:meth:`~privfedstat.theory.noise.IRLSNoise.expected_covariance`: the inverse of a noisy
   Hessian is larger on average than the inverse of the noise-free one, by 10-40% in sd where
   privacy noise dominates);
5. the sampling variance the fit reports at the root theta* of the clipped population equation,
   ``c H^-1`` (``c = sum_i w_i^2 / n_i``; ``c H^-1 S H^-1`` for the sandwich, S the clipped score's
   covariance), H the mean of the inference's release of the clipped score's Jacobian, each row's
   Hessian clipped at C_H (:func:`~privfedstat.planning.irls._reported`; the privacy part of step 4 is
   linearised at the same H, as the fit's is); both parts mapped to the original scale with the scaler
   (:func:`~privfedstat.inference.covariance.original_scale_map`).
   Where FedIRLS re-weighs unequal sites (``weights="optimal"``), w, the refine rounds' noise, the
   insurance and the site effects' shift are the fit's rule's
   (:func:`~privfedstat.algorithms.fedirls.site_weights.planned_weighing`) at the tau^2 the fit
   estimates where the sites share one law (docs/guide/planning.md, "Unequal site sizes").

Over the search's outcomes, the planned SE of a coefficient is the probability-weighted median
of the outcomes' SEs (the SE a typical fit reports; its sampling and privacy parts and its effect
are that outcome's) and the power is the outcomes' average power.

The test's effect is theta*'s coefficient on the original scale (the guessed coefficient
shrunk by the clipping bias), not the guess itself.

Approximations (inferred): the design's covariate sample is the population (a public pilot or
synthetic sample: the prediction is only as good as the guess); the fit's estimate is taken at
theta* (the rounds converged, no clipping-bias beyond theta*); the count noise of the private
scaling and of the first clip search is left out (their decisions lean as the fit's do), and so
is the noise of the located point the second search runs at. Accuracy against Monte Carlo:
``benchmarks/bench_power.py``, section "Planning" of ``benchmarks/RESULTS.md``.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from .._validation import check_fraction, check_mu, check_positive_float
from ..algorithms.registry import get_method
from ..families import family_type, get_family
from ..fitting.scaling import PrivateStandardize
from ..theory._population import make_spec
from ..theory.power import wald_half_width, wald_power
from .irls import Design, Unplannable, predict

__all__ = ["plan_study", "StudyPlan", "Unplannable"]

#: what every plan says about itself
NO_SPEND = "planned from public design information only: no budget spent, no private data read"
#: bisection range of the required mu (beyond it, a larger mu changes nothing that matters)
MU_RANGE = (0.1, 1e4)
#: a planned privacy share of the variance from which the plan is optimistic (benchmarks/bench_power.py)
EDGE_SHARE = 0.5
#: largest number of sites or rows per site :meth:`StudyPlan.required` tries
MAX_COUNT = 10**7
#: largest number of values (covariate rows times response values) over which a Poisson plan integrates y | x:
#: 200 MB per float64 array
MAX_QUADRATURE = 2.5e7


def plan_study(covariates, coef, *, sizes, family="gaussian", mu: float = 2.0, names=None, noise_sd: float = 1.0,
               alpha: float = 0.05, method: str = "fedirls", scaling="private", **params) -> StudyPlan:
    """Predict a private federated GLM fit's standard errors and power from public design information.

    Nothing is released and no data are read: the inputs are what a statistician knows before the
    study (how many sites, how many rows each, a guess of the covariates' distribution and of the
    coefficients). The estimator is built as :func:`privfedstat.glm` builds it with the same
    keywords (default: FedIRLS, private scaling, ``clip="auto"``, ``inference="auto"``).

    Parameters
    ----------
    covariates : array of shape (n, d)
        A public sample of design rows, one column per coefficient and the intercept as a
        column of ones (a pilot study, a synthetic sample drawn from what is known of the
        population, a published table): its rows are taken as the population. A few thousand
        rows are enough for the moments; more for the tails that set the clipping bounds.
    coef : array of shape (d,)
        Guessed coefficients on the original scale (the effects to detect).
    sizes : sequence of int
        Rows per site n_i (public, as in the fit).
    family : {"gaussian", "logistic", "poisson"}, default "gaussian"
        A likelihood family with a scalar response (the plan integrates y | x exactly).
    mu : float, default 2.0
        GDP budget per client of the whole fit (``inf``: the non-private fit).
    names : sequence of str, optional
        Coefficient names (default ``x0, x1, ...``; ``"Intercept"`` for a column of ones).
    noise_sd : float, default 1.0
        Residual sd of the Gaussian family (ignored by the others).
    alpha : float, default 0.05
        Level of the intervals and tests.
    method : str, default "fedirls"
        A registered method whose estimator has ``plan_schedule`` (FedIRLS).
    scaling : "private", None, PrivateStandardize or FeatureBounds, default "private"
        As in :func:`privfedstat.glm` ("private": a :class:`PrivateStandardize` with the column of
        ones as intercept).
    **params
        Further estimator parameters (``clip``, ``n_rounds``, ``inference``, ...).

    Returns
    -------
    StudyPlan
    """
    X = np.asarray(covariates, dtype=np.float64)
    if X.ndim != 2 or X.shape[0] < 2 or not np.all(np.isfinite(X)):
        raise ValueError(f"covariates must be a finite (n, d) array of design rows, got shape {X.shape}.")
    d = X.shape[1]
    kind = family_type(family)
    if kind.response_levels or not kind.likelihood:
        raise ValueError(
            f"plan_study plans the families with one scalar response law per row: 'gaussian', 'logistic' (or "
            f"'binomial') and 'poisson'; got family={family!r}, which it cannot plan"
            + (": for one equation of a multinomial model, plan that class against the reference class with "
               "family='logistic' on the sizes of the rows in those two classes." if kind.response_levels else "."))
    beta = np.asarray(coef, dtype=np.float64).ravel()
    if beta.shape != (d,) or not np.all(np.isfinite(beta)):
        raise ValueError(f"coef must hold {d} finite numbers (one per column of covariates), got {coef!r}.")
    ones = [j for j in range(d) if np.all(X[:, j] == 1.0)]
    intercept = ones[0] if ones else None
    if names is None:
        names = tuple("Intercept" if j == intercept else f"x{j}" for j in range(d))
    if isinstance(names, str) or not all(isinstance(n, str) for n in names):
        raise TypeError(f"names must be a sequence of {d} strings (one per column of covariates), got {names!r}.")
    if len(names) != d:
        raise ValueError(f"names has {len(names)} entries, covariates {d} columns.")
    alpha = check_fraction(alpha, "alpha")
    noise_sd = check_positive_float(noise_sd, "noise_sd")
    law = get_family(family)
    make_spec(family=law.name, beta=beta)  # refuses families without a scalar response law
    _check_quadrature(law, X, beta)
    spec = get_method(method)
    if not hasattr(spec.cls, "plan_schedule"):
        raise ValueError(f"plan_study needs an estimator whose schedule is public before any release "
                         f"(plan_schedule): method='fedirls'; got {method!r}.")
    if scaling == "private":
        scaling = PrivateStandardize(intercept=intercept)
    estimator = spec.cls(family=law.name, mu=check_mu(mu), scaling=scaling, **params)
    design = Design(X, beta, law.name, float(noise_sd), tuple(str(n) for n in names))
    return StudyPlan(estimator, design, _sizes(sizes), float(alpha))


def _check_quadrature(law, X: np.ndarray, beta: np.ndarray) -> None:
    """Refuse a Poisson design whose means ``exp(x^T coef)`` the plan cannot integrate: the plan sums y | x over
    0, 1, ..., up to the 1 - 1e-12 quantile of the largest mean (about ``m + 7 sqrt(m)``) for every covariate row, in
    float64 arrays of ``n`` times that many values; more than :data:`MAX_QUADRATURE` of them (200 MB each) is refused."""
    if law.name != "poisson":
        return
    with np.errstate(over="ignore"):
        top = float(np.max(np.exp(X @ beta)))
    values = X.shape[0] * (top + 8.0 * math.sqrt(top) + 8.0)
    if not values <= MAX_QUADRATURE:
        raise ValueError(f"coef gives Poisson means exp(x^T coef) up to {top:.3g} on the covariate rows: the plan would "
                         f"integrate y | x over {values:.3g} values (at most {MAX_QUADRATURE:.3g}). Poisson "
                         "coefficients are on the log scale (coef b multiplies the rate by e^b per unit of its column): "
                         "check coef and the columns' units, or give fewer covariate rows.")


def _sizes(sizes) -> np.ndarray:
    n = np.asarray(sizes, dtype=np.float64).ravel()
    if n.size == 0 or np.any(~(n >= 1)) or np.any(n != np.floor(n)):
        raise ValueError(f"sizes must be positive integers (rows per site), got {sizes!r}.")
    return n.astype(np.int64)


class StudyPlan:
    """The predicted precision and power of one planned fit (see :func:`plan_study`).

    Attributes
    ----------
    mu : float
        GDP budget per client.
    sizes : ndarray of int
        Rows per site.
    alpha : float
    frame : pandas.DataFrame
        One row per coefficient: ``coef`` (the guess), ``effect`` (what the fit estimates: theta*
        on the original scale), ``se`` (the SE a typical fit reports: the median over the bound
        search's outcomes) and its parts ``se_sampling`` and ``se_privacy``
        (``se^2 = se_sampling^2 + se_privacy^2``), ``privacy_share`` (``se_privacy^2 / se^2``),
        ``se_nonprivate`` (the mu = inf fit's), ``width_ratio`` (``se / se_nonprivate``: the
        interval's width against the non-private one), ``half_width`` (``z_{1 - alpha/2} se``),
        ``power`` (two-sided Wald test of ``coef = 0`` at level alpha, averaged over the search's
        outcomes) and ``power_nonprivate``.
    settings : dict
        The public settings the prediction resolved: budgets of the stages, B, C_H and the share of
        clipped rows (each with its probabilities where the search's noise spreads it), cov_type.
    """

    def __init__(self, estimator, design: Design, sizes: np.ndarray, alpha: float, public: dict | None = None) -> None:
        self._estimator = estimator
        self._design = design
        self.mu = float(estimator.mu)
        self.sizes = sizes
        self.alpha = alpha
        private = predict(estimator, design, sizes)
        if public is None:
            public = private if math.isinf(self.mu) else predict(_with(estimator, mu=math.inf), design, sizes)
        self._public = public  # the mu = inf prediction: the same for every mu
        prob, sampling, privacy, effects = (private[k] for k in ("prob", "sampling", "privacy", "effect"))
        cases_se = np.sqrt(sampling + privacy)
        typical = _weighted_median_index(prob, cases_se)
        d = np.arange(cases_se.shape[1])
        se_s, se_p, effect = np.sqrt(sampling[typical, d]), np.sqrt(privacy[typical, d]), effects[typical, d]
        se = np.hypot(se_s, se_p)
        se_np = np.sqrt(public["sampling"][0])
        self.settings = private["settings"]
        self.frame = pd.DataFrame({
            "coef": design.coef, "effect": effect, "se": se, "se_sampling": se_s, "se_privacy": se_p,
            "privacy_share": se_p**2 / se**2, "se_nonprivate": se_np, "width_ratio": se / se_np,
            "half_width": wald_half_width(se, alpha), "power": prob @ wald_power(effects, cases_se, alpha),
            "power_nonprivate": wald_power(public["effect"][0], se_np, alpha),
        }, index=pd.Index(design.names, name="term"))

    # ------------------------------------------------------------------ variations
    def at(self, *, mu: float | None = None, sizes=None) -> StudyPlan:
        """The same design planned at another ``mu`` and/or other site sizes."""
        est = self._estimator if mu is None else _with(self._estimator, mu=check_mu(mu))
        if sizes is None:
            return StudyPlan(est, self._design, self.sizes, self.alpha, self._public)
        return StudyPlan(est, self._design, _sizes(sizes), self.alpha)

    def required(self, term: str, *, power: float | None = None, half_width: float | None = None,
                 vary: str = "mu") -> StudyPlan:
        """The plan at the smallest ``mu``, number of sites or rows per site that reaches a target for ``term``.

        Parameters
        ----------
        term : str
            A coefficient name.
        power, half_width : float
            The target: the Wald test's power at least ``power``, or the interval's half-width at
            most ``half_width`` (give one).
        vary : {"mu", "sites", "rows"}, default "mu"
            What to change: mu (bisection on its logarithm, to 1%); the number of sites (the
            current sizes repeated in turn); the rows per site (every site scaled in proportion,
            searched on the mean size).

        Returns
        -------
        StudyPlan
            At the value found (read ``.mu`` or ``.sizes``).

        Raises
        ------
        ValueError
            When the target is out of reach (e.g. the non-private fit misses it: more data, not
            more mu, is needed).
        """
        if (power is None) == (half_width is None):
            raise ValueError("give exactly one target: power= or half_width=.")
        if term not in self.frame.index:
            raise ValueError(f"term {term!r} is not a coefficient; they are {list(self.frame.index)}.")
        if power is not None:
            power = check_fraction(power, "power")  # a probability: 1 is reached by no finite study
        else:
            half_width = check_positive_float(half_width, "half_width")

        def meets(plan: StudyPlan | None) -> bool:
            if plan is None:
                return False
            row = plan.frame.loc[term]
            return bool(row["power"] >= power) if power is not None else bool(row["half_width"] <= half_width)

        what = f"power {power:g}" if power is not None else f"half-width {half_width:g}"
        if vary == "mu":
            return self._required_mu(meets, what, term)
        base = self.sizes.astype(np.float64)
        if vary == "sites":
            def build(k: int) -> StudyPlan | None:
                return _plannable(self.at, sizes=base[np.arange(k) % base.size])
        elif vary == "rows":
            def build(k: int) -> StudyPlan | None:
                return _plannable(self.at, sizes=np.maximum(1, np.round(k * base / base.mean())))
        else:
            raise ValueError(f"vary must be 'mu', 'sites' or 'rows', got {vary!r}.")
        return _smallest_count(build, meets, f"{what} for {term!r}")

    def _required_mu(self, meets, what: str, term: str) -> StudyPlan:
        lo, hi = (math.log(v) for v in MU_RANGE)
        if not meets(_plannable(self.at, mu=math.exp(hi))):
            raise ValueError(f"{what} for {term!r} is out of reach at any mu with these sizes (N = {int(self.sizes.sum())})"
                             ": the sampling variance alone is too large; plan more sites or rows "
                             "(vary='sites' or 'rows').")
        if meets(_plannable(self.at, mu=math.exp(lo))):
            return self.at(mu=math.exp(lo))
        while hi - lo > 0.01:
            mid = 0.5 * (lo + hi)
            lo, hi = (lo, mid) if meets(_plannable(self.at, mu=math.exp(mid))) else (mid, hi)
        return self.at(mu=math.exp(hi))

    def curve(self, mus) -> pd.DataFrame:
        """The plan's ``se``, ``half_width``, ``width_ratio``, ``privacy_share`` and ``power`` at each mu in ``mus``.

        Returns a tidy DataFrame: one row per mu and term (columns ``mu``, ``term`` and those of
        :attr:`frame`); a mu at which the fit has no estimate (:class:`Unplannable`) has no rows.
        """
        plans = {float(mu): _plannable(self.at, mu=float(mu)) for mu in mus}
        rows = [plan.frame.reset_index().assign(mu=mu) for mu, plan in plans.items() if plan is not None]
        if not rows:
            raise Unplannable(f"the fit has no estimate at any of these mu ({list(plans)}).")
        return pd.concat(rows, ignore_index=True)

    def plot(self, term: str, what: str = "power", mus=None, ax=None):
        """Draw ``power`` or ``half_width`` of ``term`` against mu (log axis), with the non-private line.

        Parameters
        ----------
        term : str
        what : {"power", "half_width"}, default "power"
        mus : sequence of float, optional
            Default 25 values from 0.25 to 16 (and the plan's own mu, marked).
        ax : matplotlib Axes, optional

        Returns
        -------
        matplotlib.axes.Axes
        """
        import matplotlib.pyplot as plt

        if what not in ("power", "half_width"):
            raise ValueError(f"what must be 'power' or 'half_width', got {what!r}.")
        mus = np.geomspace(0.25, 16.0, 25) if mus is None else np.asarray(mus, dtype=np.float64)
        frame = self.curve(mus)
        frame = frame[frame["term"] == term]
        row = self.frame.loc[term]
        reference = row["power_nonprivate"] if what == "power" else wald_half_width(row["se_nonprivate"], self.alpha)
        if ax is None:
            ax = plt.subplots(figsize=(5.5, 3.5))[1]
        ax.plot(frame["mu"], frame[what], "-", label=f"private ({self._estimator.method})")
        ax.axhline(float(reference), color="grey", ls="--", label="non-private (mu = inf)")
        if math.isfinite(self.mu):
            ax.plot([self.mu], [row[what]], "o", color="C3", label=f"planned mu = {self.mu:g}")
        ax.set_xscale("log")
        ax.set_xlabel("mu (GDP budget per site)")
        ax.set_ylabel("power of the Wald test" if what == "power" else f"{100 * (1 - self.alpha):g}% interval half-width")
        n = self.sizes
        ax.set_title(f"{term}: {n.size} sites, {int(n.sum())} rows", fontsize=10)
        ax.legend(loc="best", fontsize=8)
        return ax

    # ------------------------------------------------------------------ against a fit
    def compare(self, fit) -> pd.DataFrame:
        """The plan next to a private fit's own inference: standard errors and privacy shares of the variance.

        Columns ``se_planned``, ``se_fit`` (the fit's ``bse_``), ``privacy_share_planned`` and
        ``privacy_share_fit`` (``fit.inference_.privacy_share``).
        """
        result = getattr(fit, "inference_", None)
        if result is None or result.cov_privacy is None:
            raise ValueError("compare needs a fit with model or sandwich inference (its covariance has a privacy part).")
        realised = result.privacy_share
        if realised.size != len(self.frame):
            raise ValueError(f"the fit has {realised.size} coefficients, the plan {len(self.frame)}.")
        return pd.DataFrame({"se_planned": self.frame["se"].to_numpy(), "se_fit": np.ravel(result.bse),
                             "privacy_share_planned": self.frame["privacy_share"].to_numpy(),
                             "privacy_share_fit": realised}, index=self.frame.index)

    def __repr__(self) -> str:
        n = self.sizes
        head = (f"StudyPlan: {self._estimator.method}, {self._design.family}, {n.size} sites "
                f"({int(n.min())}-{int(n.max())} rows, N = {int(n.sum())}), mu = {self.mu:g}, alpha = {self.alpha:g}\n"
                f"{NO_SPEND}\n"
                + ", ".join(f"{k} {v}" for k, v in self.settings.items()) + "\n")
        text = head + self.frame.to_string(float_format=lambda v: f"{v:.4g}")
        edge = list(self.frame.index[self.frame["privacy_share"] >= EDGE_SHARE])
        if edge:
            text += (f"\nNote: privacy noise is at least {EDGE_SHARE:g} of the variance of {', '.join(edge)}: there the "
                     "fits' median SEs have exceeded the plan by up to 28% and a few fits land far off "
                     "(benchmarks/RESULTS.md, Planning); plan more mu or rows.")
        return text


def _with(estimator, **params):
    """A copy of ``estimator`` with ``params`` changed."""
    return type(estimator)(**{**estimator.get_params(), **params})


def _plannable(at, **change) -> StudyPlan | None:
    """``at(**change)``, or None where that setting is :class:`Unplannable` (it meets no target)."""
    try:
        return at(**change)
    except Unplannable:
        return None


def _smallest_count(build, meets, what: str) -> StudyPlan:
    """``build(k)`` at the smallest integer k >= 1 for which ``meets`` holds (doubling, then bisection)."""
    hi = 1
    while not meets(build(hi)):
        if hi >= MAX_COUNT:
            raise ValueError(f"{what} is out of reach with up to {MAX_COUNT} (check the design and the target).")
        hi *= 2
    lo = hi // 2  # fails (or 0)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if meets(build(mid)) else (mid, hi)
    return build(hi)


def _weighted_median_index(prob: np.ndarray, values: np.ndarray) -> np.ndarray:
    """Per column of ``values`` (cases x coefficients), the row at the ``prob``-weighted median."""
    order = np.argsort(values, axis=0, kind="stable")
    cumulative = np.cumsum(prob[order], axis=0)
    at = np.argmax(cumulative >= 0.5 * prob.sum(), axis=0)
    return order[at, np.arange(values.shape[1])]
