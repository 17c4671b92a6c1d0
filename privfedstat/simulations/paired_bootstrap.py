"""Reporting statistics of the HiFedProx study: displacement tail, exhaustive paired bootstrap, Holm, Tables II-III.

Pure numpy / pandas (matplotlib for :func:`plot_hifedprox`, imported there).

``records`` (one row per seed, power p and condition) and ``rounds`` (one row per seed, p,
condition and communication round) are the study's tidy outputs; see :data:`RECORD_COLUMNS` and
:data:`ROUND_COLUMNS`. Accuracies are fractions in [0, 1]; tables show them in %.

References
----------
Kabgani, A. and Ahookhosh, M. Beyond conventional federated learning via high-order
regularization (HiFedProx), Sections V-B and VI, Tables II and III.
Efron, B. (1979). Bootstrap methods: another look at the jackknife. Ann. Statist. 7, 1-26.
Holm, S. (1979). A simple sequentially rejective multiple test procedure. Scand. J. Statist. 6, 65-70.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

__all__ = ["CONDITIONS", "RECORD_COLUMNS", "ROUND_COLUMNS", "PairedBootstrap", "displacement_tail",
           "exhaustive_bootstrap_means", "exhaustive_paired_bootstrap", "holm", "hifedprox_tables",
           "hifedprox_comparisons", "hifedprox_diagnostics", "markdown_table", "hifedprox_report", "plot_hifedprox"]

CONDITIONS = ("clean", "moderate", "severe")
RECORD_COLUMNS = ("seed", "p", "condition", "eval_loss", "eval_accuracy", "mean_tail", "stress_ratio",
                  "armijo_trials", "writer_p10_accuracy", "line_search_failures")
ROUND_COLUMNS = ("seed", "p", "condition", "round", "tail", "mean_displacement_stressed", "mean_displacement_normal")
_MAX_RESAMPLES = 10**7
_HIGHER_IS_BETTER = {"eval_loss": False, "eval_accuracy": True, "writer_p10_accuracy": True}


def displacement_tail(norms) -> float:
    """The displacement-tail statistic T_t of one round: upper-tail-to-median ratio of the clients' displacements.

    T_t = r_(ceil(0.9 m)) / max(r_(ceil(0.5 m)), 1e-12) with r_(1) <= ... <= r_(m) the sorted
    displacement norms ||Delta_i^t|| of the m selected clients (1-based order statistics; m = 18
    gives r_(17) / r_(9)).

    Parameters
    ----------
    norms : array-like of shape (m,)
        Non-negative, finite displacement norms, m >= 1.

    Returns
    -------
    float
    """
    r = np.sort(np.asarray(norms, dtype=np.float64).ravel())
    if r.size == 0 or not np.all(np.isfinite(r)) or r[0] < 0:
        raise ValueError("norms must be a non-empty array of finite, non-negative displacement norms.")
    m = r.size
    # ceil(0.9 m) and ceil(0.5 m) in integers (0.9 * 70 is 63.000000000000007 in floating point)
    return float(r[(9 * m + 9) // 10 - 1] / max(r[(m + 1) // 2 - 1], 1e-12))


def _diffs(diffs) -> np.ndarray:
    d = np.asarray(diffs, dtype=np.float64)
    if d.ndim != 1 or d.size < 2 or not np.all(np.isfinite(d)):
        raise ValueError("diffs must be a 1-D array of at least 2 finite paired differences (one per seed).")
    if float(d.size) ** d.size > _MAX_RESAMPLES:
        raise ValueError(f"an exhaustive bootstrap of {d.size} differences has {d.size}^{d.size} resamples, more than "
                         f"{_MAX_RESAMPLES:.0e}; at most 7 differences are supported.")
    return d


def exhaustive_bootstrap_means(diffs) -> np.ndarray:
    """The means of all n^n ordered resamples with replacement of the n paired differences.

    Every index tuple (i_1, ..., i_n) in {1..n}^n occurs once, in the order of
    ``itertools.product(range(n), repeat=n)``; the mean of resample (i_1..i_n) is
    (d_{i_1} + ... + d_{i_n}) / n (summed left to right). n^n must be at most 10^7 (n <= 7).
    """
    d = _diffs(diffs)
    sums = np.zeros(1)
    for _ in range(d.size):
        sums = np.add.outer(sums, d).ravel()
    return sums / d.size


@dataclass(frozen=True)
class PairedBootstrap:
    """The exhaustive paired bootstrap of one comparison.

    Attributes
    ----------
    estimate : float
        Mean of the paired differences (positive favours the candidate).
    low, high : float
        Percentile interval: the (1 - level)/2 and (1 + level)/2 percentiles of the n^n resampled
        means (numpy's linear interpolation between order statistics).
    n_resamples : int
        n^n (3125 for five seeds).
    favouring : int
        Seeds whose difference is positive ("four of five seeds favour p = 6").
    n_seeds : int
        n.
    p_value : float
        Bootstrap p-value for H0: mean difference <= 0, the share of the n^n resampled means
        that are <= 0 (the percentile-bootstrap definition: below ``(1 - level)/2`` exactly when
        the lower percentile bound is above 0, up to interpolation). It is 0 when every
        difference is positive.
    """

    estimate: float
    low: float
    high: float
    n_resamples: int
    favouring: int
    n_seeds: int
    p_value: float


def exhaustive_paired_bootstrap(diffs, level: float = 0.95) -> PairedBootstrap:
    """Exhaustive paired bootstrap of seedwise differences (5^5 = 3125 resamples for five seeds).

    Parameters
    ----------
    diffs : array-like of shape (n,)
        d_s = metric(reference, seed s) - metric(candidate, seed s), oriented so that positive
        favours the candidate (for a loss: reference loss minus candidate loss). 2 <= n <= 7.
    level : float, default 0.95
        Coverage of the percentile interval (2.5% and 97.5% percentiles for 0.95).

    Returns
    -------
    PairedBootstrap
    """
    if isinstance(level, bool) or not isinstance(level, (int, float)) or not 0 < level < 1:
        raise ValueError(f"level must be in (0, 1), got {level!r}.")
    d = _diffs(diffs)
    means = exhaustive_bootstrap_means(d)
    low, high = np.percentile(means, [50 * (1 - level), 50 * (1 + level)])
    return PairedBootstrap(estimate=float(d.mean()), low=float(low), high=float(high), n_resamples=means.size,
                           favouring=int(np.sum(d > 0)), n_seeds=d.size, p_value=float(np.mean(means <= 0)))


def holm(pvalues, alpha: float = 0.05) -> tuple[np.ndarray, np.ndarray]:
    """Holm's step-down procedure: adjusted p-values and rejections at family-wise level ``alpha``.

    With p_(1) <= ... <= p_(k), the adjusted value of p_(j) is
    max_{i <= j} min(1, (k - i + 1) p_(i)); a hypothesis is rejected when its adjusted value is
    <= alpha (as ``statsmodels.stats.multitest.multipletests(method="holm")``).

    Returns
    -------
    adjusted : ndarray of float, in the input order
    reject : ndarray of bool
    """
    p = np.asarray(pvalues, dtype=np.float64)
    if p.ndim != 1 or p.size == 0 or not np.all((p >= 0) & (p <= 1)):
        raise ValueError("pvalues must be a non-empty 1-D array of values in [0, 1].")
    if isinstance(alpha, bool) or not isinstance(alpha, (int, float)) or not 0 < alpha < 1:
        raise ValueError(f"alpha must be in (0, 1), got {alpha!r}.")
    order = np.argsort(p, kind="stable")
    stepped = np.minimum(1.0, np.maximum.accumulate((p.size - np.arange(p.size)) * p[order]))
    adjusted = np.empty_like(p)
    adjusted[order] = stepped
    return adjusted, adjusted <= alpha


# --------------------------------------------------------------------------- tables
def _check_records(records: pd.DataFrame) -> pd.DataFrame:
    missing = set(RECORD_COLUMNS) - set(records.columns)
    if missing:
        raise ValueError(f"records lack column(s) {sorted(missing)}; expected {list(RECORD_COLUMNS)}.")
    bad = set(records["condition"]) - set(CONDITIONS)
    if bad or records.empty:
        raise ValueError(f"records must be non-empty with conditions in {list(CONDITIONS)}; got {sorted(bad)}.")
    if records.duplicated(["seed", "p", "condition"]).any():
        raise ValueError("records have more than one row for some (seed, p, condition).")
    for col in ("eval_accuracy", "writer_p10_accuracy"):
        if not records[col].between(0, 1).all():
            raise ValueError(f"{col} must be fractions in [0, 1] (tables show %).")
    seeds = records.groupby(["p", "condition"])["seed"].apply(frozenset)
    if seeds.nunique() != 1:
        raise ValueError("every (p, condition) needs the same seeds (the comparisons are paired by seed).")
    return records


def _conditions(records: pd.DataFrame) -> list[str]:
    return [c for c in CONDITIONS if c in set(records["condition"])]


def _by_p(records: pd.DataFrame, column: str, condition: str, how: str = "mean") -> pd.Series:
    return records[records["condition"] == condition].groupby("p")[column].agg(how)


def hifedprox_tables(records: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Tables II and III: final loss and accuracy (mean and sample SD over seeds); mean tail and Armijo trials.

    Parameters
    ----------
    records : DataFrame
        One row per (seed, p, condition) with :data:`RECORD_COLUMNS`.

    Returns
    -------
    table2 : DataFrame indexed by p
        ``<condition>_loss`` and ``<condition>_loss_sd`` for each condition present, and
        ``<condition>_acc`` / ``_acc_sd`` (%) for the stressed ones (sample SD, ddof 1).
    table3 : DataFrame indexed by p
        ``<condition>_tail`` (mean over seeds of the round-averaged T_t) for each condition,
        ``<condition>_trials`` (mean Armijo trial evaluations per run) for the most stressed
        condition present, and ``trial_increase_pct``: its increase over the smallest p (p = 2 in
        the paper), in %.
    """
    records = _check_records(records)
    conditions = _conditions(records)
    t2 = {}
    for c in conditions:
        for col, name, scale in (("eval_loss", "loss", 1.0), ("eval_accuracy", "acc", 100.0)):
            if name == "acc" and c == "clean":
                continue
            t2[f"{c}_{name}"] = scale * _by_p(records, col, c)
            t2[f"{c}_{name}_sd"] = scale * _by_p(records, col, c, "std")
    t3 = {f"{c}_tail": _by_p(records, "mean_tail", c) for c in conditions}
    trials = _by_p(records, "armijo_trials", conditions[-1])
    t3[f"{conditions[-1]}_trials"] = trials
    t3["trial_increase_pct"] = 100.0 * (trials / trials.iloc[0] - 1.0)
    return pd.DataFrame(t2).rename_axis("p"), pd.DataFrame(t3).rename_axis("p")


def _paired(records: pd.DataFrame, condition: str, metric: str) -> pd.DataFrame:
    """Seeds x p table of one metric in one condition."""
    return records[records["condition"] == condition].pivot(index="seed", columns="p", values=metric)


def hifedprox_comparisons(records: pd.DataFrame, metric: str = "eval_loss", level: float = 0.95,
                          alpha: float = 0.05) -> pd.DataFrame:
    """The paired comparisons the paper reports, per condition, by the exhaustive paired bootstrap over seeds.

    ``kind="vs_baseline"``: every p against the smallest p (p = 2, FedProx), with Holm's
    adjustment of the bootstrap p-values over those comparisons within the condition.
    ``kind="vs_best"``: the best p (by mean) against every other p (``rank`` 2 is the next
    best); exploratory, not adjusted.

    Returns
    -------
    DataFrame
        condition, kind, p (the candidate), reference, estimate (mean over seeds of the
        improvement of p over the reference: loss(reference) - loss(p) for the loss,
        accuracy(p) - accuracy(reference) for an accuracy; positive favours p), low and high (its
        percentile interval), favouring (seeds favouring p), n_seeds, p_value (for "no
        improvement"), p_holm and reject (``vs_baseline`` only), gain_pct (100 estimate / |mean
        of the reference|: the paper's 11.44% and 23.16% gains over p = 2) and rank (of the
        reference by mean, ``vs_best`` only).
    """
    if metric not in _HIGHER_IS_BETTER:
        raise ValueError(f"metric must be one of {sorted(_HIGHER_IS_BETTER)}, got {metric!r}.")
    records = _check_records(records)
    sign = -1.0 if _HIGHER_IS_BETTER[metric] else 1.0
    rows = []
    for c in _conditions(records):
        table = _paired(records, c, metric)
        means = table.mean()
        ranked = list((sign * means).sort_values(kind="stable").index)
        base, best = table.columns.min(), ranked[0]
        pairs = [("vs_baseline", p, base, pd.NA) for p in table.columns if p != base]
        pairs += [("vs_best", best, ref, ranked.index(ref) + 1) for ref in ranked[1:]]
        start = len(rows)
        for kind, p, ref, rank in pairs:
            boot = exhaustive_paired_bootstrap(sign * (table[ref] - table[p]).to_numpy(), level)
            rows.append(dict(condition=c, kind=kind, p=p, reference=ref, estimate=boot.estimate, low=boot.low,
                             high=boot.high, favouring=boot.favouring, n_seeds=boot.n_seeds, p_value=boot.p_value,
                             p_holm=np.nan, reject=pd.NA, gain_pct=100.0 * boot.estimate / abs(means[ref]),
                             rank=rank))
        vs_base = [r for r in rows[start:] if r["kind"] == "vs_baseline"]
        if vs_base:
            adjusted, reject = holm([r["p_value"] for r in vs_base], alpha)
            for r, a, rej in zip(vs_base, adjusted, reject):
                r.update(p_holm=float(a), reject=bool(rej))
    return pd.DataFrame(rows).astype({"reject": "boolean", "rank": "Int64"})


def hifedprox_diagnostics(records: pd.DataFrame) -> pd.DataFrame:
    """The other statistics Section VI reports, per p (means over seeds).

    Columns: ``clean_moderate_score`` (mean of the clean and moderate losses, the paper's
    calibration-style score); per condition ``<c>_tail_change_pct`` (mean tail relative to the
    smallest p, %: -57.7% from 4.936 to 2.086 under severe stress), ``<c>_writer_p10_pct``
    (writer-level 10th-percentile accuracy, %) and, for the stressed conditions,
    ``<c>_stress_ratio`` (stress-test-to-normal mean displacement ratio); ``line_search_failures``
    (total over seeds and conditions).
    """
    records = _check_records(records)
    conditions = _conditions(records)
    out = {}
    if {"clean", "moderate"} <= set(conditions):
        out["clean_moderate_score"] = (_by_p(records, "eval_loss", "clean") + _by_p(records, "eval_loss", "moderate")) / 2
    for c in conditions:
        tail = _by_p(records, "mean_tail", c)
        out[f"{c}_tail_change_pct"] = 100.0 * (tail / tail.iloc[0] - 1.0)
        out[f"{c}_writer_p10_pct"] = 100.0 * _by_p(records, "writer_p10_accuracy", c)
        if c != "clean":
            out[f"{c}_stress_ratio"] = _by_p(records, "stress_ratio", c)
    out["line_search_failures"] = records.groupby("p")["line_search_failures"].sum()
    return pd.DataFrame(out).rename_axis("p")


def markdown_table(df: pd.DataFrame, floatfmt: str = ".4f") -> str:
    """A DataFrame as a GitHub markdown table (index first; floats formatted with ``floatfmt``, NaN blank).

    Written here so that reports need no ``tabulate`` (which ``DataFrame.to_markdown`` requires).
    """
    def cell(v) -> str:
        if v is pd.NA:
            return ""
        if isinstance(v, (float, np.floating)):
            return "" if np.isnan(v) else format(v, floatfmt)
        return str(v)

    head = [str(df.index.name or "")] + [str(c) for c in df.columns]
    body = [[cell(i)] + [cell(v) for v in row] for i, row in zip(df.index, df.itertuples(index=False))]
    lines = ["| " + " | ".join(head) + " |", "|" + "|".join("---" for _ in head) + "|"]
    return "\n".join(lines + ["| " + " | ".join(r) + " |" for r in body])


def _with_sd(table: pd.DataFrame, digits: int) -> pd.DataFrame:
    """Columns x and x_sd merged into "mean +- sd" strings (the paper's layout)."""
    cols = [c for c in table.columns if not c.endswith("_sd")]
    return pd.DataFrame({c: [f"{m:.{digits}f} ± {s:.{digits}f}" for m, s in zip(table[c], table[c + "_sd"])]
                         for c in cols}, index=table.index)


def hifedprox_report(records: pd.DataFrame, metric: str = "eval_loss") -> str:
    """Markdown text: Tables II and III in the paper's layout, the diagnostics and the paired comparisons."""
    table2, table3 = hifedprox_tables(records)
    t2 = pd.concat([_with_sd(table2.filter(like="_loss"), 4), _with_sd(table2.filter(like="_acc"), 2)], axis=1)
    t3 = table3.copy()
    t3[t3.columns[-1]] = [f"{v:.2f}%" for v in t3[t3.columns[-1]]]
    comparisons = hifedprox_comparisons(records, metric).set_index("condition")
    return "\n\n".join([
        "Table II: final evaluation loss and accuracy (%), mean ± sample SD over seeds", markdown_table(t2),
        "Table III: mean displacement-tail statistic and Armijo trial evaluations per run", markdown_table(t3, ".3f"),
        "Diagnostics (means over seeds)", markdown_table(hifedprox_diagnostics(records), ".3f"),
        f"Paired comparisons of {metric} (exhaustive bootstrap over seeds; estimate > 0 favours p)",
        markdown_table(comparisons, ".4f")])


def plot_hifedprox(records: pd.DataFrame, rounds: pd.DataFrame, path=None):
    """The study's figures in one 3 x 3 panel; saved to ``path`` when given.

    Row 1: final evaluation loss and accuracy vs p per condition (seed means, seeds as dots);
    stress-to-normal displacement ratio vs p. Row 2: mean tail statistic T_t vs round, one line
    per p, per condition. Row 3: stress-to-normal displacement ratio vs round per p (moderate,
    severe); mean displacement of stress-test and normal clients vs p (Fig. 4).

    Parameters
    ----------
    records : DataFrame with :data:`RECORD_COLUMNS`
    rounds : DataFrame with :data:`ROUND_COLUMNS`
        One row per (seed, p, condition, round); the stressed group's mean displacement is NaN
        in rounds without a stress-test client (and in the clean condition).
    path : str or path, optional

    Returns
    -------
    matplotlib.figure.Figure
    """
    from matplotlib import colormaps
    from matplotlib.figure import Figure

    records = _check_records(records)
    missing = set(ROUND_COLUMNS) - set(rounds.columns)
    if missing:
        raise ValueError(f"rounds lack column(s) {sorted(missing)}; expected {list(ROUND_COLUMNS)}.")
    powers = sorted(records["p"].unique())
    colour = dict(zip(powers, colormaps["viridis"](np.linspace(0, 0.9, len(powers)))))
    fig = Figure(figsize=(14, 11), layout="constrained")
    ax = fig.subplots(3, 3)
    for c, marker in zip(CONDITIONS, "os^"):
        part = records[records["condition"] == c]
        if part.empty:
            continue
        for a, col, scale in ((ax[0, 0], "eval_loss", 1), (ax[0, 1], "eval_accuracy", 100)):
            a.plot(part["p"], scale * part[col], marker, alpha=0.25, color=f"C{CONDITIONS.index(c)}")
            a.plot(powers, scale * part.groupby("p")[col].mean(), "-" + marker, color=f"C{CONDITIONS.index(c)}",
                   label=c)
        if c != "clean":
            g = part.groupby("p")["stress_ratio"]
            ax[0, 2].errorbar(powers, g.mean(), yerr=g.std(), fmt="-" + marker, capsize=3, label=c,
                              color=f"C{CONDITIONS.index(c)}")
    ax[0, 0].set(xlabel="p", ylabel="final evaluation loss")
    ax[0, 1].set(xlabel="p", ylabel="final evaluation accuracy (%)")
    ax[0, 2].set(xlabel="p", ylabel="stress-test / normal mean displacement")
    rounds = rounds.assign(ratio=rounds["mean_displacement_stressed"] / rounds["mean_displacement_normal"])
    for j, c in enumerate(CONDITIONS):
        part = rounds[rounds["condition"] == c]
        for p in powers:
            run = part[part["p"] == p].groupby("round")[["tail", "ratio"]].mean()
            ax[1, j].plot(run.index, run["tail"], color=colour[p], label=f"p = {p:g}")
            if j > 0:
                ax[2, j - 1].plot(run.index, run["ratio"], color=colour[p], label=f"p = {p:g}")
        ax[1, j].set(xlabel="round", ylabel="tail statistic T_t", title=c)
        if j > 0:
            ax[2, j - 1].set(xlabel="round", ylabel="stress-test / normal displacement", title=c)
            means = part.groupby("p")[["mean_displacement_stressed", "mean_displacement_normal"]].mean()
            ax[2, 2].plot(means.index, means.iloc[:, 0], "-o", color=f"C{j}", label=f"{c}: stress-test clients")
            ax[2, 2].plot(means.index, means.iloc[:, 1], "--o", color=f"C{j}", label=f"{c}: normal clients")
    ax[2, 2].set(xlabel="p", ylabel="mean displacement ||Delta_i||")
    for a in ax.flat:
        if a.lines:
            a.legend(fontsize=7)
    if path is not None:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        fig.savefig(path, dpi=120)
    return fig
