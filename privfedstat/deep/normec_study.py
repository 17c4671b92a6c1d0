"""The experiments of Fed-alpha-NormEC (Shulgin et al. 2025, Section 6 and App. A; Figs. 1-4) at a configurable scale.

Protocol: the training images are split IID over M clients; every method runs R rounds with
client-level DP at (epsilon, delta) = (8, 1e-5) towards a third party (replace-one), sigma_DP
calibrated to it by the PLD accountant for R Poisson-subsampled rounds at participation p
(``epsilon=(8, 1e-5)``, ``mu=None``); alpha = 0.01, no server normalisation, a grid of beta (the
"sensitivity threshold") and gamma (the step size), p in {0.25, 0.5, 1}. Methods: Fed-alpha-NormEC
(:class:`~privfedstat.deep.DeepFedAlphaNormEC`) and DP-FedAvg with clipping
(:class:`~privfedstat.deep.DeepClippedFedAvg`). Metrics: the test loss and accuracy every
``eval_every`` rounds, against rounds and against total communications ``k p M`` (Figs. 1-3), and
the best test accuracy of each (beta, gamma) (Fig. 4's heatmap).

Chosen here where the paper is silent or the scale is reduced [I]: one local step (T = 1) per
round, so the local step cancels and gamma is the server step (eta = gamma: the paper tunes one
learning rate); Fed-alpha-NormEC's local step uses ``batch_size`` rows (the paper's 32; the
``digits`` preset uses the full batch) while the comparator's clipped update is full batch (its
verb has no minibatches); sigma_DP by the PLD (not the paper's formula, which does not meet the
target). Presets (:data:`NORMEC_PRESETS`): ``"cifar"`` (ResNet20, M = 20, R = 300, the paper's
grids; needs the CIFAR-10 files and a GPU-sized budget) and ``"digits"``, the offline reduced
study. Client-level DP needs many clients (the noise on the mean message has sd
``beta sigma_DP / (p sqrt(M))`` per coordinate against a signal of at most beta), more than a few
thousand images give a network; the ``digits`` preset therefore runs
the GLM backend (``model=None``: :class:`~privfedstat.FedAlphaNormEC` and
:class:`~privfedstat.ClippedFedAvg`, multinomial logistic regression, 10 classes, on the 64
pixels and an intercept, 585 parameters) over M = 359 clients of 4-5 of scikit-learn's 8 x 8
digits, R = 200, beta in {0.001, 0.01, 0.1} and a gamma grid widened to {0.1, 0.3, ..., 100} (the
comparator depends only on beta gamma). ``"digits-cnn"`` is the same split and rounds with the
network :class:`~privfedstat.deep.models.DigitsCNN` (3658 parameters), full-batch local steps,
gamma in {0.01, 0.03, 0.1, 0.3} and p = 1 (a fit's round runs every client's local step at once,
vectorised across clients: :mod:`privfedstat.deep.stacked`).
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pandas as pd
import torch
from torch import nn
from torch.nn import functional as F

from ..algorithms.fednormec import ClippedFedAvg, FedAlphaNormEC
from ..data import FederatedData
from ..exceptions import ConvergenceWarning
from ..families import get_family
from ..simulations.study import Study, Table, param
from .data import TensorFederatedData
from .models import DigitsCNN, ResNet20
from .normec import DeepClippedFedAvg, DeepFedAlphaNormEC
from .study import TorchConfig, load_cnn_data, seeded_model

__all__ = ["NormECConfig", "NORMEC_PRESETS", "NORMEC_METHODS", "normec_study", "summarise_normec",
           "plot_normec_study", "STUDIES"]

#: the two methods, in the paper's legend order
NORMEC_METHODS = ("Fed-alpha-NormEC", "DP-FedAvg")


@dataclass(frozen=True, kw_only=True)
class NormECConfig(TorchConfig):
    """Settings of the Fed-alpha-NormEC experiments on one data set (``dataset``; ``model`` builds the network,
    None: the GLM backend, multinomial logistic regression on the flattened images with an intercept)."""

    dataset: str
    model: Callable[[], nn.Module] | None
    n_clients: int = param("M, clients", flag="clients")
    n_rounds: int = param("R (K + 1), rounds", flag="rounds")
    betas: tuple[float, ...] = param("beta grid, e.g. 0.001,0.01,0.1", (0.001, 0.01, 0.1))
    gammas: tuple[float, ...] = param("gamma (step size) grid, e.g. 1,3,10", (0.001, 0.01, 0.1))
    participations: tuple[float, ...] = param("participation p grid, e.g. 0.25,0.5,1", (0.25, 0.5, 1.0))
    alpha: float = param("smoothed normalisation alpha", 0.01)
    epsilon: float = param("client-level epsilon target", 8.0)
    delta: float = param("client-level delta target", 1e-5)
    batch_size: int | None = param("rows of Fed-alpha-NormEC's local step (default: full batch)", 32, parse=int)
    eval_every: int = param("rounds between two evaluations on the test set", 10)
    n_classes: int = param("classes of the GLM backend", 10)
    data_dir: str | None = param("folder with the CIFAR-10 python files", None, parse=str)
    seed: int = param("seed of the split and of every fit (the same in every cell: paired comparisons)", 0)


NORMEC_PRESETS = {
    "cifar": NormECConfig(dataset="cifar", model=ResNet20, n_clients=20, n_rounds=300),
    "digits": NormECConfig(dataset="digits", model=None, n_clients=359, n_rounds=200,
                           gammas=(0.1, 0.3, 1.0, 3.0, 10.0, 30.0, 100.0), batch_size=None),
    "digits-cnn": NormECConfig(dataset="digits", model=DigitsCNN, n_clients=359, n_rounds=200,
                               gammas=(0.01, 0.03, 0.1, 0.3), participations=(1.0,), batch_size=None),
}


def _estimator(method: str, study: NormECConfig, beta: float, gamma: float, p: float, seed: int):
    common = dict(n_rounds=study.n_rounds, beta=beta, step_size=gamma, server_step_size=gamma, mu=None,
                  epsilon=(study.epsilon, study.delta), participation=None if p >= 1 else p, random_state=seed)
    ec = method == "Fed-alpha-NormEC"
    if study.model is None:
        family = get_family("multinomial", n_classes=study.n_classes)
        return FedAlphaNormEC(family=family, alpha=study.alpha, **common) if ec else ClippedFedAvg(family=family, **common)
    if ec:
        return DeepFedAlphaNormEC(model=seeded_model(study.model, seed), alpha=study.alpha, batch_size=study.batch_size, **common)
    return DeepClippedFedAvg(model=seeded_model(study.model, seed), **common)


def _glm_design(images) -> np.ndarray:
    """The GLM backend's rows: an intercept and the flattened pixels, float64."""
    X = np.asarray(images, dtype=np.float64).reshape(len(images), -1)
    return np.column_stack([np.ones(len(X)), X])


def _split(study: NormECConfig, train, random_state: int):
    """The pooled training set dealt IID to ``study.n_clients`` clients (sizes differ by at most one)."""
    data = TensorFederatedData.split_iid(torch.as_tensor(train[0]), torch.as_tensor(train[1]), study.n_clients,
                                         random_state=random_state)
    if study.model is not None:
        return data
    return FederatedData.from_pooled(_glm_design(data.inputs), data.targets.numpy().astype(np.float64),
                                     sizes=list(np.diff(data.offsets)))


def _logits(study: NormECConfig, seed: int, X):
    """Test logits as a function of the flat parameters (the network's, or the GLM's Theta with class 0 at 0)."""
    if study.model is None:
        design = torch.from_numpy(_glm_design(X))
        return lambda theta: F.pad(design @ torch.from_numpy(theta).reshape(design.shape[1], -1), (1, 0))
    model = seeded_model(study.model, seed)
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


def normec_study(study: NormECConfig, train, test, *, methods=NORMEC_METHODS, progress: bool = False) -> pd.DataFrame:
    """Run every method over the beta x gamma x p grid; one row per (method, beta, gamma, p, evaluated round).

    Parameters
    ----------
    study : NormECConfig
    train, test : (images, labels) arrays
        The pooled training set (split IID over ``study.n_clients`` clients) and the test set.
    methods : sequence of str, default :data:`NORMEC_METHODS`
    progress : bool

    Returns
    -------
    DataFrame with columns method, beta, gamma, p, round, communications (``k p M``), loss,
    accuracy, sigma (sigma_DP), epsilon (the fit's third-party epsilon at ``delta``, replace-one).
    """
    unknown = set(methods) - set(NORMEC_METHODS)
    if unknown:
        raise ValueError(f"methods must be among {NORMEC_METHODS}, got {sorted(unknown)}.")
    random_state = study.seed
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
    from matplotlib.figure import Figure

    if axes is None:
        axes = Figure(figsize=(15, 4), layout="tight").subplots(1, 3)
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
        axes[2].figure.colorbar(im, ax=axes[2])
    return axes[0].figure


def _run(config: NormECConfig, stem, progress: bool) -> dict[str, pd.DataFrame]:
    config.set_threads()
    train, test = load_cnn_data(config.dataset, config.data_dir, random_state=config.seed)
    return {"": normec_study(config, train, test, progress=progress)}


STUDIES = tuple(Study(f"normec-{name}", f"Fed-alpha-NormEC vs clipped DP-FedAvg, Figs. 1-4, on {where}", preset, _run,
                      lambda frames, config: {"summary": Table(summarise_normec(frames[""]), "per (method, p, beta): "
                                                               "best final accuracy over gamma and communications "
                                                               "to the target accuracy")},
                      lambda frames, tables, config: {"": plot_normec_study(frames[""])})
                for name, where, preset in (("digits", "scikit-learn's digits (offline, GLM backend)",
                                             NORMEC_PRESETS["digits"]),
                                            ("digits-cnn", "scikit-learn's digits (offline, DigitsCNN)",
                                             NORMEC_PRESETS["digits-cnn"]),
                                            ("cifar", "CIFAR-10 (--data-dir; ResNet20)", NORMEC_PRESETS["cifar"])))
