"""The CNN study of Section 5.2: test accuracy of four private federated methods as clients get more data
(Scenario 1) and as the same data is split over more clients (Scenario 2).

Protocol (Peng, Paul & Auddy, Sections 5.2.1-5.2.2): the training images are split IID over m
clients; Scenario 1 fixes m and caps every client at n images (n varied), Scenario 2 uses the
whole training set and varies m. Each client keeps 80% of its images for training (the paper's
10% validation and 10% local-test portions are held out and play no part in the reported
accuracy). Methods: DP-FedAvg (R rounds of K full-batch local steps, server step eta_s),
compute-matched DP-FedSGD (R K rounds) and DP-FedHybrid (K local steps, then R K - K rounds),
and DP-FedNewton-Iter (C cycles of R / C DP-FedAvg rounds, each followed by a private head-only
Newton step); a fraction q of the clients takes part in each round; every method spends mu per
client (record level). The metric is the accuracy on the standard test set; the figures show the
median over repetitions (the paper's Figures 9 and 10).

Presets (:data:`PRESETS`): ``"mnist"`` and ``"cifar"`` hold the paper's settings;
``"digits"`` is an offline stand-in on scikit-learn's 8 x 8 digits (1797 images: 360 held out
as the test set, 1437 to split) with :class:`~privfedstat.deep.models.DigitsCNN`: Scenario 1
with m = 8 and n in {40, 80, 120, 170}, Scenario 2 with m in {4, 8, 16, 32}, q = 0.5 (so
a few clients per round; the paper asks 10 of 100), a larger step size (1.0: the small network
trains slowly at 0.01) and 3 repetitions. Not given by the paper and chosen here [I]: FedHybrid's
split (K1 = K local steps), FedSGD's and FedHybrid's step size (eta, that of FedAvg), the Newton
step's damping lambda and step alpha, the client sampling of the Newton step (the same q).
"""

from __future__ import annotations

import math
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pandas as pd
import torch
from torch import nn

from ..exceptions import ConvergenceWarning, PrivacyNoiseWarning
from ..simulations.study import Study, Table, listof, param
from .data import TensorFederatedData
from .estimators import DeepFedAvg, DeepFedHybrid, DeepFedSGD, compute_matched_rounds
from .models import CifarCNN, DigitsCNN, MnistCNN
from .newton import DeepFedNewton
from .study import TorchConfig, load_cnn_data, seeded_model

__all__ = ["CNNConfig", "PRESETS", "CNN_METHODS", "cnn_methods", "cnn_study", "summarise_cnn", "plot_cnn_study",
           "STUDIES"]

#: the four methods of Figures 9-10, in the paper's legend order
CNN_METHODS = ("DP-FedSGD", "DP-FedHybrid", "DP-FedAvg", "DP-FedNewton-Iter")


@dataclass(frozen=True, kw_only=True)
class CNNConfig(TorchConfig):
    """Settings of the Section 5.2 study on one data set (``dataset``, ``model``: the network's builder)."""

    dataset: str
    model: Callable[[], nn.Module]
    n_rounds: int = param("R, DP-FedAvg's base rounds (paper: 10)", flag="rounds")
    n_local_steps: int = param("K, local full-batch epochs per round (MNIST 10, CIFAR 30)", flag="local-steps")
    step_size: float = param("eta (MNIST 0.01, CIFAR 0.005)")
    server_step_size: float = param("eta_s (MNIST 1.0, CIFAR 0.75)")
    clip: float = param("B (MNIST 1.0, CIFAR 0.75)")
    participation: float = param("q, the fraction of clients asked per round (paper: 0.1)")
    n_cycles: int = param("C, FedNewton-Iter's cycles, each of R / C rounds (paper: 2)")
    damping: float = param("lambda of the Newton step [I]")
    newton_step: float = param("alpha of the Newton step [I]")
    clients_scenario1: int = param("m of Scenario 1 (paper: 100)")
    sizes_scenario1: tuple[int, ...] = param("Scenario 1's images per client n, e.g. 50,100,200", flag="sizes")
    clients_scenario2: tuple[int, ...] = param("Scenario 2's numbers of clients m, e.g. 100,200", flag="clients")
    reps: tuple[int, int] = param("repetitions of Scenarios 1 and 2 (one number: both)",
                                  parse=lambda text: (int(text),) * 2)
    train_fraction: float = param("share of each client's images it trains on", 0.8)
    mus: tuple[float, ...] = param("GDP budget per client (default: 2 and no privacy)", (2.0, math.inf), flag="mu",
                                   parse=listof(float))
    scenarios: tuple[int, ...] = param("which scenarios: 1, 2 or both", (1, 2), flag="scenario",
                                       parse=lambda text: (1, 2) if text == "both" else (int(text),))
    data_dir: str | None = param("folder with the MNIST IDX / CIFAR-10 python files", None, parse=str)
    seed: int = param("seed of the client splits, the initial networks and the fits", 0)


_PAPER = dict(n_rounds=10, participation=0.1, n_cycles=2, damping=1.0, newton_step=1.0, clients_scenario1=100,
              clients_scenario2=(100, 200, 300, 500, 800, 1000), reps=(5, 4))
PRESETS = {
    "mnist": CNNConfig(dataset="mnist", model=MnistCNN, n_local_steps=10, step_size=0.01, server_step_size=1.0,
                       clip=1.0, sizes_scenario1=(50, 75, 100, 200, 300, 400, 600), **_PAPER),
    "cifar": CNNConfig(dataset="cifar", model=CifarCNN, n_local_steps=30, step_size=0.005, server_step_size=0.75,
                       clip=0.75, sizes_scenario1=(50, 75, 100, 200, 300, 400, 500), **_PAPER),
    "digits": CNNConfig(dataset="digits", model=DigitsCNN, n_rounds=10, n_local_steps=10, step_size=1.0,
                        server_step_size=1.0, clip=1.0, participation=0.5, n_cycles=2, damping=1.0, newton_step=1.0,
                        clients_scenario1=8, sizes_scenario1=(40, 80, 120, 170), clients_scenario2=(4, 8, 16, 32),
                        reps=(3, 3)),
}


def cnn_methods(study: CNNConfig, model: nn.Module, mu: float, seed: int) -> dict[str, object]:
    """The four estimators of Figures 9-10 at ``mu``, compute-matched to DP-FedAvg's R K gradient evaluations."""
    R, K = study.n_rounds, study.n_local_steps
    common = dict(model=model, loss="nll", mu=mu, step_size=study.step_size, clip=study.clip,
                  participation=study.participation, random_state=seed, progress=False)  # the study's bar only
    if R % study.n_cycles:
        raise ValueError(f"FedNewton-Iter's {study.n_cycles} cycles must split the {R} base rounds evenly.")
    return {
        "DP-FedSGD": DeepFedSGD(n_iter=compute_matched_rounds(R, K), **common),
        "DP-FedHybrid": DeepFedHybrid(n_local_steps=K, n_server_iter=compute_matched_rounds(R, K, local_steps=K),
                                      **common),
        "DP-FedAvg": DeepFedAvg(n_rounds=R, n_local_steps=K, server_step_size=study.server_step_size, **common),
        "DP-FedNewton-Iter": DeepFedNewton(n_cycles=study.n_cycles, n_rounds=R // study.n_cycles, n_local_steps=K,
                                           server_step_size=study.server_step_size, damping=study.damping,
                                           newton_step=study.newton_step, **common),
    }


def _training_part(data: TensorFederatedData, fraction: float) -> TensorFederatedData:
    """Each client's first ``max(1, floor(fraction n_i))`` rows (its rows are in random order already)."""
    keep = np.maximum(1, np.floor(fraction * data.sizes).astype(np.int64))
    rows = np.concatenate([np.arange(lo, lo + k) for lo, k in zip(data.offsets[:-1], keep)])
    return TensorFederatedData.from_pooled(data.inputs[rows], data.targets[rows], sizes=keep)


def cnn_study(study: CNNConfig, train: tuple[np.ndarray, np.ndarray], test: tuple[np.ndarray, np.ndarray], *,
              progress: bool = True) -> pd.DataFrame:
    """Run the Section 5.2 protocol; one row per (scenario, grid point, repetition, mu, method).

    Repetition r draws its client split and the network's initial weights from ``study.seed`` and r;
    every method and mu of a repetition starts from the same weights and split (paired comparisons).

    Parameters
    ----------
    study : CNNConfig
        Settings (e.g. ``PRESETS["digits"]``, or one changed with :func:`dataclasses.replace`).
    train, test : tuple of (ndarray of shape (n, C, H, W), ndarray of shape (n,))
        Training images to split over the clients and the test set the accuracy is measured on.
    progress : bool

    Returns
    -------
    pandas.DataFrame
        Columns dataset, scenario, n_clients, n_per_client (images per client before the local
        80/10/10 split; mean in Scenario 2), rep, mu, method, accuracy, rounds (communication
        rounds), seconds.
    """
    from tqdm.auto import tqdm

    reps, random_state, mus = study.reps, study.seed, study.mus
    X, y = (torch.as_tensor(np.asarray(a)) for a in train)
    X_test, y_test = np.asarray(test[0]), np.asarray(test[1])
    cells = []
    for scenario in study.scenarios:
        if scenario == 1:
            cells += [(1, study.clients_scenario1, n) for n in study.sizes_scenario1]
        elif scenario == 2:
            cells += [(2, m, None) for m in study.clients_scenario2]
        else:
            raise ValueError(f"scenarios are 1 and 2, got {scenario!r}.")
    runs = [(cell, r) for cell in cells for r in range(reps[cell[0] - 1])]
    bar = tqdm(total=len(runs) * len(mus) * len(CNN_METHODS), disable=not progress, desc=f"cnn-{study.dataset}")
    rows = []
    for (scenario, m, n), r in runs:
        seed = int(np.random.SeedSequence([random_state, scenario, m, n or 0, r]).generate_state(1)[0])
        data = _training_part(TensorFederatedData.split_iid(X, y, m, n_per_client=n, random_state=seed),
                              study.train_fraction)
        model = seeded_model(study.model, seed)
        for mu in mus:
            for method, est in cnn_methods(study, model, mu, seed).items():
                t0 = time.perf_counter()
                with warnings.catch_warnings():  # a fixed budget of rounds, as in the paper: accuracy is the result
                    warnings.simplefilter("ignore", ConvergenceWarning)
                    warnings.simplefilter("ignore", PrivacyNoiseWarning)
                    est.fit(data)
                rows.append(dict(dataset=study.dataset, scenario=scenario, n_clients=m,
                                 n_per_client=float(n if n is not None else len(X) / m), rep=r, mu=mu, method=method,
                                 accuracy=est.score(X_test, y_test), rounds=est.communication_.rounds,
                                 seconds=time.perf_counter() - t0))
                bar.update()
    bar.close()
    return pd.DataFrame(rows)


def summarise_cnn(df: pd.DataFrame) -> pd.DataFrame:
    """Median test accuracy over repetitions: rows (scenario, n_clients, n_per_client, mu), one column per method."""
    table = df.groupby(["scenario", "n_clients", "n_per_client", "mu", "method"])["accuracy"].median().unstack("method")
    return table.reindex(columns=[m for m in CNN_METHODS if m in table.columns])


def plot_cnn_study(df: pd.DataFrame, *, scenario: int, mu: float | None = None, ax=None):
    """Median test accuracy against n (Scenario 1, Figure 9) or m (Scenario 2, Figure 10), one line per method.

    Parameters
    ----------
    df : pandas.DataFrame
        Output of :func:`cnn_study`.
    scenario : {1, 2}
    mu : float, optional
        The budget to show (default: the smallest in ``df``).
    ax : matplotlib Axes, optional

    Returns
    -------
    matplotlib.figure.Figure
    """
    from matplotlib.figure import Figure

    part = df[df["scenario"] == scenario]
    if part.empty:
        raise ValueError(f"no rows of scenario {scenario} in the results.")
    mu = float(part["mu"].min()) if mu is None else mu
    part = part[part["mu"] == mu]
    x = "n_per_client" if scenario == 1 else "n_clients"
    if ax is None:
        ax = Figure(figsize=(5, 3.6)).subplots()
    medians = part.groupby(["method", x])["accuracy"].median()
    for method in [m for m in CNN_METHODS if m in medians.index.get_level_values(0)]:
        line = medians.loc[method]
        ax.plot(line.index, line.values, marker="o", label=method)
    ax.set_xlabel("samples per client n" if scenario == 1 else "number of clients m")
    ax.set_ylabel("test accuracy (median)")
    budget = "non-private" if math.isinf(mu) else f"mu = {mu:g}"
    label = f"m = {int(part['n_clients'].iloc[0])}" if scenario == 1 else "full training set"
    ax.set_title(f"{part['dataset'].iloc[0]}, scenario {scenario} ({label}, {budget})")
    ax.legend(fontsize="small")
    ax.grid(alpha=0.3)
    return ax.figure


def _run(config: CNNConfig, stem, progress: bool) -> dict[str, pd.DataFrame]:
    config.set_threads()
    train, test = load_cnn_data(config.dataset, config.data_dir, random_state=config.seed)
    return {"": cnn_study(config, train, test, progress=progress)}


def _figures(frames, tables, config: CNNConfig) -> dict:
    from matplotlib.figure import Figure

    panels = [(s, mu) for mu in sorted(set(config.mus)) for s in sorted(set(config.scenarios))]
    fig = Figure(figsize=(5 * len(panels), 3.8))
    for ax, (s, mu) in zip(fig.subplots(1, len(panels), squeeze=False)[0], panels):
        plot_cnn_study(frames[""], scenario=s, mu=mu, ax=ax)
    fig.tight_layout()
    return {"": fig}


STUDIES = tuple(Study(f"cnn-{name}", f"Section 5.2: CNN test accuracy of four private methods on {where}", preset, _run,
                      lambda frames, config: {"medians": Table(summarise_cnn(frames[""]),
                                                               "median test accuracy over repetitions")}, _figures)
                for name, where, preset in (("mnist", "MNIST (--data-dir)", PRESETS["mnist"]),
                                            ("cifar", "CIFAR-10 (--data-dir)", PRESETS["cifar"]),
                                            ("digits", "scikit-learn's digits (offline)", PRESETS["digits"])))
