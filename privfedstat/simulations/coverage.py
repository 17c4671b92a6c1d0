"""The coverage study of private confidence intervals: does a 95% interval cover beta_true 95% of the time?

Design: logistic and Poisson GLMs with an intercept and four
covariates equicorrelated at ``rho = 0.5`` (:class:`~privfedstat.simulations.GLMDesign`, default
beta: Poisson means stay moderate), N in {2000, 20000} rows split equally over m in {10, 50}
sites, mu in {1, 2, inf} per site. Every method runs with **its defaults** (step sizes, iteration
counts, ``clip="auto"``, ``inference="auto"``), as a user would fit it, not with the paper's
Section 4 settings: FedIRLS (the default method of :func:`privfedstat.glm`; glm() also rescales
privately by default, which the study leaves out because the simulated covariates are already
standardised: an inferred choice), FedSGD, FedAvg and FedNewton, and the non-private pooled MLE
(:class:`~privfedstat.PooledMLE`) as the reference: its coverage is what the design itself allows
at this N (the large-sample theory behind every interval), and its standard errors give the
non-private width.

One row per (replicate, method, coefficient): ``covered`` (beta_true inside
``est.conf_int(alpha)``), ``width``, ``np_width = 2 z_{1-alpha/2} SE_MLE`` (the pooled MLE's
model-based standard error on the same data), ``width_ratio = width / np_width`` (the price of
privacy in interval width), ``pred_ratio = sqrt(diag(cov) / diag(cov_sampling))`` of the fit's
own :class:`~privfedstat.inference.results.InferenceResult` (the ratio its variance decomposition
predicts), ``converged``, the warnings of the fit and its time. A fit that raises (e.g.
:class:`~privfedstat.exceptions.DivergenceError`) gives rows with ``covered`` NaN and the error
text in ``error``: fits are deterministic per replicate, so an error that stopped the study would
stop it again on every resume; :func:`summarise_coverage` reports the fraction failed per cell and
the study's ``errors`` table lists the errors.
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass
from statistics import NormalDist

import numpy as np
import pandas as pd

from ..algorithms.registry import get_method
from ..data.federated import FederatedData
from ..fitting.base import FederatedEstimator
from .allocations import Equal
from .dgp import GLMDesign
from .runner import Fit, Measure, MonteCarloConfig, Scenario
from .study import Study, Table, param

__all__ = ["COVERAGE", "COVERAGE_METHODS", "coverage_scenarios", "coverage_rows", "make_default_estimator",
           "summarise_coverage", "binomial_halfwidth", "plot_coverage", "CoverageConfig", "STUDY", "ALPHA", "TARGET"]

INF = float("inf")
#: nominal level of the intervals (95%)
ALPHA = 0.05
#: the band the coverage of a 95% interval should lie in
TARGET = (0.93, 0.97)
#: the study's grid
FAMILIES = ("logistic", "poisson")
TOTALS = (2000, 20000)
CLIENTS = (10, 50)
MUS = (1.0, 2.0, INF)
RHO = 0.5
#: the non-private reference: its standard errors give the non-private width, its coverage what the design allows
REFERENCE = "PooledMLE"
#: the methods of the study: the four private ones with their defaults, then the reference
COVERAGE_METHODS = ("FedIRLS", "FedSGD", "FedAvg", "FedNewton", REFERENCE)


def coverage_scenarios(*, families=FAMILIES, totals=TOTALS, clients=CLIENTS, mus=MUS, rho: float = RHO,
                       correlation: str = "equi", min_rows: int = 0) -> list[Scenario]:
    """The cells of the coverage study: every (family, N, m, mu), N split equally over m sites, with at least
    ``min_rows`` rows per site.

    Parameters
    ----------
    families : sequence of {"logistic", "poisson"}
    totals : sequence of int
        Total rows N; each must be a multiple of every m.
    clients : sequence of int
        Numbers of sites m.
    mus : sequence of float
        GDP budgets per site (``inf``: non-private).
    rho, correlation
        Covariate correlation (see :class:`~privfedstat.simulations.GLMDesign`).
    min_rows : int
        Keep only the (N, m) with ``N / m >= min_rows`` rows per site (e.g. 200).
    """
    if min_rows < 0:
        raise ValueError(f"min_rows must be >= 0 rows per site, got {min_rows}.")
    out = []
    for family in families:
        design = GLMDesign(family, rho=rho, correlation=correlation)
        for N in totals:
            for m in clients:
                if N < min_rows * m:
                    continue
                if N % m:
                    raise ValueError(f"N = {N} rows cannot be split equally over m = {m} sites; "
                                     "choose N a multiple of every m.")
                out.extend(Scenario(design, m, Equal(N // m), mu, labels={"study": "coverage"}) for mu in mus)
    return out


def make_default_estimator(method: str, scenario: Scenario,
                           random_state: np.random.SeedSequence | int | None) -> FederatedEstimator:
    """``method`` (any registered one) with its defaults and ``scenario``'s family: what a user gets.

    A private method also gets the scenario's mu and clip; a non-private baseline is fitted without
    privacy whatever the scenario's mu (it is the yardstick).
    """
    if scenario.n_iter is not None:
        raise ValueError("the coverage study runs every method with its default iteration counts; "
                         f"build its scenarios with n_iter=None, got {scenario.n_iter}.")
    spec = get_method(method)
    if not spec.private:
        return spec.cls(family=scenario.design.family)
    return spec.cls(family=scenario.design.family, mu=scenario.mu, clip=scenario.clip, random_state=random_state)


def _pooled_se(fits: list[Fit], data: FederatedData, family: str) -> np.ndarray:
    """Model-based standard errors of the reference (pooled MLE) on ``data`` (reused from the fits if it is one)."""
    for f in fits:
        if f.method == REFERENCE and f.estimator is not None:
            return np.ravel(f.estimator.bse_, order="F")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the baseline's PrivacyLeakWarning: it is the yardstick
        return np.ravel(get_method(REFERENCE).cls(family=family).fit(data).bse_, order="F")


def coverage_rows(scenario: Scenario, rep: int, data: FederatedData, fits: list[Fit],
                  alpha: float = ALPHA) -> list[dict]:
    """One row per (method, coefficient) of one replicate: coverage, width, width ratios (see module)."""
    z = NormalDist().inv_cdf(1 - alpha / 2)
    np_width = 2 * z * _pooled_se(fits, data, scenario.design.family)
    truth = scenario.design.beta_true
    sizes = data.sizes
    base = {**scenario.columns(), "N": int(sizes.sum()), "n_mean": float(sizes.mean()),
            "rho": scenario.design.rho, "rep": rep}
    rows = []
    for f in fits:
        est = f.estimator
        row = {**base, "method": f.method, **dict.fromkeys(_FIT_COLUMNS, math.nan), "seconds": f.seconds,
               "warnings": ";".join(f.warnings) or "none", "error": f.error or "none"}
        if est is None:
            rows.extend({**row, "coef": f"x{j}", "j": j, "truth": truth[j], "np_width": np_width[j]}
                        for j in range(truth.size))
            continue
        ci = est.conf_int(alpha)
        res = est.inference_
        lower, upper = ci["lower"].to_numpy(), ci["upper"].to_numpy()
        estimate = np.ravel(est.coef_, order="F")
        se = np.ravel(est.bse_, order="F")
        pred = (np.sqrt(np.diag(res.cov) / np.diag(res.cov_sampling)) if res.cov_sampling is not None
                else np.full(truth.size, math.nan))
        converged = math.nan if est.converged_ is None else float(bool(np.all(est.converged_)))
        for j, name in enumerate(ci.index):
            width = upper[j] - lower[j]
            rows.append({**row, "coef": str(name), "j": j, "truth": truth[j], "estimate": estimate[j], "se": se[j],
                         "lower": lower[j], "upper": upper[j], "covered": _covered(lower[j], truth[j], upper[j]),
                         "width": width, "np_width": np_width[j], "width_ratio": width / np_width[j],
                         "pred_ratio": pred[j], "cov_type": res.cov_type, "inference_mu": res.mu,
                         "client_mu": est.privacy_.mu, "converged": converged})
    return rows


def _covered(lower: float, truth: float, upper: float) -> float:
    """1.0 if the interval holds the truth, 0.0 if not, NaN where the fit withheld its interval (not converged)."""
    return float(lower <= truth <= upper) if math.isfinite(lower) and math.isfinite(upper) else math.nan


#: columns of a coverage row after the scenario's and the method (NaN where a fit failed), in order
_FIT_COLUMNS = ("coef", "j", "truth", "estimate", "se", "lower", "upper", "covered", "width", "np_width",
                "width_ratio", "pred_ratio", "cov_type", "inference_mu", "client_mu", "converged")

#: the coverage study: methods at their defaults, one row per (method, coefficient); errors of a
#: fit are recorded (``error``), counted and listed, not raised
COVERAGE = Measure("coverage", COVERAGE_METHODS, make_default_estimator, coverage_rows, tolerate=(Exception,))


def binomial_halfwidth(reps, level: float = 0.95, nominal: float = 1 - ALPHA):
    """Half-width of the ``level`` band of an empirical coverage over ``reps`` replicates at ``nominal``.

    ``z_{(1+level)/2} sqrt(nominal (1 - nominal) / reps)`` (normal approximation to the binomial).
    """
    return NormalDist().inv_cdf((1 + level) / 2) * np.sqrt(nominal * (1 - nominal) / np.asarray(reps, dtype=float))


CELL = ["family", "N", "m", "mu", "method"]
#: regime of a cell (inferred, and fixed before looking at coverage):
#: the fits converge (``converged_``, judged from released values) and do not fail
MIN_CONVERGED = 0.9
MAX_FAILED = 0.01


def _per_coefficient(df: pd.DataFrame) -> pd.DataFrame:
    """Per (cell, coefficient): coverage, |bias| / sd of the estimates, sd / rms of the standard errors."""
    g = df.assign(err=df["estimate"] - df["truth"], se2=df["se"] ** 2).groupby(CELL + ["coef"], sort=False)
    sd = g["estimate"].std()
    return pd.DataFrame({"covered": g["covered"].mean(), "bias_sd": g["err"].mean().abs() / sd,
                         "sd_se": sd / np.sqrt(g["se2"].mean())})


def summarise_coverage(df: pd.DataFrame, target: tuple[float, float] = TARGET) -> pd.DataFrame:
    """Per cell (family, N, m, mu, method): coverage, width ratios, diagnostics, regime and verdict.

    Columns

    * ``n_mean`` (rows per site), ``reps``;
    * ``coverage``: mean over coefficients and replicates (failed fits left out);
      ``coverage_min`` / ``coverage_max``: over coefficients of the per-coefficient coverage;
      ``band``: the binomial 95% half-width of one coefficient's coverage at the nominal level
      (:func:`binomial_halfwidth`); ``mle_coverage``: coverage of the PooledMLE reference in the
      same (family, N, m, mu) cell, where the table has it (what the design itself allows);
    * ``width_ratio`` / ``width_ratio_median``: mean / median of private over non-private width;
      ``pred_ratio`` / ``pred_ratio_median``: the same of the predicted ratio;
    * why coverage misses: ``bias_sd``, the largest over coefficients of |mean(estimate - truth)|
      / sd(estimate) (bias, e.g. of clipping, in units of the estimator's spread), and ``sd_se``,
      the mean over coefficients of sd(estimate) / rms(se) (above 1: the standard errors are too
      small);
    * ``seconds`` (mean per fit); ``converged`` (fraction of the fits that finished) and
      ``failed`` (fraction of fits that raised);
    * ``on_target``: ``coverage`` lies in ``target`` and every coefficient's coverage in
      ``target`` widened by ``band`` (the binomial noise of one coefficient over ``reps``
      replicates); ``regime``: "yes" where at least ``MIN_CONVERGED`` of the fits converged and
      at most ``MAX_FAILED`` failed (inferred criteria), else the reason; ``verdict``: "met" /
      "missed" inside the regime, "outside regime" otherwise.
    """
    need = CELL + ["rep", "coef", "truth", "estimate", "se", "covered", "width_ratio", "pred_ratio", "seconds",
                   "converged", "n_mean"]
    missing = set(need) - set(df.columns)
    if missing:
        raise ValueError(f"the results table lacks column(s) {sorted(missing)}; is it a coverage study's table?")
    lo, hi = target
    coef = _per_coefficient(df).groupby(level=CELL, sort=False)
    fits = df.drop_duplicates(CELL + ["rep"])
    by_fit = fits.assign(failed=fits["estimate"].isna()).groupby(CELL, sort=False)  # raised (withheld: covered NaN)
    g = df.groupby(CELL, sort=False)
    out = pd.DataFrame({
        "n_mean": by_fit["n_mean"].mean(),
        "reps": by_fit["rep"].count(),
        "coverage": g["covered"].mean(),
        "coverage_min": coef["covered"].min(),
        "coverage_max": coef["covered"].max(),
        "width_ratio": g["width_ratio"].mean(),
        "width_ratio_median": g["width_ratio"].median(),
        "pred_ratio": g["pred_ratio"].mean(),
        "pred_ratio_median": g["pred_ratio"].median(),
        "bias_sd": coef["bias_sd"].max(),
        "sd_se": coef["sd_se"].mean(),
        "seconds": by_fit["seconds"].mean(),
        "converged": by_fit["converged"].mean(),
        "failed": by_fit["failed"].mean(),
    }).reset_index()
    out["band"] = binomial_halfwidth(out["reps"])
    ref = out.loc[out["method"] == REFERENCE, CELL[:-1] + ["coverage"]].rename(columns={"coverage": "mle_coverage"})
    out["mle_coverage"] = out[CELL[:-1]].merge(ref, on=CELL[:-1], how="left")["mle_coverage"].to_numpy()
    out["on_target"] = (out["coverage"].between(lo, hi) & (out["coverage_min"] >= lo - out["band"])
                        & (out["coverage_max"] <= hi + out["band"]))
    regime = []
    for r in out.itertuples():
        reasons = [f"{r.converged:.0%} converged"] if r.converged < MIN_CONVERGED else []  # NaN: none finished
        reasons += [f"{r.failed:.0%} failed"] if r.failed > MAX_FAILED else []
        regime.append("; ".join(reasons) or "yes")
    out["regime"] = regime
    out["verdict"] = np.where(out["regime"] != "yes", "outside regime", np.where(out["on_target"], "met", "missed"))
    return out


def plot_coverage(summary: pd.DataFrame, *, target: tuple[float, float] = (0.93, 0.97), nominal: float = 0.95,
                  title: str | None = None):
    """Coverage study figure: per family, coverage per cell and width ratio against its prediction.

    Left panels: coverage of nominal ``nominal`` intervals per cell (N, m, mu) and method, the
    marker at the mean over coefficients and the bar from the lowest to the highest coefficient;
    the shaded band is the binomial 95% band of one coefficient's coverage around ``nominal`` at
    the median number of replicates, the dashed lines the ``target``. Right panels: median width
    ratio (private / non-private interval) against the median ratio the fit's covariance
    predicts (``sqrt(cov / cov_sampling)``), with the diagonal (medians: one exploding interval
    would move a mean off the axes).

    Parameters
    ----------
    summary : DataFrame
        :func:`~privfedstat.simulations.coverage.summarise_coverage` output.

    Returns
    -------
    matplotlib.figure.Figure
    """
    from matplotlib.figure import Figure
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    need = {"family", "N", "m", "mu", "method", "reps", "coverage", "coverage_min", "coverage_max",
            "width_ratio_median", "pred_ratio_median"}
    missing = need - set(summary.columns)
    if missing:
        raise ValueError(f"the summary lacks column(s) {sorted(missing)}; pass summarise_coverage's output.")
    families = list(dict.fromkeys(summary["family"]))
    methods = list(dict.fromkeys(summary["method"]))
    fig = Figure(figsize=(13, 0.6 + 3.8 * len(families)))
    axes = fig.subplots(len(families), 2, squeeze=False, gridspec_kw={"width_ratios": [2.2, 1]})
    colours = {m: f"C{i}" for i, m in enumerate(methods)}
    half = float(binomial_halfwidth(summary["reps"].median(), nominal=nominal))
    inside = summary["regime"] == "yes" if "regime" in summary else pd.Series(True, index=summary.index)
    for (ax_cov, ax_w), family in zip(axes, families):
        sub = summary[summary["family"] == family]
        cells = list(dict.fromkeys(zip(sub["N"], sub["m"], sub["mu"])))
        pos = {c: i for i, c in enumerate(cells)}
        ax_cov.axhspan(nominal - half, nominal + half, color="0.85")
        for t in target:
            ax_cov.axhline(t, color="0.4", ls="--", lw=0.8)
        step = 0.8 / len(methods)
        for k, method in enumerate(methods):
            g = sub[sub["method"] == method]
            x = np.array([pos[c] for c in zip(g["N"], g["m"], g["mu"])]) + (k - (len(methods) - 1) / 2) * step
            for filled in (True, False):  # hollow markers: cells outside the estimator's regime
                sel = (inside[g.index] == filled).to_numpy()
                if sel.any():
                    gs = g[sel]
                    ax_cov.errorbar(x[sel], gs["coverage"], fmt="o", ms=4, lw=1, color=colours[method],
                                    mfc=colours[method] if filled else "white",
                                    yerr=[gs["coverage"] - gs["coverage_min"], gs["coverage_max"] - gs["coverage"]])
            ax_w.scatter(g["pred_ratio_median"], g["width_ratio_median"], s=18, color=colours[method])
        ax_cov.set_xticks(range(len(cells)))
        ax_cov.set_xticklabels([f"N={N}\nm={m}\nmu={mu:g}" for N, m, mu in cells], fontsize=7)
        ax_cov.set_ylabel(f"coverage of {nominal:.0%} intervals")
        ax_cov.set_title(f"{family}: coverage per cell (bar: range over coefficients)")
        ax_cov.grid(True, axis="y", alpha=0.3)
        pred, width = sub["pred_ratio_median"], sub["width_ratio_median"]
        ok = np.isfinite(pred) & np.isfinite(width) & (pred > 0) & (width > 0)
        if ok.any():
            lo = min(pred[ok].min(), width[ok].min(), 1.0)
            hi = max(pred[ok].max(), width[ok].max(), 1.0)
            ax_w.plot([lo, hi], [lo, hi], color="0.4", lw=0.8, ls="--")
        ax_w.set_xlabel("predicted width ratio sqrt(cov / cov_sampling), median")
        ax_w.set_ylabel("width / non-private width, median")
        ax_w.set_title(f"{family}: price of privacy")
        ax_w.grid(True, which="both", alpha=0.3)
    handles = [Line2D([], [], marker="o", ls="", color=colours[m], label=m) for m in methods]
    handles += [Line2D([], [], marker="o", ls="", color="0.3", mfc="white", label="outside regime"),
                Patch(color="0.85", label=f"binomial 95% band (±{half:.3f})"),
                Line2D([], [], color="0.4", ls="--", lw=0.8, label=f"target {target[0]:.0%}-{target[1]:.0%}")]
    fig.legend(handles=handles, loc="upper center", ncol=len(handles), fontsize=8, frameon=False,
               bbox_to_anchor=(0.5, 0.965 if title else 0.995))
    if title:
        fig.suptitle(title)
    fig.tight_layout(rect=(0, 0, 1, 0.95 if title else 0.97))
    return fig


@dataclass(frozen=True, kw_only=True)
class CoverageConfig(MonteCarloConfig):
    """Settings of the coverage study: the part of its grid to run (every method runs with its defaults)."""

    families: tuple[str, ...] = param("GLM families, e.g. logistic,poisson", FAMILIES, flag="family")
    mus: tuple[float, ...] = param("GDP budgets per site, e.g. 1,2,inf", MUS, flag="mu")
    totals: tuple[int, ...] = param("total rows N, each a multiple of every m, e.g. 2000,20000", TOTALS, flag="n")
    clients: tuple[int, ...] = param("numbers of sites m (N split equally), e.g. 10,50,400", CLIENTS, flag="sites")
    methods: tuple[str, ...] = param(f"methods to run, a subset of {','.join(COVERAGE_METHODS)}", COVERAGE_METHODS,
                                     flag="method")
    min_rows: int = param("run only the (N, m) cells with at least this many rows per site N / m, e.g. 200", 0,
                          flag="min-rows-per-site")


def _run(config: CoverageConfig, stem, progress: bool) -> dict[str, pd.DataFrame]:
    unknown = sorted(set(config.methods) - set(COVERAGE_METHODS))
    if unknown:
        raise ValueError(f"unknown coverage method(s) {unknown}; choose from {', '.join(COVERAGE_METHODS)}.")
    measure = COVERAGE if config.methods == COVERAGE_METHODS else Measure(
        "coverage", tuple(config.methods), make_default_estimator, coverage_rows, tolerate=(Exception,))
    scenarios = coverage_scenarios(families=config.families, totals=config.totals, clients=config.clients,
                                   mus=config.mus, min_rows=config.min_rows)
    if not scenarios:
        raise ValueError(f"no cell of the grid (N in {config.totals}, m in {config.clients}) has "
                         f"--min-rows-per-site {config.min_rows} rows per site; lower it or add --n / --sites.")
    mc = config.monte_carlo(scenarios, f"{stem}.csv", progress, measure=measure)
    return {"": mc.run()}


def _summarise(frames, config) -> dict[str, Table]:
    df = frames[""]
    tables = {"summary": Table(summarise_coverage(df), "per cell: coverage (fraction; min / max over coefficients; "
                               "mle: the pooled MLE's), width and predicted width ratios, bias_sd = max |bias| / sd, "
                               "sd_se = sd / rms(se), seconds per fit, fractions converged and failed")}
    errors = df.loc[df["error"] != "none"].drop_duplicates(["scenario", "method", "rep"])
    if len(errors):
        tables["errors"] = Table(errors.groupby(["method", "error"]).size().rename("fits").reset_index(),
                                 "fits that raised (their rows have covered = NaN)")
    return tables


def _figures(frames, tables, config) -> dict:
    summary = tables["summary"].frame
    return {"": plot_coverage(summary, title=f"Coverage of 95% intervals, {int(summary['reps'].min())}+ replicates "
                                             "per cell")}


STUDY = Study("coverage", "coverage and width of private 95% intervals (logistic, Poisson; N, m, mu grid; methods at "
              "their defaults)", CoverageConfig(), _run, _summarise, _figures)
