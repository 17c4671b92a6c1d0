"""The HiFedProx exponent study (Kabgani & Ahookhosh, Sections V-VI; Tables II-III, Figs. 2-4) at a configurable scale.

Protocol (Table I): a frozen set of writers (one client each; FEMNIST from LEAF's files with
``data_dir``, else the offline stand-in :func:`~privfedstat.deep.femnist_standin`), the
:class:`~privfedstat.deep.models.FemnistCNN`, R = 100 rounds of 18 of 60 clients sampled uniformly
without replacement, minibatches of 16, 3 local steps from alpha0 = 0.5 with Armijo backtracking
(c = 1e-4, rho = 0.5, J = 12), (mu, R) = (0.03, 1) and p in 2..8, seeds 3001-3005. Conditions:
``clean``; ``moderate`` and ``severe``, where 12 clients chosen once per seed have their training
labels remapped ``y -> (y + 1) mod C`` and take 9 local steps from alpha0 = 1.0 (moderate) or 2.0
(severe). For a seed, every p and condition share the initial network, the stressed clients, the
cohorts of every round and every client's minibatch stream (the paired design;
:class:`~privfedstat.deep.hifedprox.DeepHiFedProx` derives cohorts and minibatches from
``random_state`` only). No privacy (mu = inf), as in the paper.

Chosen here where the paper is silent [I]: the data are fixed across seeds (the paper's frozen
cache: ``data_seed``), the stressed clients are the same in both stressed conditions of a seed,
the mean tail is T_t averaged over the rounds of a run, the stress ratio is the mean displacement
of the stressed clients over that of the others (all rounds of a run pooled), and the writer-level
10th-percentile accuracy is ``numpy.percentile(..., 10)`` of the writers' accuracies on their own
evaluation examples.

The report: Tables II and III from the records (one row per seed, p and condition), the paired
comparisons over seeds (:mod:`privfedstat.simulations.paired_bootstrap`, Holm's adjustment), the
other statistics of Section VI and the figures from the records and the per-round rows. Accuracies
are fractions in [0, 1]; tables show them in %.

References
----------
Kabgani, A. and Ahookhosh, M. Beyond conventional federated learning via high-order
regularization (HiFedProx), Sections V-VI, Tables I-III.
Holm, S. (1979). A simple sequentially rejective multiple test procedure. Scand. J. Statist. 6, 65-70.
"""

from __future__ import annotations

import math
import time
import warnings
from dataclasses import dataclass

import numpy as np
import pandas as pd
import torch
from statsmodels.stats.multitest import multipletests
from torch.nn import functional as F

from ..exceptions import ConvergenceWarning
from ..simulations.paired_bootstrap import exhaustive_paired_bootstrap
from ..simulations.study import Study, Table, listof, param
from .data import TensorFederatedData
from .femnist import WriterData, femnist_standin, load_femnist
from .hifedprox import DeepHiFedProx
from .models import FemnistCNN
from .study import TorchConfig, seeded_model

__all__ = ["HiFedProxConfig", "CONDITIONS", "RECORD_COLUMNS", "ROUND_COLUMNS", "displacement_tail", "stressed_data",
           "hifedprox_study", "hifedprox_tables", "hifedprox_comparisons", "hifedprox_diagnostics", "plot_hifedprox",
           "STUDY"]

CONDITIONS = ("clean", "moderate", "severe")
RECORD_COLUMNS = ("seed", "p", "condition", "eval_loss", "eval_accuracy", "mean_tail", "stress_ratio",
                  "armijo_trials", "writer_p10_accuracy", "line_search_failures")
ROUND_COLUMNS = ("seed", "p", "condition", "round", "tail", "mean_displacement_stressed", "mean_displacement_normal")
_HIGHER_IS_BETTER = {"eval_loss": False, "eval_accuracy": True, "writer_p10_accuracy": True}


@dataclass(frozen=True, kw_only=True)
class HiFedProxConfig(TorchConfig):
    """Settings of the exponent study (defaults: the paper's Table I)."""

    powers: tuple[float, ...] = param("exponents p, e.g. 2,5,8", (2, 3, 4, 5, 6, 7, 8), parse=listof(float))
    seeds: tuple[int, ...] = param("evaluation seeds, paired across p and conditions", (3001, 3002, 3003, 3004, 3005))
    conditions: tuple[str, ...] = param("among clean, moderate, severe", CONDITIONS)
    n_rounds: int = param("R, rounds", 100, flag="rounds")
    n_writers: int = param("writers (one client each)", 60, flag="clients")
    cohort: int = param("clients per round", 18)
    batch_size: int = param("b, minibatch rows", 16)
    local_steps: int = param("S_i, local steps of ordinary clients", 3)
    step_size: float = param("alpha0 of ordinary clients", 0.5)
    n_stressed: int = param("stress-test clients per seed", 12)
    stress_local_steps: int = param("local steps of the stress-test clients", 9)
    moderate_step_size: float = param("alpha0 of the stress-test clients under moderate stress", 1.0)
    severe_step_size: float = param("alpha0 of the stress-test clients under severe stress", 2.0)
    prox_coef: float = param("the paper's mu", 0.03)
    prox_radius: float = param("the paper's R", 1.0)
    data_seed: int = param("seeds the choice and split of the writers (fixed across seeds: the frozen cache)", 0)
    data_dir: str | None = param("folder with LEAF's FEMNIST JSON files (default: an offline digits stand-in, not "
                                 "FEMNIST)", None, parse=str)

    def __post_init__(self) -> None:
        bad = set(self.conditions) - set(CONDITIONS)
        if bad or not self.conditions:
            raise ValueError(f"conditions must be among {CONDITIONS}, got {sorted(bad) or 'none'}.")
        if not 0 <= self.n_stressed < self.n_writers or not 1 <= self.cohort <= self.n_writers:
            raise ValueError(f"need 0 <= n_stressed < n_writers and 1 <= cohort <= n_writers, got "
                             f"{self.n_stressed}, {self.cohort}, {self.n_writers}.")


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


def stressed_data(train: TensorFederatedData, stressed: np.ndarray, n_classes: int) -> TensorFederatedData:
    """The training data with every label of the ``stressed`` clients remapped ``y -> (y + 1) mod C``."""
    targets = train.targets.clone()
    for i in stressed:
        lo, hi = int(train.offsets[i]), int(train.offsets[i + 1])
        targets[lo:hi] = (targets[lo:hi] + 1) % n_classes
    return TensorFederatedData(train.inputs, targets, train.offsets)


def _evaluate(model, data: WriterData) -> tuple[float, float, float]:
    """Evaluation cross-entropy, accuracy, and the 10th percentile of the writers' accuracies."""
    with torch.no_grad():
        logits = model(torch.as_tensor(data.eval_X))
    y = torch.as_tensor(data.eval_y)
    correct = (logits.argmax(1) == y).numpy()
    per_writer = [correct[data.eval_writer == k].mean() for k in np.unique(data.eval_writer)]
    return float(F.cross_entropy(logits, y)), float(correct.mean()), float(np.percentile(per_writer, 10))


def _fit(study: HiFedProxConfig, data: WriterData, seed: int, condition: str, p: float, stressed: np.ndarray):
    """One fit: its record and its per-round rows."""
    m = data.train.n_clients
    steps, alphas = np.full(m, study.local_steps), np.full(m, float(study.step_size))
    train = data.train
    if condition != "clean":
        steps[stressed] = study.stress_local_steps
        alphas[stressed] = study.moderate_step_size if condition == "moderate" else study.severe_step_size
        train = stressed_data(train, stressed, data.n_classes)
    est = DeepHiFedProx(model=seeded_model(lambda: FemnistCNN(n_classes=data.n_classes), seed), mu=math.inf,
                        n_rounds=study.n_rounds, power=p, prox_coef=study.prox_coef, prox_radius=study.prox_radius,
                        n_local_steps=steps,
                        step_size=alphas, batch_size=study.batch_size, participation=study.cohort, random_state=seed)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)  # a stochastic method does not settle
        est.fit(train)
    disp = est.displacements_.assign(stressed=lambda d: np.isin(d["client"], stressed) & (condition != "clean"))
    rounds = disp.groupby("round").apply(lambda r: pd.Series({
        "tail": displacement_tail(r["displacement"]),
        "mean_displacement_stressed": r.loc[r["stressed"], "displacement"].mean(),
        "mean_displacement_normal": r.loc[~r["stressed"], "displacement"].mean()}), include_groups=False)
    rounds = rounds.reset_index().assign(seed=seed, p=p, condition=condition)
    loss, accuracy, p10 = _evaluate(est.model_, data)
    ratio = (disp.loc[disp["stressed"], "displacement"].mean() / disp.loc[~disp["stressed"], "displacement"].mean()
             if condition != "clean" else math.nan)
    record = dict(seed=seed, p=p, condition=condition, eval_loss=loss, eval_accuracy=accuracy,
                  mean_tail=float(rounds["tail"].mean()), stress_ratio=ratio, armijo_trials=est.armijo_trials_,
                  writer_p10_accuracy=p10, line_search_failures=est.line_search_failures_)
    return record, rounds


def hifedprox_study(study: HiFedProxConfig, data: WriterData, *, progress: bool = False
                    ) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Run every (seed, condition, p); return the records (one row per fit) and the per-round rows.

    Parameters
    ----------
    study : HiFedProxConfig
    data : WriterData
        The writers (:func:`~privfedstat.deep.load_femnist` or :func:`~privfedstat.deep.femnist_standin`).
    progress : bool

    Returns
    -------
    records : DataFrame
        :data:`RECORD_COLUMNS` plus ``seconds``.
    rounds : DataFrame
        :data:`ROUND_COLUMNS`.
    """
    if data.train.n_clients <= study.n_stressed or data.train.n_clients < study.cohort:
        raise ValueError(f"{data.train.n_clients} writers cannot hold {study.n_stressed} stressed clients and a "
                         f"cohort of {study.cohort}.")
    records, rounds = [], []
    cells = [(s, c, p) for s in study.seeds for c in study.conditions for p in study.powers]
    for j, (seed, condition, p) in enumerate(cells):
        stressed = np.sort(np.random.default_rng(seed).choice(data.train.n_clients, study.n_stressed, replace=False))
        t0 = time.perf_counter()
        record, per_round = _fit(study, data, seed, condition, p, stressed)
        records.append({**record, "seconds": time.perf_counter() - t0})
        rounds.append(per_round)
        if progress:
            print(f"[{j + 1}/{len(cells)}] seed {seed} {condition} p={p:g}: loss {record['eval_loss']:.4f}, accuracy "
                  f"{record['eval_accuracy']:.3f}, tail {record['mean_tail']:.3f} ({records[-1]['seconds']:.1f} s)",
                  flush=True)
    return pd.DataFrame(records), pd.concat(rounds, ignore_index=True)


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
            reject, adjusted, _, _ = multipletests([r["p_value"] for r in vs_base], alpha, method="holm")
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


def plot_hifedprox(records: pd.DataFrame, rounds: pd.DataFrame):
    """The study's figures in one 3 x 3 panel.

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
    return fig


def _run(config: HiFedProxConfig, stem, progress: bool) -> dict[str, pd.DataFrame]:
    config.set_threads()
    load = femnist_standin if config.data_dir is None else lambda n, **kw: load_femnist(config.data_dir, n, **kw)
    records, rounds = hifedprox_study(config, load(config.n_writers, random_state=config.data_seed), progress=progress)
    return {"records": records, "rounds": rounds}


def _summarise(frames, config: HiFedProxConfig) -> dict[str, Table]:
    records = frames["records"]
    table2, table3 = hifedprox_tables(records)
    source = "digits-standin" if config.data_dir is None else "leaf-femnist"
    return {"table2": Table(table2, f"Table II on {source}: final evaluation loss and accuracy (%), mean and sample "
                                    "SD over seeds"),
            "table3": Table(table3, "Table III: mean displacement-tail statistic and Armijo trial evaluations per run"),
            "comparisons": Table(hifedprox_comparisons(records), "paired comparisons of eval_loss (exhaustive bootstrap "
                                                                 "over seeds; estimate > 0 favours p)"),
            "diagnostics": Table(hifedprox_diagnostics(records), "diagnostics (means over seeds)")}


STUDY = Study("hifedprox", "HiFedProx's exponent study, Tables II-III: p in 2..8 under clean / moderate / severe "
              "stress (FEMNIST with --data-dir, else an offline digits stand-in)", HiFedProxConfig(), _run, _summarise,
              lambda frames, tables, config: {"": plot_hifedprox(frames["records"], frames["rounds"])})
