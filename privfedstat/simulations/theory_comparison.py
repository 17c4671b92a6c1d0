"""A study of theory against simulation: Monte-Carlo results next to the matching bound, the lower
bound, the MSE predictor and the fitted rate slope.

It turns tidy result tables (:class:`~privfedstat.simulations.MonteCarlo`) into tidy tables and
figures: each method's bound and simulation settings come from the registry
(:mod:`privfedstat.algorithms.registry`), its estimator from :func:`make_estimator`, the
predictions from :func:`privfedstat.predict_mse`.
"""

from __future__ import annotations

import math
import re

import numpy as np
import pandas as pd

from ..algorithms.registry import get_method
from ..planning.prediction import predict_mse
from ..privacy.clipping import AutoClip
from ..theory import Problem, hessian_norm_quantile, lower_bound, problem_constants
from .allocations import Equal
from .runner import Scenario, make_estimator

__all__ = ["compare_to_theory", "theory_slopes", "plot_theory_comparison"]


def _equal_sizes(N: int, m: int) -> list[int]:
    base, extra = divmod(int(N), int(m))
    return [base + 1] * extra + [base] * (m - extra)


def _clip_rule(row) -> str:
    key = str(row.get("scenario", ""))
    for rule in ("auto", "paper"):
        if f"clip={rule}" in key:
            return rule
    return "numeric"


def _newton_settings(row) -> dict:
    """FedNewton's settings a scenario key carries (see :meth:`Scenario.newton_settings`)."""
    settings = dict(re.findall(r"\|(newton_noise|hessian_floor)=([^|]+)", str(row.get("scenario", ""))))
    if settings.get("hessian_floor", "auto") != "auto":
        settings["hessian_floor"] = float(settings["hessian_floor"])
    return settings


def compare_to_theory(results: pd.DataFrame, *, design=None, d=None, tau1=None, tau2=None, trace_sigma=None,
                      C=1.0, C_B=1.0, C1=1.0, C2=1.0, predict: bool = True, hessian_clip=None, by=None,
                      n_mc: int = 2**13, random_state=0) -> pd.DataFrame:
    """Add theoretical columns to a tidy Monte-Carlo table.

    Parameters
    ----------
    results : DataFrame
        One row per replicate with columns ``method`` (a registered method with a bound and
        simulation settings: FedSGD, FedHybrid, FedAvg, FedNewton), ``m``, ``N`` (or ``n_mean``),
        ``mu``, ``mse`` and optionally ``K`` (the runner's iteration budget; NaN keeps each
        method's default), ``clip`` (the bound B used) and ``scenario``, as produced by
        :class:`privfedstat.simulations.MonteCarlo`.
    design : GLMDesign, optional
        The data-generating process. Gives d and, through :func:`problem_constants`, tau1, tau2 and
        trace(Sigma); required for the predictor.
    d, tau1, tau2, trace_sigma : optional
        Override the constants (without a design: d is required, tau1 = tau2 = 1, trace_sigma = d).
    C, C_B, C1, C2 : float, default 1
        Constants of the upper bounds (C, C_B) and of the lower bound (C1, C2).
    predict : bool, default True
        Add ``predicted_mse`` from :func:`predict_mse` (needs ``design``).
    hessian_clip : float, optional
        FedNewton's C_H for the predictor when it was chosen from data (default: the population 90%
        quantile of per-sample Hessian norms at theta = 0, the limit of the private rule).
    by : list of str, optional
        Extra columns defining groups for the slope fit (default: ``["method"]`` plus
        ``"allocation"`` and ``"family"`` when present).
    n_mc : int, default 8192
        Monte-Carlo size of the predictor's population expectations.
    random_state : int, default 0

    Returns
    -------
    DataFrame
        A copy of ``results`` with ``d``, ``bound`` (the method's upper bound, see ``bound_name``),
        ``bound_name``, ``lower_bound`` (Theorem 3.10; NaN unless 0 < mu < 1), ``predicted_mse``
        (NaN when not computed, or when the predictor rejects the cell, e.g. FedNewton with
        n_i < 2 d), ``prediction_note`` (the predictor's reason for such a NaN, else "") and
        ``rate_slope``: the least-squares slope of log(mean MSE per cell) on log(bound) within each
        group -- 1 when the empirical MSE follows the theoretical rate (:func:`theory_slopes`: the
        slopes in m, n, mu and K side by side).

    Notes
    -----
    Client sizes enter the bounds and the predictor as m equal clients of N/m rows; for random
    allocations (uniform, lognormal) this is an approximation. With ``clip="auto"`` (read from the
    ``scenario`` key) the predictor uses the median B of the cell's replicates and mu reduced by
    the clip budget. Bounds use the cell's K (FedSGD's K, FedHybrid's K2, FedAvg's R and K): each
    method's ``MethodSpec.bound`` at its ``paper_params`` (:mod:`privfedstat.algorithms.registry`).

    References
    ----------
    Core paper, Theorems 3.2, 3.3, 3.5, 3.7, 3.9, 3.10.
    """
    need = {"method", "m", "mu", "mse"}
    missing = need - set(results.columns)
    if missing or not ({"N", "n_mean"} & set(results.columns)):
        raise ValueError(f"results needs columns {sorted(need)} and N (or n_mean); missing {sorted(missing) or ['N']}.")
    df = results.copy()
    if "N" not in df:
        df["N"] = np.rint(df["n_mean"] * df["m"]).astype(int)
    consts = problem_constants(design=design) if design is not None else None
    if d is None:
        if consts is None:
            raise TypeError("give design= or d= (the number of parameters).")
        d = consts.d
    t1 = tau1 if tau1 is not None else (consts.tau1 if consts else 1.0)
    t2 = tau2 if tau2 is not None else (consts.tau2 if consts else 1.0)
    tr = trace_sigma if trace_sigma is not None else (consts.trace_sigma if consts else None)
    hclip = hessian_clip
    if hclip is None and design is not None:
        hclip = hessian_norm_quantile(design, AutoClip().quantile, n_mc=n_mc, random_state=random_state)
    K = df["K"] if "K" in df else pd.Series(np.nan, index=df.index)
    df["_K"] = K.astype(float)
    cell_cols = ["method", "m", "N", "mu", "_K"] + (["scenario"] if "scenario" in df else [])
    out_cols = {"bound": [], "bound_name": [], "lower_bound": [], "predicted_mse": [], "prediction_note": []}
    keys = []
    for key, cell in df.groupby(cell_cols, sort=False, dropna=False):
        method, m, N, mu, Kc = key[:5]
        m, N, mu = int(m), int(N), float(mu)
        Kint = None if not np.isfinite(Kc) else int(Kc)
        spec = get_method(method)
        if spec.bound is None or spec.paper_params is None:
            raise ValueError(f"method {method!r} in results has no theory bound and simulation settings "
                             "(MethodSpec.bound, paper_params).")
        rule = _clip_rule(cell.iloc[0])
        clip_setting = rule if rule != "numeric" else float(cell["clip"].median()) if "clip" in cell else "auto"
        if design is not None:
            scen = Scenario(design=design, n_clients=m, allocation=Equal(max(1, N // m)), mu=mu, n_iter=Kint,
                            clip=clip_setting, **_newton_settings(cell.iloc[0]))
            est = make_estimator(method, scen, None)
        else:
            est = None
        p = est.get_params() if est is not None else spec.paper_params(Kint)
        b = spec.bound(p, mu=mu, d=d, n_samples=N, n_clients=m, trace_sigma=tr, C=C, C_B=C_B, tau1=t1, tau2=t2)
        lb = lower_bound(mu=mu, d=d, n_samples=N, n_clients=m, C1=C1, C2=C2) if 0 < mu < 1 else np.nan
        pred, note = np.nan, ""
        if predict and est is not None and spec.predictor is not None:
            clip_b = float(cell["clip"].median()) if "clip" in cell and rule != "numeric" else None
            if clip_b is not None or rule == "numeric":
                kw = {"clip": clip_b} if rule != "numeric" else {}
                # read only by methods that clip per-sample Hessians (FedNewton); inf: none without privacy
                kw["hessian_clip"] = math.inf if not math.isfinite(mu) and rule == "numeric" else hclip
                try:
                    pred = predict_mse(est, Problem(design, _equal_sizes(N, m)), n_mc=n_mc,
                                       random_state=random_state, **kw).total
                except ValueError as exc:  # e.g. FedNewton with n_i < 2 d: no prediction for this cell
                    pred, note = np.nan, str(exc)
        keys.append(cell.index)
        for k, v in zip(out_cols, (float(b), spec.bound.name, float(lb), float(pred), note)):
            out_cols[k].append(v)
    for k, vals in out_cols.items():
        col = pd.Series(index=df.index, dtype=object if k in ("bound_name", "prediction_note") else float)
        for idx, v in zip(keys, vals):
            col.loc[idx] = v
        df[k] = col
    df["d"] = d
    df["rate_slope"] = _slopes(df, by)
    return df.drop(columns="_K")


def _slopes(df: pd.DataFrame, by) -> pd.Series:
    groups = by if by is not None else ["method"] + [c for c in ("allocation", "family") if c in df]
    cells = df.groupby(groups + ["bound"], sort=False, dropna=False)["mse"].mean().reset_index()
    slope = pd.Series(np.nan, index=df.index)
    for key, g in cells.groupby(groups, sort=False, dropna=False):
        ok = (g["bound"] > 0) & (g["mse"] > 0) & np.isfinite(g["bound"])
        x, y = np.log(g.loc[ok, "bound"]), np.log(g.loc[ok, "mse"])
        if x.nunique() < 2 or np.ptp(x) < 1e-3:  # the rate does not vary (e.g. eq. (6) at fixed N): no slope
            continue
        s = float(np.polyfit(x, y, 1)[0])
        key = key if isinstance(key, tuple) else (key,)
        mask = np.ones(len(df), dtype=bool)
        for c, v in zip(groups, key):
            mask &= (df[c] == v).to_numpy() | (pd.isna(df[c]) & pd.isna(v)).to_numpy()
        slope[mask] = s
    return slope


#: the variables :func:`theory_slopes` fits against, each with the columns held fixed while it varies
SLOPE_VARIABLES = {"m": ("allocation", "mu", "K"), "n": ("m", "mu", "K"), "mu": ("m", "N", "allocation", "K"),
                   "K": ("m", "N", "allocation", "mu")}


def _slope(x: np.ndarray, y: np.ndarray, var: np.ndarray | None = None) -> tuple[float, float]:
    """Least-squares slope of y on x and its standard error from independent var(y_i) (NaN without var)."""
    w = (x - x.mean()) / np.sum((x - x.mean()) ** 2)
    return float(np.sum(w * y)), float(np.sqrt(np.sum(w**2 * var))) if var is not None else np.nan


def theory_slopes(compared: pd.DataFrame) -> pd.DataFrame:
    """The log-log slopes of Monte Carlo, of the bound and of the prediction in m, n, mu and K, side by side.

    Parameters
    ----------
    compared : DataFrame
        Output of :func:`compare_to_theory`.

    Returns
    -------
    DataFrame
        One row per method, variable (``m``; ``n`` = N/m; ``mu``, finite values only; ``K``) and
        group of the other settings (:data:`SLOPE_VARIABLES`: the columns held fixed) in which the
        variable takes at least two values: ``slope_mc`` (least-squares slope of log mean MSE
        per cell on log variable) and its standard error ``se_mc`` (delta method, cells
        independent), ``slope_bound``, ``slope_prediction`` (NaN where the predictor refused a
        cell) and ``bound_agrees`` / ``prediction_agrees``: "yes" when the slope is within 2
        standard errors of the Monte-Carlo slope, else "no" ("" when it is NaN).
    """
    df = compared.assign(n=compared["N"] / compared["m"], K=compared["K"] if "K" in compared else np.nan)
    if "allocation" not in df:
        df["allocation"] = ""
    cell = ["method", "m", "N", "mu", "K", "allocation"] + (["scenario"] if "scenario" in df else [])
    cells = df.groupby(cell, sort=False, dropna=False).agg(
        mse=("mse", "mean"), sd=("mse", "std"), reps=("mse", "count"), n=("n", "mean"), bound=("bound", "mean"),
        pred=("predicted_mse", "mean")).reset_index()
    cells["m"], cells["N"] = cells["m"].astype(float), cells["N"].astype(float)
    rows = []
    for var, fixed in SLOPE_VARIABLES.items():
        finite = cells[np.isfinite(cells[var].astype(float)) & (cells[var].astype(float) > 0) & (cells["mse"] > 0)]
        for key, g in finite.groupby(["method", *fixed], sort=False, dropna=False):
            x = np.log(g[var].astype(float).to_numpy())
            if len(g) < 2 or np.ptp(x) < 0.05:
                continue
            var_log = (g["sd"].fillna(0.0) ** 2 / g["reps"] / g["mse"] ** 2).to_numpy()
            mc, se = _slope(x, np.log(g["mse"].to_numpy()), var_log)
            bound = _slope(x, np.log(g["bound"].to_numpy()))[0] if (g["bound"] > 0).all() else np.nan
            pred = _slope(x, np.log(g["pred"].to_numpy()))[0] if (g["pred"] > 0).all() else np.nan
            rows.append({"method": key[0], "variable": var,
                         "fixed": ", ".join(f"{c}={v}" for c, v in zip(fixed, key[1:])), "cells": len(g),
                         "slope_mc": mc, "se_mc": se, "slope_bound": bound, "slope_prediction": pred,
                         "bound_agrees": _agrees(bound, mc, se), "prediction_agrees": _agrees(pred, mc, se)})
    return pd.DataFrame(rows, columns=["method", "variable", "fixed", "cells", "slope_mc", "se_mc", "slope_bound",
                                       "slope_prediction", "bound_agrees", "prediction_agrees"])


def _agrees(slope: float, mc: float, se: float) -> str:
    return "" if not np.isfinite(slope) else "yes" if abs(slope - mc) <= 2 * se else "no"


def plot_theory_comparison(df: pd.DataFrame, *, x: str = "m", methods=None, ax=None, logx: bool = True,
                           **compare_kwargs):
    """Empirical mean MSE against x, with the matching bound (constant fitted) and the lower bound.

    Parameters
    ----------
    df : DataFrame
        Output of :func:`compare_to_theory`, or raw Monte-Carlo results (then ``compare_kwargs``
        are passed to :func:`compare_to_theory`).
    x : str, default "m"
        Column for the x axis (e.g. ``"m"``, ``"N"``, ``"K"``, ``"mu"``).
    methods : list of str, optional
        Methods to draw (default: all in ``df``).
    ax : matplotlib Axes, optional
        Draw into this axes (all methods together); default: a new Figure with one panel per method.
    logx : bool, default True
        Log scale on x.

    Returns
    -------
    matplotlib.figure.Figure

    Notes
    -----
    Per method, the bound's unknown constant c is fitted by least squares on the log scale with the
    slope fixed at 1 (log c = mean(log mean-MSE - log bound)), so the drawn curve c * bound shows
    whether the *rate* matches. The lower bound (Theorem 3.10, only for 0 < mu < 1) and the
    predictor (if present) are drawn unscaled. Error bars: +-2 standard errors.
    """
    from matplotlib.figure import Figure  # no pyplot: no global state
    from matplotlib.ticker import NullFormatter

    if "bound" not in df:
        df = compare_to_theory(df, **compare_kwargs)
    if x not in df:
        raise ValueError(f"the table has no column {x!r}.")
    methods = list(dict.fromkeys(df["method"])) if methods is None else list(methods)
    if ax is None:
        fig = Figure(figsize=(4.2 * len(methods), 3.6))
        axes = list(fig.subplots(1, len(methods), squeeze=False)[0])
    else:
        fig, axes = ax.figure, [ax] * len(methods)
    for i, (a, method) in enumerate(zip(axes, methods)):
        sub = df[df["method"] == method]
        if sub.empty:
            raise ValueError(f"no rows for method {method!r}.")
        g = sub.groupby(x).agg(mse=("mse", "mean"), sd=("mse", "std"), reps=("mse", "count"), bound=("bound", "mean"),
                               lower=("lower_bound", "mean"), pred=("predicted_mse", "mean")).reset_index()
        se = g["sd"].fillna(0.0) / np.sqrt(g["reps"])
        color = f"C{i}" if ax is not None else "C0"
        a.errorbar(g[x], g["mse"], yerr=2 * se, fmt="o", ms=4, color=color, label=f"{method}: empirical")
        ok = (g["bound"] > 0) & (g["mse"] > 0) & np.isfinite(g["bound"])
        if ok.any():
            c = float(np.exp(np.mean(np.log(g.loc[ok, "mse"]) - np.log(g.loc[ok, "bound"]))))
            a.plot(g[x], c * g["bound"], "-", color=color, alpha=0.8,
                   label=f"{method}: {c:.2g} x bound ({sub['bound_name'].iloc[0]})")
        if np.isfinite(g["lower"]).any():
            first = ax is None or i == 0
            a.plot(g[x], g["lower"], "--", color="0.4", label="lower bound (Thm 3.10)" if first else None)
        if np.isfinite(g["pred"]).any():
            a.plot(g[x], g["pred"], ":", color=color, lw=2, label=f"{method}: predict_mse")
        a.set_yscale("log")
        if logx:
            a.set_xscale("log")
            a.xaxis.set_minor_formatter(NullFormatter())  # no overlapping minor labels
        a.set_xlabel(x)
        a.set_ylabel("MSE")
        a.grid(True, which="both", alpha=0.3)
        if ax is None:
            a.set_title(method)
            a.legend(fontsize=7)
    if ax is not None:
        ax.legend(fontsize=7)
    fig.tight_layout()
    return fig
