"""Figures drawn from tidy Monte-Carlo tables (matplotlib imported lazily)."""

from __future__ import annotations

import numpy as np
import pandas as pd

from .studies import Study

__all__ = ["plot_study", "plot_mse"]


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
