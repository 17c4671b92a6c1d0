"""The experiments of Fed-alpha-NormEC (Shulgin et al. 2025, Section 6 and App. A; Figs. 1-4) at a configurable scale.

Protocol: the training images are split IID over M clients; every method runs R rounds with
client-level DP at (epsilon, delta) = (8, 1e-5) towards a third party (replace-one), sigma_DP calibrated to it by the PLD accountant
for R Poisson-subsampled rounds at participation p (``epsilon=(8, 1e-5)``, ``mu=None``); alpha =
0.01, no server normalisation, a grid of beta (the "sensitivity threshold") and gamma (the step
size), p in {0.25, 0.5, 1}. Methods: Fed-alpha-NormEC (:class:`~privfedstat.deep.DeepFedAlphaNormEC`)
and DP-FedAvg with clipping (:class:`~privfedstat.deep.DeepClippedFedAvg`). Metrics: the test loss
and accuracy every ``eval_every`` rounds, against rounds and against total communications
``k p M`` (Figs. 1-3), and the best test accuracy of each (beta, gamma) (Fig. 4's heatmap).

Chosen here where the paper is silent or the scale is reduced [I]: one local step (T = 1) per
round, so the local step cancels and gamma is the server step (eta = gamma: the paper tunes one
learning rate); Fed-alpha-NormEC's local step uses ``batch_size`` rows (the paper's 32; the
``digits`` preset uses the full batch) while the comparator's clipped update is full batch (its
verb has no minibatches); sigma_DP by the PLD (not the paper's formula, which does not meet the
target). Presets (:data:`NORMEC_PRESETS`): ``"cifar"`` (ResNet20, M = 20, R = 300, the paper's
grids; needs the CIFAR-10 files and a GPU-sized budget) and ``"digits"``, the offline reduced
study. Client-level DP needs many clients (the noise on the mean message has sd
``beta sigma_DP / (p sqrt(M))`` per coordinate against a signal of at most beta): with the digits
CNN over M = 10 clients every private run stayed at chance. The ``digits`` preset therefore runs
the GLM backend (``model=None``: :class:`~privfedstat.FedAlphaNormEC` and
:class:`~privfedstat.ClippedFedAvg`, multinomial logistic regression, 10 classes, on the 64
pixels and an intercept, 585 parameters) over M = 359 clients of 4-5 of scikit-learn's 8 x 8
digits, R = 200, beta in {0.001, 0.01, 0.1} and a gamma grid widened to {0.1, 0.3, ..., 100} (the
comparator depends only on beta gamma); 126 fits, about 10 minutes on one quiet core.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import pandas as pd
import torch
from torch import nn
from torch.nn import functional as F

from ..data import FederatedData
from ..estimators.fednormec import ClippedFedAvg, FedAlphaNormEC
from ..exceptions import ConvergenceWarning
from ..families import get_family
from .data import TensorFederatedData
from .models import ResNet20
from .normec import DeepClippedFedAvg, DeepFedAlphaNormEC
from .study import load_cnn_data

__all__ = ["NormECStudy", "NORMEC_PRESETS", "NORMEC_METHODS", "normec_study", "summarise_normec",
           "plot_normec_study", "reproduce_normec"]

#: the two methods, in the paper's legend order
NORMEC_METHODS = ("Fed-alpha-NormEC", "DP-FedAvg")


@dataclass(frozen=True)
class NormECStudy:
    """Settings of the Fed-alpha-NormEC experiments for one data set.

    Attributes
    ----------
    dataset : str
    model : callable or None
        Builds the network (no arguments); None: the GLM backend, multinomial logistic regression
        on the flattened images with an intercept (``n_classes`` classes).
    n_clients : int
        M.
    n_rounds : int
        R (K + 1).
    betas, gammas, participations : tuple of float
        The grids of beta, gamma and p.
    alpha : float
        Smoothed normalisation (0.01).
    epsilon, delta : float
        The client-level target (8, 1e-5).
    batch_size : int or None
        Rows of Fed-alpha-NormEC's local step (None: full batch).
    eval_every : int
        Rounds between two evaluations on the test set.
    n_classes : int
        Classes of the GLM backend.
    """

    dataset: str
    model: Callable[[], nn.Module] | None
    n_clients: int
    n_rounds: int
    betas: tuple[float, ...] = (0.001, 0.01, 0.1)
    gammas: tuple[float, ...] = (0.001, 0.01, 0.1)
    participations: tuple[float, ...] = (0.25, 0.5, 1.0)
    alpha: float = 0.01
    epsilon: float = 8.0
    delta: float = 1e-5
    batch_size: int | None = 32
    eval_every: int = 10
    n_classes: int = 10


NORMEC_PRESETS = {
    "cifar": NormECStudy("cifar", ResNet20, n_clients=20, n_rounds=300),
    "digits": NormECStudy("digits", None, n_clients=359, n_rounds=200,
                          gammas=(0.1, 0.3, 1.0, 3.0, 10.0, 30.0, 100.0), batch_size=None),
}


def _model(study: NormECStudy, seed: int) -> nn.Module:
    """The network with its initial weights drawn from ``seed`` (the same x^0 in every cell; the global torch
    stream is left as it was)."""
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        return study.model()


def _estimator(method: str, study: NormECStudy, beta: float, gamma: float, p: float, seed: int):
    common = dict(n_rounds=study.n_rounds, beta=beta, step_size=gamma, server_step_size=gamma, mu=None,
                  epsilon=(study.epsilon, study.delta), participation=None if p >= 1 else p, random_state=seed)
    ec = method == "Fed-alpha-NormEC"
    if study.model is None:
        family = get_family("multinomial", n_classes=study.n_classes)
        return FedAlphaNormEC(family=family, alpha=study.alpha, **common) if ec else ClippedFedAvg(family=family, **common)
    if ec:
        return DeepFedAlphaNormEC(model=_model(study, seed), alpha=study.alpha, batch_size=study.batch_size, **common)
    return DeepClippedFedAvg(model=_model(study, seed), **common)


def _glm_design(images) -> np.ndarray:
    """The GLM backend's rows: an intercept and the flattened pixels, float64."""
    X = np.asarray(images, dtype=np.float64).reshape(len(images), -1)
    return np.column_stack([np.ones(len(X)), X])


def _split(study: NormECStudy, train, random_state: int):
    """The pooled training set dealt IID to ``study.n_clients`` clients (sizes differ by at most one)."""
    data = TensorFederatedData.split_iid(torch.as_tensor(train[0]), torch.as_tensor(train[1]), study.n_clients,
                                         random_state=random_state)
    if study.model is not None:
        return data
    return FederatedData.from_pooled(_glm_design(data.inputs), data.targets.numpy().astype(np.float64),
                                     sizes=list(np.diff(data.offsets)))


def _logits(study: NormECStudy, seed: int, X):
    """Test logits as a function of the flat parameters (the network's, or the GLM's Theta with class 0 at 0)."""
    if study.model is None:
        design = torch.from_numpy(_glm_design(X))
        return lambda theta: F.pad(design @ torch.from_numpy(theta).reshape(design.shape[1], -1), (1, 0))
    model = _model(study, seed)
    dtype = next(model.parameters()).dtype
    inputs = torch.as_tensor(X).to(dtype)

    def logits(theta):
        torch.nn.utils.vector_to_parameters(torch.from_numpy(theta).to(dtype), model.parameters())
        return model(inputs)
    return logits


def _evaluate(logits, history: np.ndarray, rounds: list[int], test) -> list[tuple[float, float]]:
    """Test loss (cross-entropy) and accuracy of the parameters after each of ``rounds``."""
    y = torch.as_tensor(test[1])
    out = []
    for k in rounds:
        with torch.no_grad():
            z = logits(history[k])
            loss = float(F.cross_entropy(z, y))
        out.append((loss if math.isfinite(loss) else math.nan, float((z.argmax(1) == y).double().mean())))
    return out


def normec_study(study: NormECStudy, train, test, *, methods=NORMEC_METHODS, random_state: int = 0,
                 progress: bool = False) -> pd.DataFrame:
    """Run every method over the beta x gamma x p grid; one row per (method, beta, gamma, p, evaluated round).

    Parameters
    ----------
    study : NormECStudy
    train, test : (images, labels) arrays
        The pooled training set (split IID over ``study.n_clients`` clients) and the test set.
    methods : sequence of str, default :data:`NORMEC_METHODS`
    random_state : int
        Seeds the split and every fit (the same split and seed for every cell: paired comparisons).
    progress : bool

    Returns
    -------
    DataFrame with columns method, beta, gamma, p, round, communications (``k p M``), loss,
    accuracy, sigma (sigma_DP), epsilon (the fit's third-party epsilon at ``delta``, replace-one).
    """
    unknown = set(methods) - set(NORMEC_METHODS)
    if unknown:
        raise ValueError(f"methods must be among {NORMEC_METHODS}, got {sorted(unknown)}.")
    data = _split(study, train, random_state)
    logits = _logits(study, random_state, test[0])
    rounds = sorted(set(range(0, study.n_rounds + 1, study.eval_every)) | {study.n_rounds})
    rows = []
    cells = [(m, b, g, p) for m in methods for p in study.participations for b in study.betas for g in study.gammas]
    for j, (method, beta, gamma, p) in enumerate(cells):
        est = _estimator(method, study, beta, gamma, p, random_state)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ConvergenceWarning)
            est.fit(data)
        history = np.asarray(est.history_)
        for k, (loss, acc) in zip(rounds, _evaluate(logits, history, rounds, test)):
            rows.append(dict(method=method, beta=beta, gamma=gamma, p=p, round=k, communications=k * p * study.n_clients,
                             loss=loss, accuracy=acc, sigma=est.sigma_, epsilon=est.epsilon_))
        if progress:
            print(f"[{j + 1}/{len(cells)}] {method} beta={beta:g} gamma={gamma:g} p={p:g}: accuracy "
                  f"{rows[-1]['accuracy']:.3f}", flush=True)
    return pd.DataFrame(rows)


def summarise_normec(df: pd.DataFrame, target: float | None = None) -> pd.DataFrame:
    """Per (method, p, beta): the best final accuracy over gamma, that gamma, and the total communications
    ``k p M`` at which the tuned run first reaches ``target`` accuracy (default: 90% of the best final
    accuracy of the whole table; NaN if never)."""
    final = df[df["round"] == df["round"].max()]
    best = final.loc[final.groupby(["method", "p", "beta"])["accuracy"].idxmax()]
    target = 0.9 * float(final["accuracy"].max()) if target is None else float(target)
    comms = []
    for _, r in best.iterrows():
        run = df[(df.method == r.method) & (df.p == r.p) & (df.beta == r.beta) & (df.gamma == r.gamma)]
        hit = run[run.accuracy >= target]
        comms.append(float(hit.communications.min()) if len(hit) else math.nan)
    out = best[["method", "p", "beta", "gamma", "accuracy"]].assign(comms_to_target=comms, target=target)
    return out.rename(columns={"accuracy": "final_accuracy", "gamma": "best_gamma"}).reset_index(drop=True)


def plot_normec_study(df: pd.DataFrame, axes=None):
    """Figs. 1-4: accuracy vs rounds per beta (p = 1), accuracy vs communications per p (tuned beta, gamma),
    and the comparator's best accuracy over (beta, gamma) (heatmap). Returns the figure."""
    import matplotlib.pyplot as plt

    if axes is None:
        _, axes = plt.subplots(1, 3, figsize=(15, 4))
    summary = summarise_normec(df)
    full = summary[summary.p == summary.p.max()]
    for _, r in full.iterrows():
        run = df[(df.method == r.method) & (df.p == r.p) & (df.beta == r.beta) & (df.gamma == r.best_gamma)]
        axes[0].plot(run["round"], run.accuracy, ls="-" if r.method == NORMEC_METHODS[0] else "--",
                     label=f"{r.method}, beta={r.beta:g}")
    axes[0].set(xlabel="round", ylabel="test accuracy", title=f"p = {summary.p.max():g}, tuned gamma")
    axes[0].legend(fontsize=7)
    ec = summary[summary.method == NORMEC_METHODS[0]]
    for p, grp in ec.groupby("p"):
        r = grp.loc[grp.final_accuracy.idxmax()]
        run = df[(df.method == r.method) & (df.p == p) & (df.beta == r.beta) & (df.gamma == r.best_gamma)]
        axes[1].plot(run.communications, run.accuracy, label=f"p={p:g} (beta={r.beta:g}, gamma={r.best_gamma:g})")
    axes[1].set(xlabel="total communications k p M", ylabel="test accuracy", title=NORMEC_METHODS[0])
    axes[1].legend(fontsize=7)
    final = df[(df["round"] == df["round"].max()) & (df.method == NORMEC_METHODS[1]) & (df.p == df.p.max())]
    if len(final):
        best = df[(df.method == NORMEC_METHODS[1]) & (df.p == df.p.max())].groupby(["beta", "gamma"]).accuracy.max()
        grid = best.unstack("gamma")
        im = axes[2].imshow(grid.values, cmap="viridis", origin="lower")
        axes[2].set(xticks=range(grid.shape[1]), xticklabels=[f"{g:g}" for g in grid.columns], xlabel="gamma",
                    yticks=range(grid.shape[0]), yticklabels=[f"{b:g}" for b in grid.index], ylabel="beta",
                    title=f"{NORMEC_METHODS[1]}: highest test accuracy")
        for (a, b), v in np.ndenumerate(grid.values):
            axes[2].text(b, a, f"{v:.2f}", ha="center", va="center", color="w", fontsize=8)
        plt.colorbar(im, ax=axes[2])
    return axes[0].figure


def reproduce_normec(dataset: str, *, data_dir=None, out="results", clients=None, rounds=None, betas=None, gammas=None,
                     participations=None, seed: int = 0, progress: bool = True):
    """``privfedstat reproduce normec-<dataset>``: run the study, write ``<out>/normec-<dataset>.csv`` and ``.png``.

    ``clients``, ``rounds``, ``betas``, ``gammas`` and ``participations`` replace the preset's M, R and
    grids (the scale). Returns (results, summary table, stem).
    """
    if dataset not in NORMEC_PRESETS:
        raise ValueError(f"dataset must be one of {sorted(NORMEC_PRESETS)}, got {dataset!r}.")
    grids = dict(betas=betas, gammas=gammas, participations=participations)
    changes = dict(n_clients=clients, n_rounds=rounds, **{k: None if v is None else tuple(map(float, v))
                                                           for k, v in grids.items()})
    study = replace(NORMEC_PRESETS[dataset], **{k: v for k, v in changes.items() if v is not None})
    train, test = load_cnn_data(dataset, data_dir, random_state=seed)
    df = normec_study(study, train, test, random_state=seed, progress=progress)
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    stem = out / f"normec-{dataset}"
    df.to_csv(stem.with_suffix(".csv"), index=False)
    import matplotlib.pyplot as plt

    fig = plot_normec_study(df)
    fig.tight_layout()
    fig.savefig(stem.with_suffix(".png"), dpi=130)
    plt.close(fig)
    return df, summarise_normec(df), stem
