"""Figures drawn from tidy Monte-Carlo tables (matplotlib imported lazily)."""

from __future__ import annotations

import numpy as np
import pandas as pd

from .studies import Study

__all__ = ["plot_study", "plot_mse", "plot_coverage"]


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


def plot_study(df: pd.DataFrame, study: Study, axes=None):
    """Draw ``study``'s figure from its tidy results (see :func:`plot_mse`; ``axes``: one per panel)."""
    family = df["family"].iloc[0] if "family" in df and len(df) else study.family
    return plot_mse(df, x=study.x, line=study.line, panel=study.panel, logx=study.x == "K", axes=axes,
                    title=f"{study.name}: {study.description.split(' (')[0]} ({family})")


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

    from .coverage import binomial_halfwidth

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
