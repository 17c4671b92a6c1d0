"""The core paper's MSE studies (Section 4, Appendix B): each figure's grid of scenarios, its plot, its study.

Settings the paper states are used as stated (100 replicates; FedSGD K=50, eta=0.5; FedHybrid
K1=30, K2=20; FedAvg K=50, R=2; FedNewton K=50, R=1; the m, n and allocation grids of Sections
4.1-4.5). Settings it leaves out, chosen here and overridable through the functions' arguments:

* mu for Figs. 1-3, 5-6, 11-14, 16: **mu = 2** per client, the smaller of the two budgets of Fig. 4;
* the m grid of Figs. 3/6 ("m from 60 to 140"): {60, 80, 100, 120, 140};
* the m grid of Figs. 5/16 (N = 20000 fixed): {25, 50, 100, 200, 400} (mean n from 800 to 50);
* Figs. 4/15 (K varied): m = 20 clients with n = 100 each (N = 2000), K in
  {10, 25, 50, 100, 150, 200, 300}, mu in {2, 6, inf}: with the paper's N >= 20000 the privacy noise
  is too small at mu = 2 for the rise with K to show within K <= 300;
* the covariate design (p, beta_true, sigma_c): see :mod:`privfedstat.simulations.dgp`;
* the clipping bound: ``clip="auto"`` (private, 10% of mu) by default; ``clip="paper"`` reproduces
  the paper's non-private rule.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pandas as pd

from .allocations import Equal, FixedTotal, LogNormal, Uniform
from .dgp import GLMDesign
from .runner import METHODS, MonteCarloConfig, Scenario, summarise
from .study import Study, Table, param

__all__ = ["MSEGrid", "GRIDS", "get_grid", "MSEConfig", "plot_mse", "plot_grid", "STUDIES"]

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

    def scenarios(self, *, family: str | None = None, mu: float = 2.0, clip: float | str = "auto") -> list[Scenario]:
        """The scenarios of this figure for ``family`` (default: the figure's own)."""
        family = family or self.family
        return [
            Scenario(s.design, s.n_clients, s.allocation, s.mu, s.n_iter, s.clip, labels={"study": self.name, **s.labels})
            for s in self.build(GLMDesign(family), mu, clip)
        ]


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
             axes=None):
    """Mean MSE (log scale) with +-2 standard-error bands: one panel per value of ``panel``.

    Parameters
    ----------
    df : DataFrame
        Tidy results with columns ``x``, ``line``, ``panel`` and ``mse``.
    x, line, panel : str
        Columns for the x axis, the lines and the panels.
    axes : sequence of matplotlib Axes or None
        One Axes per panel to draw into (their figure is returned); None creates a new Figure.

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
            ax.plot(g[x], g["mean"], marker="o", ms=3.5, label=str(name))
            lo = np.maximum(g["mean"] - 2 * g["se"], g["mean"] * 0.05)
            ax.fill_between(g[x], lo, g["mean"] + 2 * g["se"], alpha=0.15)
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


def plot_grid(df: pd.DataFrame, grid: MSEGrid, axes=None):
    """Draw ``grid``'s figure from its tidy results (see :func:`plot_mse`; ``axes``: one per panel)."""
    family = df["family"].iloc[0] if "family" in df and len(df) else grid.family
    return plot_mse(df, x=grid.x, line=grid.line, panel=grid.panel, logx=grid.x == "K", axes=axes,
                    title=f"{grid.name}: {grid.description.split(' (')[0]} ({family})")


@dataclass(frozen=True, kw_only=True)
class MSEConfig(MonteCarloConfig):
    """Settings of an MSE study: the figure's grid and the budget and clipping rule of its fits."""

    grid: MSEGrid
    family: str | None = param("GLM family (default: the figure's)", None, parse=str, choices=("logistic", "poisson"))
    mu: float = param("GDP budget per client where the figure does not vary it", 2.0)
    clip: str = param("clipping rule: 'auto' (private), 'paper' (the paper's non-private rule) or a number", "auto")

    def scenarios(self) -> list[Scenario]:
        clip = self.clip if self.clip in ("auto", "paper") else float(self.clip)
        return self.grid.scenarios(family=self.family, mu=self.mu, clip=clip)


def _cells(grid: MSEGrid) -> list[str]:
    return [c for c in dict.fromkeys([grid.panel, grid.line, grid.x]) if c != "method"]


def _run(config: MSEConfig, stem, progress: bool) -> dict[str, pd.DataFrame]:
    mc = config.monte_carlo(config.scenarios(), f"{stem}.csv", progress, methods=config.grid.methods)
    return {"": mc.run()}


def _summarise(frames, config: MSEConfig) -> dict[str, Table]:
    """Mean MSE and its standard error per cell, one column pair per method."""
    table = summarise(frames[""], _cells(config.grid))
    wide = table.pivot_table(index=_cells(config.grid), columns="method", values=["mean_mse", "se"], sort=False)
    cols = pd.MultiIndex.from_tuples([(v, m) for m in dict.fromkeys(table["method"]) for v in ("mean_mse", "se")])
    return {"summary": Table(wide.reindex(columns=cols), "mean MSE and its standard error per cell")}


STUDIES = tuple(Study(grid.name, f"Section 4, {grid.description}", MSEConfig(grid=grid), _run, _summarise,
                      lambda frames, tables, config: {"": plot_grid(frames[""], config.grid)},
                      stem=lambda config: f"{config.grid.name}-{config.family or config.grid.family}")
                for grid in GRIDS.values())
