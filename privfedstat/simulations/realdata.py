"""The real-data study of Section 5.1: client-level AUC / accuracy of nine estimators.

Protocol (core paper, Section 5.1): the images are pooled, split over ``n_clients`` clients that
each get at least ``min_size`` rows and the rest by random proportions (a Dirichlet(1) draw);
within every client, rows are assigned to ``n_folds`` folds; for each fold the estimators are
fitted on the other folds of all clients (federated) and every client scores its own held-out
fold; scores are averaged over folds per client. The client split is repeated ``n_splits``
times, giving ``n_clients * n_splits`` client-level values per (method, mu).

Tasks: ``"binary"`` (odd = 1 vs even = 0, logistic, AUC) or ``"multiclass"`` (10 classes,
multinomial logistic, accuracy). Estimators: FedSGD, FedAvg, FedHybrid, FedNewton and DP-SCAFFOLD
for each mu in ``mus``; NP-SCAFFOLD, NP-FedAvg, NP-LocalFit and NP-Pooled once (mu = inf).
Covariates: pixels in [0, 1] (public range, no privacy cost) plus an intercept.

Settings the paper does not give, chosen here: the step size (``step_size``; pixel designs have
||x||^2 in the tens to hundreds, so the simulations' 0.5 diverges without clipping), the random
proportions (Dirichlet(1)), and for ``digits`` (1797 images, 65 columns): 8 clients with at least
200 images each, so that half of every client's training folds (FedNewton's Hessian half, 0.4 n_i)
has more rows than features.
"""

from __future__ import annotations

import math
import time
import warnings
from dataclasses import dataclass

import numpy as np
import pandas as pd

from .._linalg import MAX_HESSIAN_GB
from .._warn import warn
from ..algorithms import LocalFit, PooledMLE, Scaffold
from ..algorithms.registry import get_method, method_of
from ..data import load_digits, load_mnist
from ..data.federated import FederatedData
from ..exceptions import ConvergenceWarning, PrivacyLeakWarning
from ..families import get_family
from ..privacy.clipping import AutoClip
from ..results.scoring import auc
from .study import Study, Table, param

__all__ = ["client_split", "realdata_study", "plot_realdata", "REALDATA_METHODS", "RealDataConfig", "STUDY"]

INF = float("inf")
#: ridge penalty of the Newton baselines: pixel designs are (quasi-)separable, where the unpenalised
#: MLE does not exist (coefficients diverge); 1e-4 barely changes the fit otherwise
RIDGE = 1e-4
REALDATA_METHODS = ("FedSGD", "FedAvg", "FedHybrid", "FedNewton", "DP-SCAFFOLD",
                    "NP-SCAFFOLD", "NP-FedAvg", "NP-LocalFit", "NP-Pooled")


def client_split(n: int, n_clients: int, min_size: int, rng: np.random.Generator) -> np.ndarray:
    """Client label of each of ``n`` rows: ``min_size`` rows each, the rest by Dirichlet(1) proportions."""
    rest = n - n_clients * min_size
    if rest < 0:
        raise ValueError(f"{n} rows cannot give {n_clients} clients at least {min_size} rows each.")
    extra = rng.multinomial(rest, rng.dirichlet(np.ones(n_clients)))
    labels = np.repeat(np.arange(n_clients), min_size + extra)
    return labels[rng.permutation(n)]


def _estimators(family, mu_list, step_size, seed, newton: bool):
    """(label, mu, estimator) of the study: the paper's four with their Section 4.1 settings
    (``MethodSpec.paper_params``), DP-SCAFFOLD, then the non-private baselines."""
    paper = [get_method(name) for name in ("FedSGD", "FedAvg", "FedHybrid") + (("FedNewton",) if newton else ())]
    fedavg = get_method("FedAvg")
    # the paper's settings, explicit (the estimators' defaults are "auto"); no inference releases:
    # the whole mu goes to estimation, as in the paper
    common = {"family": family, "step_size": step_size, "random_state": seed, "inference": None}
    scaffold = {"n_rounds": 10, "n_local_steps": 10}
    for mu in mu_list:
        private = {**common, "mu": mu, "clip": AutoClip()}
        for spec in paper:
            yield spec.display, mu, spec.cls(**private, **spec.paper_params(None))
        yield "DP-SCAFFOLD", mu, Scaffold(**private, **scaffold)
    yield "NP-SCAFFOLD", INF, Scaffold(mu=INF, clip=INF, **common, **scaffold)
    yield "NP-FedAvg", INF, fedavg.cls(mu=INF, clip=INF, **common, **fedavg.paper_params(None))
    yield "NP-LocalFit", INF, LocalFit(family=family, alpha=RIDGE, inference=None)
    yield "NP-Pooled", INF, PooledMLE(family=family, alpha=RIDGE, inference=None)


def _client_score(est, X, y, client, task):
    pred = est.predict(X, client=client) if method_of(est).per_client else est.predict(X)
    if task == "multiclass":
        return float(np.mean(np.argmax(pred, axis=1) == y))
    if np.all(y == 1) or not np.any(y == 1):
        return math.nan  # AUC undefined on a one-class fold
    return auc(y, pred)


def realdata_study(X: np.ndarray, y: np.ndarray, *, task: str = "binary", n_clients: int = 80, min_size: int = 800,
                   n_splits: int = 3, n_folds: int = 5, mus=(6.0, 2.0), step_size: float = 0.1,
                   random_state: int = 0, progress: bool = True) -> pd.DataFrame:
    """Run the Section 5.1 protocol on images ``X`` (pixels in [0, 1]) with digit labels ``y``.

    Returns a tidy DataFrame: split, client, method, mu, metric ("auc" or "accuracy"), value
    (fold-averaged), n (client size), seconds (fitting time of the method, summed over folds).
    """
    from tqdm.auto import tqdm

    if task not in ("binary", "multiclass"):
        raise ValueError(f"task must be 'binary' or 'multiclass', got {task!r}.")
    X = np.column_stack([np.ones(len(X)), np.asarray(X, dtype=np.float64)])
    labels_y = (np.asarray(y) % 2 == 1).astype(float) if task == "binary" else np.asarray(y, dtype=float)
    family = get_family("logistic") if task == "binary" else get_family("multinomial", n_classes=10)
    metric = "auc" if task == "binary" else "accuracy"
    n_params = X.shape[1] * family.n_outputs
    newton = n_clients * n_params**2 * 8 / 1e9 <= MAX_HESSIAN_GB
    if not newton:
        warn(f"FedNewton skipped: {n_clients} client Hessians of size {n_params}^2 exceed "
             f"{MAX_HESSIAN_GB} GB (e.g. 10-class MNIST); its rows are absent.", UserWarning)
    root = np.random.SeedSequence(random_state)
    rows = []
    n_fits = n_splits * n_folds * ((5 if newton else 4) * len(mus) + 4)
    bar = tqdm(total=n_fits, disable=not progress, desc="fits")
    for s, ss in enumerate(root.spawn(n_splits)):
        rng = np.random.default_rng(ss)
        clients = client_split(len(X), n_clients, min_size, rng)
        fold = np.empty(len(X), dtype=np.int64)
        for c in range(n_clients):
            idx = np.flatnonzero(clients == c)
            fold[idx] = rng.permutation(len(idx)) % n_folds
        scores: dict = {}
        for k in range(n_folds):
            train = fold != k
            data = FederatedData.from_pooled(X[train], labels_y[train], clients=clients[train])
            seed = np.random.SeedSequence(random_state, spawn_key=(s, k))
            for name, mu, est in _estimators(family, mus, step_size, seed, newton):
                t0 = time.perf_counter()
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore", ConvergenceWarning)
                    warnings.simplefilter("ignore", PrivacyLeakWarning)
                    est.fit(data)
                dt = time.perf_counter() - t0
                for c in range(n_clients):
                    test = (clients == c) & (fold == k)
                    scores.setdefault((name, mu, c), []).append(_client_score(est, X[test], labels_y[test], c, task))
                scores.setdefault((name, mu, "t"), []).append(dt)
                bar.update()
        for (name, mu, c), vals in scores.items():
            if c == "t":
                continue
            rows.append({"split": s, "client": c, "method": name, "mu": mu, "metric": metric,
                         "value": float(np.nanmean(vals)) if not np.all(np.isnan(vals)) else math.nan,
                         "n": int((clients == c).sum()), "seconds": float(np.sum(scores[(name, mu, "t")]))})
    bar.close()
    return pd.DataFrame(rows)


def plot_realdata(df: pd.DataFrame, title: str | None = None, axes=None):
    """Boxplots of client-level scores per method, one panel per private mu (NP methods in every panel).

    ``axes``: one matplotlib Axes per panel to draw into, or None for a new Figure (returned).
    """
    from matplotlib.figure import Figure

    mus = sorted({m for m in df["mu"] if math.isfinite(m)}, reverse=True)
    if axes is None:
        fig = Figure(figsize=(5.5 * max(len(mus), 1), 4.2))
        axes = fig.subplots(1, max(len(mus), 1), sharey=True, squeeze=False)[0]
    else:
        axes = list(np.ravel(axes))
        fig = axes[0].figure
    order = [m for m in REALDATA_METHODS if m in set(df["method"])]
    for ax, mu in zip(axes, mus or [INF]):
        sub = df[(df["mu"] == mu) | ~np.isfinite(df["mu"])]
        data = [sub[sub["method"] == m]["value"].dropna().to_numpy() for m in order]
        ax.boxplot(data, showfliers=False)
        ax.set_xticks(range(1, len(order) + 1), order, rotation=45, ha="right", fontsize=8)
        ax.set_title(f"mu = {mu:g}" if math.isfinite(mu) else "non-private")
        ax.grid(True, axis="y", alpha=0.3)
    axes[0].set_ylabel(df["metric"].iloc[0] if len(df) else "")
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    return fig


@dataclass(frozen=True)
class RealDataConfig:
    """Settings of the Section 5.1 study: the data set, the task and the repetitions."""

    dataset: str = param("images: MNIST (needs --data-dir) or scikit-learn's 8x8 digits (offline)", "mnist",
                         choices=("mnist", "digits"))
    data_dir: str | None = param("folder with the MNIST IDX files", None, parse=str)
    task: str = param("odd vs even digits (logistic, AUC) or ten classes (multinomial, accuracy)", "binary",
                      choices=("binary", "multiclass"))
    splits: int = param("repeated client splits S", 3)
    mus: tuple[float, ...] = param("GDP budgets per client of the private methods", (6.0, 2.0))
    seed: int = param("seed of the client splits and of every fit", 0)


def _run(config: RealDataConfig, stem, progress: bool) -> dict[str, pd.DataFrame]:
    if config.dataset == "digits":
        (X, y), setup = load_digits(), {"n_clients": 8, "min_size": 200, "step_size": 0.5}
    elif config.data_dir is None:
        raise ValueError("mnist-logistic needs --data-dir with the MNIST IDX files (or use --dataset digits).")
    else:
        (X, y), setup = load_mnist(config.data_dir, kind="all"), {"n_clients": 80, "min_size": 800, "step_size": 0.1}
    return {"": realdata_study(X, y, task=config.task, n_splits=config.splits, mus=config.mus, random_state=config.seed,
                               progress=progress, **setup)}


def _summarise(frames, config) -> dict[str, Table]:
    df = frames[""]
    table = df.groupby(["method", "mu"], sort=False)["value"].median().unstack("mu")
    return {"medians": Table(table, f"median client-level {df['metric'].iloc[0]} over {df['split'].nunique()} splits x "
                                    f"{df['client'].nunique()} clients")}


STUDY = Study("mnist-logistic", "Section 5.1: client-level AUC / accuracy of nine estimators on MNIST (--data-dir) or "
              "digits", RealDataConfig(), _run, _summarise,
              lambda frames, tables, c: {"": plot_realdata(frames[""], title=f"Section 5.1 ({c.dataset}, {c.task})")},
              stem=lambda c: f"mnist-logistic-{c.dataset}-{c.task}")
