"""The core paper's MSE studies (Section 4, Appendix B): each figure's grid of scenarios, its plot, its study.

Settings the paper states are used as stated (100 replicates; FedSGD K=50, eta=0.5; FedHybrid
K1=30, K2=20; FedAvg K=50, R=2; FedNewton K=50, R=1; the m, n and allocation grids of Sections
4.1-4.5). The settings it leaves out (mu = 2, the m grids, Figs. 4/15's design, the clipping rule),
chosen here and overridable through the functions' arguments, and each figure's grid are tabled in
docs/guide/papers.md ("Settings of the Section 4 studies").

Each study's summary puts :func:`~privfedstat.predict_mse` (through
:func:`~privfedstat.simulations.compare_to_theory`) beside the empirical mean MSE and its
Monte-Carlo standard error, and its figure draws the prediction as a dashed line per method; a
second table (``-slopes.csv``, :func:`~privfedstat.simulations.theory_slopes`) puts the log-log slopes
of Monte Carlo, of the paper's bound and of the prediction side by side.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, replace

import numpy as np
import pandas as pd

from .allocations import Equal, FixedTotal, LogNormal, Uniform
from .dgp import GLMDesign
from .runner import METHODS, MonteCarloConfig, Scenario, summarise
from .study import Study, Table, listof, param
from .theory_comparison import compare_to_theory, theory_slopes

__all__ = ["MSEGrid", "GRIDS", "get_grid", "MSEConfig", "plot_mse", "plot_grid", "predictions", "summary_long",
           "demo_sentences",
           "STUDIES"]

INF = float("inf")
SET1_M = (20, 30, 40, 50, 60)
SET1_N = (30, 50, 70, 90, 110)
SET1_RANGES = ((10, 90), (20, 80), (30, 70), (60, 160), (80, 140), (100, 120))
SET2_M = (60, 80, 100, 120, 140)
SET2_ALLOC = (Equal(400), Uniform(100, 700), LogNormal(5.5, 1.0))
SET3_K = (10, 25, 50, 100, 150, 200, 300)
SET3_MU = (2.0, 6.0, INF)
SET4_M = (25, 50, 100, 200, 400)


@dataclass(frozen=True)
class MSEGrid:
    """The scenarios of one figure of Section 4 and how the figure draws them.

    Attributes
    ----------
    name : str
        e.g. ``"fig5"``.
    description : str
        One line.
    family : str
        Default family (the paper's figure); ``scenarios(family=...)`` can change it.
    methods : tuple of str
        Methods shown in the figure.
    x, line, panel : str
        Tidy columns for the x axis, the lines and the panels of the figure.
    build : callable
        ``build(family, mu, clip) -> list[Scenario]``.
    """

    name: str
    description: str
    family: str
    methods: tuple[str, ...]
    x: str
    line: str
    panel: str
    build: Callable[..., list[Scenario]]

    def scenarios(self, *, family: str | None = None, mu: float = 2.0, clip: float | str = "auto",
                  newton_noise: str | None = None, hessian_floor: float | str | None = None) -> list[Scenario]:
        """The scenarios of this figure for ``family`` (default: the figure's own) and FedNewton's settings."""
        family = family or self.family
        return [replace(s, newton_noise=newton_noise, hessian_floor=hessian_floor,
                        labels={"study": self.name, **s.labels})
                for s in self.build(GLMDesign(family), mu, clip)]


def _set1_equal(design, mu, clip):
    return [Scenario(design, m, Equal(n), mu, clip=clip, labels={"sizes": f"n={n}"}) for n in SET1_N for m in SET1_M]


def _set1_random(design, mu, clip):
    return [Scenario(design, m, Uniform(a, b), mu, clip=clip, labels={"sizes": f"U[{a},{b}]"})
            for a, b in SET1_RANGES for m in SET1_M]


def _set2(design, mu, clip):
    return [Scenario(design, m, alloc, mu, clip=clip, labels={"sizes": alloc.label}) for alloc in SET2_ALLOC for m in SET2_M]


def _set3(design, mu, clip):
    return [Scenario(design, 20, Equal(100), mu_k, n_iter=K, clip=clip, labels={"sizes": "n=100", "privacy": f"mu={mu_k:g}"})
            for mu_k in SET3_MU for K in SET3_K]


def _set4(design, mu, clip):
    return [Scenario(design, m, FixedTotal(20000, scheme), mu, clip=clip, labels={"sizes": scheme})
            for scheme in ("equal", "uniform", "lognormal") for m in SET4_M]


_SGD_HY, _AVG_NEW = ("FedSGD", "FedHybrid"), ("FedAvg", "FedNewton")

GRIDS: dict[str, MSEGrid] = {
    s.name: s
    for s in [
        MSEGrid("fig1", "FedSGD & FedHybrid: MSE vs m for equal n in {30..110} (logistic)",
                "logistic", _SGD_HY, "m", "sizes", "method", _set1_equal),
        MSEGrid("fig2", "FedAvg & FedNewton: MSE vs m for equal n in {30..110} (logistic)",
                "logistic", _AVG_NEW, "m", "sizes", "method", _set1_equal),
        MSEGrid("fig11", "FedSGD & FedHybrid: MSE vs m, n_i ~ discrete uniform ranges (logistic)",
                "logistic", _SGD_HY, "m", "sizes", "method", _set1_random),
        MSEGrid("fig12", "FedAvg & FedNewton: MSE vs m, n_i ~ discrete uniform ranges (logistic)",
                "logistic", _AVG_NEW, "m", "sizes", "method", _set1_random),
        MSEGrid("fig13", "all four methods: MSE vs m for equal n (Poisson)",
                "poisson", METHODS, "m", "sizes", "method", _set1_equal),
        MSEGrid("fig14", "all four methods: MSE vs m, n_i ~ discrete uniform ranges (Poisson)",
                "poisson", METHODS, "m", "sizes", "method", _set1_random),
        MSEGrid("fig3", "four methods, mean n ~ 400 under three allocations, m = 60..140 (logistic)",
                "logistic", METHODS, "m", "method", "sizes", _set2),
        MSEGrid("fig6", "four methods, mean n ~ 400 under three allocations, m = 60..140 (Poisson)",
                "poisson", METHODS, "m", "method", "sizes", _set2),
        MSEGrid("fig4", "MSE vs iterations K for mu in {2, 6, inf} (logistic)",
                "logistic", METHODS, "K", "privacy", "method", _set3),
        MSEGrid("fig15", "MSE vs iterations K for mu in {2, 6, inf} (Poisson)",
                "poisson", METHODS, "K", "privacy", "method", _set3),
        MSEGrid("fig5", "N = 20000 fixed, m increasing, three allocations (logistic)",
                "logistic", METHODS, "m", "method", "sizes", _set4),
        MSEGrid("fig16", "N = 20000 fixed, m increasing, three allocations (Poisson)",
                "poisson", METHODS, "m", "method", "sizes", _set4),
    ]
}


def get_grid(name: str) -> MSEGrid:
    """Look up a figure's grid by name (``"fig1"`` ... ``"fig16"``)."""
    if name not in GRIDS:
        raise ValueError(f"unknown figure {name!r}; choose from {list(GRIDS)}.")
    return GRIDS[name]


def plot_mse(df: pd.DataFrame, *, x: str, line: str, panel: str, title: str | None = None, logx: bool = False,
             axes=None, predicted: pd.DataFrame | None = None):
    """Mean MSE (log scale) with +-2 standard-error bands: one panel per value of ``panel``.

    Parameters
    ----------
    df : DataFrame
        Tidy results with columns ``x``, ``line``, ``panel`` and ``mse``.
    x, line, panel : str
        Columns for the x axis, the lines and the panels.
    axes : sequence of matplotlib Axes or None
        One Axes per panel to draw into (their figure is returned); None creates a new Figure.
    predicted : DataFrame or None
        Columns ``x``, ``line``, ``panel`` and ``predicted_mse``: drawn as a dashed line per line
        value, in its colour (e.g. :func:`predictions`).

    Returns
    -------
    matplotlib.figure.Figure
    """
    from matplotlib.figure import Figure  # no pyplot: no global state, works without a display
    from matplotlib.ticker import NullFormatter

    missing = {x, line, panel, "mse"} - set(df.columns)
    if missing:
        raise ValueError(f"the results table lacks column(s) {sorted(missing)}.")
    panels = list(dict.fromkeys(df[panel]))
    if axes is None:
        fig = Figure(figsize=(4.2 * len(panels), 3.6))
        axes = fig.subplots(1, len(panels), sharey=True, squeeze=False)[0]
    else:
        axes = list(np.ravel(axes))
        if len(axes) != len(panels):
            raise ValueError(f"need {len(panels)} axes (one per {panel!r}), got {len(axes)}.")
        fig = axes[0].figure
    stats = df.groupby([panel, line, x], sort=False)["mse"].agg(["mean", "std", "count"]).reset_index()
    stats["se"] = stats["std"].fillna(0.0) / np.sqrt(stats["count"])
    for ax, p in zip(axes, panels):
        sub = stats[stats[panel] == p]
        for name, g in sub.groupby(line, sort=False):
            g = g.sort_values(x)
            (drawn,) = ax.plot(g[x], g["mean"], marker="o", ms=3.5, label=str(name))
            lo = np.maximum(g["mean"] - 2 * g["se"], g["mean"] * 0.05)
            ax.fill_between(g[x], lo, g["mean"] + 2 * g["se"], alpha=0.15)
            if predicted is not None:
                pr = predicted[(predicted[panel] == p) & (predicted[line] == name)].sort_values(x)
                if np.isfinite(pr["predicted_mse"].astype(float)).any():
                    ax.plot(pr[x], pr["predicted_mse"], "--", color=drawn.get_color(), lw=1, label=f"{name} (predicted)")
        ax.set_yscale("log")
        if logx:
            ax.set_xscale("log")
            ax.xaxis.set_minor_formatter(NullFormatter())  # no overlapping minor labels
        ax.set_title(str(p))
        ax.set_xlabel(x)
        ax.grid(True, which="both", alpha=0.3)
    axes[0].set_ylabel("empirical MSE")
    axes[-1].legend(fontsize=8, title=line, title_fontsize=8)
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    return fig


def plot_grid(df: pd.DataFrame, grid: MSEGrid, axes=None, predicted: pd.DataFrame | None = None):
    """Draw ``grid``'s figure from its tidy results (see :func:`plot_mse`; ``axes``: one per panel)."""
    family = df["family"].iloc[0] if "family" in df and len(df) else grid.family
    return plot_mse(df, x=grid.x, line=grid.line, panel=grid.panel, logx=grid.x == "K", axes=axes, predicted=predicted,
                    title=f"{grid.name}: {grid.description.split(' (')[0]} ({family})")


def _auto_or_float(text: str) -> float | str:
    return text if text == "auto" else float(text)


def _clip_setting(clip: str) -> float | str:
    """The Scenario's clip for a ``--clip`` value: "auto", "paper", inf for "none", else a positive number."""
    if clip in ("auto", "paper"):
        return clip
    if clip == "none":
        return math.inf
    try:
        value = float(clip)
    except ValueError:
        value = math.nan
    if not 0 < value < math.inf:
        raise ValueError(f"clip must be 'auto', 'paper', 'none' or a positive number, got {clip!r}.")
    return value


@dataclass(frozen=True, kw_only=True)
class MSEConfig(MonteCarloConfig):
    """Settings of an MSE study: the figure's grid and the budget and clipping rule of its fits."""

    grid: MSEGrid
    family: str | None = param("GLM family (default: the figure's)", None, parse=str, choices=("logistic", "poisson"))
    mu: float = param("GDP budget per client where the figure does not vary it", 2.0)
    clip: str = param("clipping rule: 'auto' (private), 'paper' (the paper's non-private rule), 'none' (no "
                      "clipping; only with mu = inf) or a number", "auto")
    newton_noise: str | None = param("FedNewton's newton_noise (default: the estimator's)", None, parse=str,
                                     choices=("paper", "private"))
    hessian_floor: float | str | None = param("FedNewton's hessian_floor: 'auto' or a number (default: the "
                                              "estimator's)", None, parse=_auto_or_float)

    sizes: tuple[str, ...] | None = param("run only these client-size settings (the 'sizes' labels, e.g. "
                                          "equal,lognormal; default: the figure's all)", None, parse=listof(str))
    m: tuple[int, ...] | None = param("run only these numbers of clients (default: the figure's m grid)", None,
                                      parse=listof(int))

    def scenarios(self) -> list[Scenario]:
        clip = _clip_setting(self.clip)
        every = self.grid.scenarios(family=self.family, mu=self.mu, clip=clip, newton_noise=self.newton_noise,
                                    hessian_floor=self.hessian_floor)
        scenarios = [s for s in every if (self.sizes is None or s.labels["sizes"] in self.sizes)
                     and (self.m is None or s.n_clients in self.m)]
        if not scenarios:  # the flags' names and the grid's values (it printed "sizes in None and m in (0,)")
            asked = [f"--{flag} {','.join(map(str, v))}" for flag, v in (("sizes", self.sizes), ("m", self.m)) if v]
            sizes = ",".join(dict.fromkeys(str(s.labels["sizes"]) for s in every))
            ms = ",".join(map(str, sorted({s.n_clients for s in every})))
            raise ValueError(f"no cell of {self.grid.name} matches {' and '.join(asked)}: its --sizes are {sizes}, "
                             f"its --m {ms}.")
        private = sorted({s.mu for s in scenarios if math.isfinite(s.mu)})
        if clip == math.inf and private:
            raise ValueError(f"clip='none' (no clipping) needs mu = inf: unclipped gradients have infinite "
                             f"sensitivity, and {self.grid.name} runs mu = {', '.join(f'{m:g}' for m in private)}; "
                             "pass --mu inf (fig4/fig15 vary mu and cannot run unclipped).")
        return scenarios


def _cells(grid: MSEGrid) -> list[str]:
    return [c for c in dict.fromkeys([grid.panel, grid.line, grid.x]) if c != "method"]


def _run(config: MSEConfig, stem, progress: bool) -> dict[str, pd.DataFrame]:
    mc = config.monte_carlo(config.scenarios(), f"{stem}.csv", progress, methods=config.grid.methods)
    return {"": mc.run()}


#: Monte-Carlo size of the predictor's population expectations in the study summaries (cheap: a
#: fig5 summary's 60 predictions take seconds; see benchmarks/RESULTS.md)
SUMMARY_N_MC = 2**11


def _compared(frame: pd.DataFrame) -> pd.DataFrame:
    return compare_to_theory(frame, design=GLMDesign(frame["family"].iloc[0]), n_mc=SUMMARY_N_MC)


def predictions(frame: pd.DataFrame, config: MSEConfig, compared: pd.DataFrame | None = None) -> pd.DataFrame:
    """:func:`~privfedstat.predict_mse` per cell and method: the cells' columns, ``predicted_mse``, ``note``.

    Computed once per cell by :func:`~privfedstat.simulations.compare_to_theory` (equal client sizes
    of the cell's N / m; with ``clip="auto"`` the cell's median B), at :data:`SUMMARY_N_MC`, unless
    its output is given as ``compared``. ``note``: why the predictor refused the cell (NaN), else "".
    """
    compared = _compared(frame) if compared is None else compared
    return (compared.groupby(_cells(config.grid) + ["method"], sort=False, dropna=False)
            .agg(predicted_mse=("predicted_mse", "mean"), note=("prediction_note", "first")).reset_index())


def _summarise(frames, config: MSEConfig) -> dict[str, Table]:
    """Mean MSE, its standard error and predict_mse per cell, one column triple per method; the theory's slopes."""
    cells = _cells(config.grid)
    compared = _compared(frames[""])
    table = summarise(frames[""], cells).merge(predictions(frames[""], config, compared), on=cells + ["method"],
                                               how="left")
    values = ("mean_mse", "se", "predicted_mse")
    wide = table.pivot_table(index=cells, columns="method", values=list(values), sort=False, dropna=False)
    cols = pd.MultiIndex.from_tuples([(v, m) for m in dict.fromkeys(table["method"]) for v in values])
    refused = table[table["note"].fillna("") != ""].drop_duplicates("note")
    why = "".join(f"; NaN prediction for {r.method} ({', '.join(f'{c}={r[c]}' for c in cells)}, ...): {r.note}"
                  for _, r in refused.iterrows())
    return {"summary": Table(wide.reindex(columns=cols), "mean MSE, its Monte-Carlo standard error and predict_mse "
                             f"(equal sizes of N/m, {SUMMARY_N_MC} covariate draws) per cell{why}"),
            "slopes": Table(theory_slopes(compared), "log-log slopes of Monte Carlo (with its SE), of the paper's bound "
                            "and of predict_mse; agrees: within 2 SE of the Monte-Carlo slope")}


def summary_long(table: pd.DataFrame, grid: MSEGrid) -> pd.DataFrame:
    """A study's wide summary table (:func:`_summarise`) in long form: one row per cell and method."""
    long = table.stack(level=1, future_stack=True).reset_index()
    return long.rename(columns={long.columns[len(_cells(grid))]: "method"})


def _figures(frames, tables, config: MSEConfig) -> dict:
    return {"": plot_grid(frames[""], config.grid, predicted=summary_long(tables["summary"].frame, config.grid))}


STUDIES = tuple(Study(grid.name, f"Section 4, {grid.description}", MSEConfig(grid=grid), _run, _summarise, _figures,
                      stem=lambda config: f"{config.grid.name}-{config.family or config.grid.family}")
                for grid in GRIDS.values())


def demo_sentences(frame: pd.DataFrame, predicted: pd.DataFrame | None = None) -> list[str]:
    """Two sentences that read a fig5 (or fig16) result: who wins at the largest m, and the paper's claim.

    The first names the method with the lowest mean MSE at the largest m (over the allocations,
    with its Monte-Carlo SE, the others' means and, when ``predicted`` -- :func:`predictions` --
    is given, predict_mse's winner). The second checks the paper's claim (Fig. 5: FedNewton
    mitigates FedAvg's decline as m grows) by the paired difference FedNewton - FedAvg at the
    largest m (the methods are fitted on the same data per replicate): it holds when FedNewton is
    lower by more than 2 standard errors, fails when higher by as much, else is not significant.
    """
    top = frame[frame["m"] == frame["m"].max()]
    m = int(top["m"].iloc[0])
    means = top.groupby("method", sort=False)["mse"].agg(["mean", "std", "count"])
    means["se"] = means["std"] / np.sqrt(means["count"])
    best = means["mean"].idxmin()
    others = ", ".join(f"{k} {v:.3g}" for k, v in means["mean"].items() if k != best)
    sizes = top["allocation"].nunique() if "allocation" in top else 1
    over = f" (mean over {sizes} allocations)" if sizes > 1 else ""
    first = (f"At the largest m = {m}, {best} has the lowest mean MSE{over}: "
             f"{means.loc[best, 'mean']:.3g} (SE {means.loc[best, 'se']:.2g}; {others})")
    if predicted is not None:
        pr = predicted[predicted["m"] == m].groupby("method")["predicted_mse"].mean().dropna()
        if len(pr):
            first += f"; predict_mse ranks {pr.idxmin()} first ({pr.min():.3g})"
    wide = top.pivot_table(index=["scenario", "rep"], columns="method", values="mse")
    if not {"FedNewton", "FedAvg"} <= set(wide.columns):
        return [first + ".", "FedNewton or FedAvg was not run: the paper's Fig. 5 claim is not checked."]
    diff = (wide["FedNewton"] - wide["FedAvg"]).dropna()
    d, se = float(diff.mean()), float(diff.std() / np.sqrt(len(diff)))
    verdict = ("agrees with the paper" if d < -2 * se else "contradicts the paper" if d > 2 * se
               else "does not settle the paper's claim (difference within 2 SE)")
    second = (f"The paper (Fig. 5) finds that FedNewton mitigates FedAvg's decline as m grows; here at m = {m} "
              f"FedNewton's mean MSE is {means.loc['FedNewton', 'mean']:.3g} against FedAvg's "
              f"{means.loc['FedAvg', 'mean']:.3g} (paired difference {d:+.3g}, SE {se:.2g}, {len(diff)} pairs), "
              f"which {verdict}.")
    return [first + ".", second]
