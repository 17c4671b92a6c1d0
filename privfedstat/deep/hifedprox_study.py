"""The HiFedProx exponent study (Kabgani & Ahookhosh, Sections V-VI; Tables II-III, Figs. 2-4) at a configurable scale.

Protocol (Table I): a frozen set of writers (one client each; FEMNIST from LEAF's files with
``data_dir``, else the offline stand-in :func:`~privfedstat.data.femnist_standin`), the
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

The records and the per-round diagnostics are reported by
:mod:`privfedstat.simulations.paired_bootstrap` (Tables II and III, the exhaustive paired bootstrap,
Holm's adjustment, the figures).
"""

from __future__ import annotations

import math
import time
import warnings
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import pandas as pd
import torch
from torch.nn import functional as F

from ..data.femnist import WriterData, femnist_standin, load_femnist
from ..exceptions import ConvergenceWarning
from ..simulations.paired_bootstrap import (CONDITIONS, displacement_tail, hifedprox_comparisons, hifedprox_report,
                                            hifedprox_tables, plot_hifedprox)
from .data import TensorFederatedData
from .hifedprox import DeepHiFedProx
from .models import FemnistCNN

__all__ = ["HiFedProxStudy", "stressed_data", "hifedprox_study", "reproduce_hifedprox"]


@dataclass(frozen=True)
class HiFedProxStudy:
    """Settings of the exponent study (defaults: the paper's Table I).

    Attributes
    ----------
    powers : tuple of float
        p values.
    seeds : tuple of int
        Evaluation seeds (paired across p and conditions).
    conditions : tuple of str
        Among "clean", "moderate", "severe".
    n_rounds, n_writers, cohort : int
        R, writers (clients) and clients per round.
    batch_size, local_steps : int
        b and S_i of ordinary clients.
    step_size : float
        alpha0 of ordinary clients.
    n_stressed, stress_local_steps : int
        Stress-test clients per seed and their local steps.
    moderate_step_size, severe_step_size : float
        Their alpha0 under moderate and severe stress.
    prox_coef, prox_radius : float
        mu and R of the paper.
    data_seed : int
        Seeds the choice and split of the writers (fixed across seeds: the frozen cache).
    """

    powers: tuple[float, ...] = (2, 3, 4, 5, 6, 7, 8)
    seeds: tuple[int, ...] = (3001, 3002, 3003, 3004, 3005)
    conditions: tuple[str, ...] = CONDITIONS
    n_rounds: int = 100
    n_writers: int = 60
    cohort: int = 18
    batch_size: int = 16
    local_steps: int = 3
    step_size: float = 0.5
    n_stressed: int = 12
    stress_local_steps: int = 9
    moderate_step_size: float = 1.0
    severe_step_size: float = 2.0
    prox_coef: float = 0.03
    prox_radius: float = 1.0
    data_seed: int = 0

    def __post_init__(self) -> None:
        bad = set(self.conditions) - set(CONDITIONS)
        if bad or not self.conditions:
            raise ValueError(f"conditions must be among {CONDITIONS}, got {sorted(bad) or 'none'}.")
        if not 0 <= self.n_stressed < self.n_writers or not 1 <= self.cohort <= self.n_writers:
            raise ValueError(f"need 0 <= n_stressed < n_writers and 1 <= cohort <= n_writers, got "
                             f"{self.n_stressed}, {self.cohort}, {self.n_writers}.")


def stressed_data(train: TensorFederatedData, stressed: np.ndarray, n_classes: int) -> TensorFederatedData:
    """The training data with every label of the ``stressed`` clients remapped ``y -> (y + 1) mod C``."""
    targets = train.targets.clone()
    for i in stressed:
        lo, hi = int(train.offsets[i]), int(train.offsets[i + 1])
        targets[lo:hi] = (targets[lo:hi] + 1) % n_classes
    return TensorFederatedData(train.inputs, targets, train.offsets)


def _initial_model(n_classes: int, seed: int) -> FemnistCNN:
    """The CNN with its initial weights drawn from ``seed`` (the global torch stream is left as it was)."""
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        return FemnistCNN(n_classes=n_classes)


def _evaluate(model, data: WriterData) -> tuple[float, float, float]:
    """Evaluation cross-entropy, accuracy, and the 10th percentile of the writers' accuracies."""
    with torch.no_grad():
        logits = model(torch.as_tensor(data.eval_X))
    y = torch.as_tensor(data.eval_y)
    correct = (logits.argmax(1) == y).numpy()
    per_writer = [correct[data.eval_writer == k].mean() for k in np.unique(data.eval_writer)]
    return float(F.cross_entropy(logits, y)), float(correct.mean()), float(np.percentile(per_writer, 10))


def _run(study: HiFedProxStudy, data: WriterData, seed: int, condition: str, p: float, stressed: np.ndarray):
    """One fit: its record and its per-round rows."""
    m = data.train.n_clients
    steps, alphas = np.full(m, study.local_steps), np.full(m, float(study.step_size))
    train = data.train
    if condition != "clean":
        steps[stressed] = study.stress_local_steps
        alphas[stressed] = study.moderate_step_size if condition == "moderate" else study.severe_step_size
        train = stressed_data(train, stressed, data.n_classes)
    est = DeepHiFedProx(model=_initial_model(data.n_classes, seed), mu=math.inf, n_rounds=study.n_rounds, power=p,
                        prox_coef=study.prox_coef, prox_radius=study.prox_radius, n_local_steps=steps,
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


def hifedprox_study(study: HiFedProxStudy, data: WriterData, *, progress: bool = False
                    ) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Run every (seed, condition, p); return the records (one row per fit) and the per-round rows.

    Parameters
    ----------
    study : HiFedProxStudy
    data : WriterData
        The writers (:func:`~privfedstat.data.load_femnist` or :func:`~privfedstat.data.femnist_standin`).
    progress : bool

    Returns
    -------
    records : DataFrame
        :data:`~privfedstat.simulations.paired_bootstrap.RECORD_COLUMNS` plus ``seconds``.
    rounds : DataFrame
        :data:`~privfedstat.simulations.paired_bootstrap.ROUND_COLUMNS`.
    """
    if data.train.n_clients <= study.n_stressed or data.train.n_clients < study.cohort:
        raise ValueError(f"{data.train.n_clients} writers cannot hold {study.n_stressed} stressed clients and a "
                         f"cohort of {study.cohort}.")
    records, rounds = [], []
    cells = [(s, c, p) for s in study.seeds for c in study.conditions for p in study.powers]
    for j, (seed, condition, p) in enumerate(cells):
        stressed = np.sort(np.random.default_rng(seed).choice(data.train.n_clients, study.n_stressed, replace=False))
        t0 = time.perf_counter()
        record, per_round = _run(study, data, seed, condition, p, stressed)
        records.append({**record, "seconds": time.perf_counter() - t0})
        rounds.append(per_round)
        if progress:
            print(f"[{j + 1}/{len(cells)}] seed {seed} {condition} p={p:g}: loss {record['eval_loss']:.4f}, accuracy "
                  f"{record['eval_accuracy']:.3f}, tail {record['mean_tail']:.3f} ({records[-1]['seconds']:.1f} s)",
                  flush=True)
    return pd.DataFrame(records), pd.concat(rounds, ignore_index=True)


def reproduce_hifedprox(*, data_dir=None, out="results", study: HiFedProxStudy | None = None, progress: bool = True,
                        **scale) -> tuple[pd.DataFrame, str, Path]:
    """``privfedstat reproduce hifedprox``: run the study and write its records, tables and figure.

    Data: FEMNIST from LEAF's files in ``data_dir`` (:func:`~privfedstat.data.load_femnist`), else the
    offline stand-in (:func:`~privfedstat.data.femnist_standin`: scikit-learn's digits, 10 classes;
    not FEMNIST). ``scale``: fields of :class:`HiFedProxStudy` to replace (e.g. ``n_rounds=30``,
    ``seeds=(3001, 3002)``, ``powers=(2, 5, 8)``). Writes ``<out>/hifedprox-records.csv``,
    ``-rounds.csv``, ``-table2.csv``, ``-table3.csv``, ``-comparisons.csv``, ``.md`` (the report)
    and ``.png`` (the figures). Returns (records, report, stem).
    """
    study = replace(study or HiFedProxStudy(), **{k: v for k, v in scale.items() if v is not None})
    if data_dir is not None:
        data = load_femnist(data_dir, study.n_writers, random_state=study.data_seed)
    else:
        data = femnist_standin(study.n_writers, random_state=study.data_seed)
    records, rounds = hifedprox_study(study, data, progress=progress)
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    stem = out / "hifedprox"
    records.to_csv(f"{stem}-records.csv", index=False)
    rounds.to_csv(f"{stem}-rounds.csv", index=False)
    table2, table3 = hifedprox_tables(records)
    table2.to_csv(f"{stem}-table2.csv")
    table3.to_csv(f"{stem}-table3.csv")
    hifedprox_comparisons(records).to_csv(f"{stem}-comparisons.csv", index=False)
    header = (f"HiFedProx study on {data.source} ({data.train.n_clients} writers, {data.n_classes} classes): "
              f"R = {study.n_rounds}, {study.cohort} clients per round, p in {list(study.powers)}, seeds "
              f"{list(study.seeds)}")
    report = header + "\n\n" + hifedprox_report(records)
    Path(f"{stem}.md").write_text(report + "\n")
    plot_hifedprox(records, rounds, path=f"{stem}.png")
    return records, report, stem
