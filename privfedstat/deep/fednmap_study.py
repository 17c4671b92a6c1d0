"""FedNMap's Section 5.2 study (Fig. 6): MobileNetV3-Small with an l1 regulariser on label-sorted clients; Hoyer's
sparsity and the training loss against rounds, FedNMap vs Zhang et al. (2024a) vs FedCanon.

Protocol: the training images sorted by label and split without overlap into n equal consecutive blocks
(heterogeneous clients), full participation, the same rounds and the same initial network
(:class:`~privfedstat.deep.mobilenet.MobileNetV3Small`, GroupNorm, eval mode: dropout off) for every method,
``phi = alpha ||x||_1`` on every trainable parameter, no privacy (the paper's setting: mu = inf, no clipping).
Each local gradient is taken on a fresh minibatch of ``batch_size`` rows (the paper's stochastic gradients).
Metrics, on the server's model x_t after every round: Hoyer's sparsity of the flat parameters
(:func:`~privfedstat.simulations.composite_metrics.hoyer_sparsity`) and the training loss f(x_t) (mean
cross-entropy over every training image, without phi).

Data [I: the paper does not name its data set]: ``"digits"`` (offline: scikit-learn's 8 x 8 digits,
upsampled to 32 x 32 and repeated over 3 channels) or ``"cifar"`` (CIFAR-10 from ``data_dir``). Steps
[I: not given]: ``eta_a = step_size``, ``eta_s = 1``, FedNMap's gamma = ``eta_hat``; FedCanon uses the same
eta_a, K = Q and server step. n = 20 and Q = 10 are the paper's; the other defaults are a reduced scale
(400 images, 10 rounds).
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass

import numpy as np
import pandas as pd
import torch
from torch.nn import functional as F

from ..simulations.composite_metrics import hoyer_sparsity
from ..simulations.study import Study, Table, param
from .data import TensorFederatedData
from .estimators import _with_parameters
from .fednmap import DeepFedCanon, DeepFedNMap, DeepZhang
from .mobilenet import MobileNetV3Small
from .study import TorchConfig, seeded_model

__all__ = ["MobileNetConfig", "mobilenet_images", "fednmap_mobilenet_study", "plot_fednmap_mobilenet", "STUDY"]

METHODS = {"FedNMap": DeepFedNMap, "Zhang": DeepZhang, "FedCanon": DeepFedCanon}


@dataclass(frozen=True, kw_only=True)
class MobileNetConfig(TorchConfig):
    """Scale and settings of Fig. 6."""

    n_clients: int = param("n, clients (the paper's 20)", 20, flag="clients")
    n_local_steps: int = param("Q, local steps (the paper's 10)", 10, flag="local-steps")
    n_rounds: int = param("T, rounds", 10, flag="rounds")
    batch_size: int = param("rows per local gradient", 16)
    step_size: float = param("eta_a (eta_s = 1)", 0.05)
    alpha: float = param("nu1 of phi = nu1 ||x||_1", 1e-3)
    n_images: int | None = param("training images used (the first of a random permutation)", 400, flag="samples",
                                 parse=int)
    data_dir: str | None = param("folder with the CIFAR-10 python files (default: the digits, offline)", None,
                                 parse=str)
    seed: int = param("seed of the images drawn, the initial network and the minibatches", 0)


def mobilenet_images(dataset: str, data_dir=None, *, n_images: int | None = None, random_state: int = 0
                     ) -> tuple[torch.Tensor, torch.Tensor]:
    """Training images as float32 tensors of shape (n, 3, 32, 32) and their labels: ``"digits"`` (8 x 8, bilinearly
    upsampled, the grey level on 3 channels) or ``"cifar"`` (from ``data_dir``)."""
    from ..data import load_cifar10, load_digits

    if dataset == "digits":
        X, y = load_digits(images=True)
    elif dataset == "cifar":
        if data_dir is None:
            raise ValueError("fednmap-mobilenet on CIFAR-10 needs --data-dir with its files (digits runs offline).")
        X, y = load_cifar10(data_dir, kind="train", images=True)
    else:
        raise ValueError(f"dataset must be 'digits' or 'cifar', got {dataset!r}.")
    if n_images is not None:
        keep = np.random.default_rng(random_state).permutation(len(X))[:n_images]
        X, y = X[keep], y[keep]
    x = torch.as_tensor(np.ascontiguousarray(X), dtype=torch.float32)
    if x.shape[-1] < 32:
        x = F.interpolate(x, size=(32, 32), mode="bilinear", align_corners=False)
    return x.expand(-1, 3, -1, -1).contiguous() if x.shape[1] == 1 else x, torch.as_tensor(y, dtype=torch.int64)


def _label_sorted(inputs: torch.Tensor, targets: torch.Tensor, n_clients: int) -> TensorFederatedData:
    """n equal consecutive blocks of the label-sorted rows (the remainder of ``len(targets) / n`` rows left out)."""
    per = len(targets) // n_clients
    if per < 1:
        raise ValueError(f"{len(targets)} images cannot be split over {n_clients} clients.")
    order = torch.argsort(targets, stable=True)[:per * n_clients]
    return TensorFederatedData.from_pooled(inputs[order], targets[order], sizes=[per] * n_clients)


def fednmap_mobilenet_study(study: MobileNetConfig, inputs: torch.Tensor, targets: torch.Tensor, *,
                            methods=tuple(METHODS), progress: bool = False) -> pd.DataFrame:
    """Run Fig. 6: one row per (method, round) with Hoyer's sparsity and the training loss of x_t."""
    data = _label_sorted(inputs, targets, study.n_clients)
    random_state = study.seed
    model = seeded_model(lambda: MobileNetV3Small(int(targets.max()) + 1, norm="group").eval(), random_state)
    rows = []
    for method in methods:
        est = METHODS[method](model=model, mu=math.inf, clip=math.inf, n_rounds=study.n_rounds,
                              n_local_steps=study.n_local_steps, step_size=study.step_size, server_step_size=1.0,
                              alpha=study.alpha, batch_size=study.batch_size, random_state=random_state)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # convergence advice: a fixed budget of rounds
            est.fit(data)
        for t, x in enumerate(est.history_):
            rows.append(dict(method=method, round=t, hoyer=hoyer_sparsity(x), loss=_training_loss(model, x, data),
                             zeros=float(np.mean(np.asarray(x) == 0))))
        if progress:
            print(f"{method}: Hoyer {rows[-1]['hoyer']:.4f}, training loss {rows[-1]['loss']:.4f}", flush=True)
    return pd.DataFrame(rows)


def _training_loss(model, x: np.ndarray, data: TensorFederatedData) -> float:
    """f(x): the mean cross-entropy over every training image (chunks of 512)."""
    net = _with_parameters(model, x)
    total = 0.0
    with torch.no_grad():
        for start in range(0, len(data.targets), 512):
            out = net(data.inputs[start:start + 512])
            total += float(F.cross_entropy(out, data.targets[start:start + 512], reduction="sum"))
    return total / len(data.targets)


def plot_fednmap_mobilenet(df: pd.DataFrame, axes=None):
    """Fig. 6: Hoyer's sparsity and training loss against rounds, one line per method. Returns the figure."""
    from matplotlib.figure import Figure

    if axes is None:
        axes = Figure(figsize=(10, 3.5), layout="tight").subplots(1, 2)
    for method, run in df.groupby("method", sort=False):
        axes[0].plot(run["round"], run.hoyer, label=method)
        axes[1].plot(run["round"], run.loss, label=method)
    axes[0].set(xlabel="round t", ylabel="Hoyer's sparsity", title="(a) sparsity")
    axes[1].set(xlabel="round t", ylabel="training loss f(x_t)", title="(b) training loss")
    axes[0].legend(fontsize=7)
    return axes[0].figure


def _run(config: MobileNetConfig, stem, progress: bool) -> dict[str, pd.DataFrame]:
    config.set_threads()
    inputs, targets = mobilenet_images("digits" if config.data_dir is None else "cifar", config.data_dir,
                                       n_images=config.n_images, random_state=config.seed)
    return {"": fednmap_mobilenet_study(config, inputs, targets, progress=progress)}


STUDY = Study("fednmap-mobilenet", "FedNMap's Fig. 6: MobileNetV3-Small with l1 on label-sorted clients, Hoyer sparsity "
              "and training loss (digits offline, CIFAR-10 with --data-dir)", MobileNetConfig(), _run,
              lambda frames, config: {"final": Table(frames[""][frames[""]["round"] == frames[""]["round"].max()]
                                                     .set_index("method"), "after the last round")},
              lambda frames, tables, config: {"": plot_fednmap_mobilenet(frames[""])})
