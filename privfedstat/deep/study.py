"""What the torch studies share: the torch-threads setting, the image data sets and seeded initial networks."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from ..data import load_cifar10, load_digits, load_mnist
from ..simulations.study import param

__all__ = ["TorchConfig", "seeded_model", "load_cnn_data"]


@dataclass(frozen=True, kw_only=True)
class TorchConfig:
    """The setting every torch study has: how many threads torch uses."""

    threads: int | None = param("torch threads (default: torch's)", None, parse=int)

    def set_threads(self) -> None:
        """Apply ``threads`` to torch (a process-wide setting)."""
        if self.threads is not None:
            torch.set_num_threads(self.threads)


def seeded_model(build: Callable[[], nn.Module], seed: int) -> nn.Module:
    """``build()`` with its initial weights drawn from ``seed`` (torch's global generator is left as it was)."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return build()


def load_cnn_data(dataset: str, data_dir=None, *, random_state: int = 0):
    """(train, test) image arrays for ``"mnist"`` / ``"cifar"`` (standard splits, from ``data_dir``) or ``"digits"``
    (offline; 360 images drawn with ``random_state`` held out as the test set)."""
    if dataset == "digits":
        X, y = load_digits(images=True)
        test = np.random.default_rng(random_state).permutation(len(X))[:360]
        held = np.zeros(len(X), dtype=bool)
        held[test] = True
        return (X[~held], y[~held]), (X[held], y[held])
    loaders = {"mnist": load_mnist, "cifar": load_cifar10}
    if dataset not in loaders:
        raise ValueError(f"dataset must be one of digits, {', '.join(loaders)}; got {dataset!r}.")
    if data_dir is None:
        raise ValueError(f"the {dataset} images need --data-dir with their files (digits run offline).")
    load = loaders[dataset]
    return load(data_dir, kind="train", images=True), load(data_dir, kind="test", images=True)
