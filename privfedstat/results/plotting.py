"""Coefficient plots: estimates with their intervals, one marker per fit and term (matplotlib, imported on use)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:  # pandas is imported where it is used: it is slow to import
    import pandas as pd

__all__ = ["coefficient_frame", "plot_coefficients"]


def coefficient_frame(fit, alpha: float | None = None) -> pd.DataFrame:
    """Tidy coefficients of ``fit``: columns ``coef``, ``lower``, ``upper`` (level ``1 - alpha``), one row per term.

    Parameters
    ----------
    fit : fitted privfedstat estimator, statsmodels results, or DataFrame
        An estimator fitted without inference has no intervals (``lower`` and ``upper`` are NaN);
        statsmodels results give ``params`` and ``conf_int(alpha)``; a DataFrame is taken as given
        (columns ``coef`` and, optionally, ``lower`` and ``upper``). Multinomial terms are named
        ``"equation: term"``.
    alpha : float, optional
        Default: the fit's own (0.05 for statsmodels).
    """
    import pandas as pd
    if isinstance(fit, pd.DataFrame):
        frame = fit.reindex(columns=["coef", "lower", "upper"])
    elif hasattr(fit, "coef_"):  # a privfedstat estimator
        names = fit._coef_names()[0]
        frame = pd.DataFrame({"coef": fit.coef_.ravel(order="F")}, index=names)
        if getattr(fit, "inference_", None) is not None:
            frame[["lower", "upper"]] = fit.conf_int(alpha).to_numpy()
        else:
            frame["lower"] = frame["upper"] = np.nan
    else:  # statsmodels results
        ci = np.asarray(fit.conf_int(0.05 if alpha is None else alpha))
        params = fit.params
        frame = pd.DataFrame({"coef": np.asarray(params), "lower": ci[:, 0], "upper": ci[:, 1]},
                             index=params.index if isinstance(params, pd.Series) else None)
    if isinstance(frame.index, pd.MultiIndex):
        frame.index = [": ".join(map(str, key)) for key in frame.index]
    frame.index = frame.index.astype(str)
    return frame


def plot_coefficients(frames: dict[str, pd.DataFrame], ax=None):
    """Draw each fit's coefficients with their intervals, terms on the vertical axis, fits side by side.

    Parameters
    ----------
    frames : dict of str to DataFrame
        Label of each fit and its :func:`coefficient_frame`; the terms of the first fit set the order (a
        term another fit lacks is not drawn for it; a fit that names none of them, e.g. statsmodels
        fitted on arrays, is matched by position when it has as many terms).
    ax : matplotlib Axes, optional
        Drawn into; a new figure when None.

    Returns
    -------
    matplotlib.axes.Axes
    """
    import matplotlib.pyplot as plt

    if ax is None:
        ax = plt.subplots(figsize=(6.0, 1.0 + 0.45 * len(next(iter(frames.values())))))[1]
    terms = list(next(iter(frames.values())).index)
    ys = np.arange(len(terms), dtype=np.float64)
    width = 0.6 / max(1, len(frames))
    for k, (label, frame) in enumerate(frames.items()):
        if len(frame) == len(terms) and not set(frame.index) & set(terms):
            frame = frame.set_axis(terms)
        f = frame.reindex(terms)
        y = ys - 0.3 + width * (k + 0.5)
        err = np.vstack([f["coef"] - f["lower"], f["upper"] - f["coef"]])
        ax.errorbar(f["coef"], y, xerr=np.where(np.isfinite(err), err, 0.0), fmt="o", capsize=3, label=label)
    ax.axvline(0.0, color="grey", lw=0.8, ls=":")
    ax.set_yticks(ys, terms)
    ax.invert_yaxis()
    ax.set_xlabel("coefficient")
    ax.legend(loc="best")
    return ax
