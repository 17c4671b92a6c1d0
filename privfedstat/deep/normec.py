"""Fed-alpha-NormEC and its clipped DP-FedAvg comparator for networks (Shulgin et al. 2025, Section 6).

:class:`DeepFedAlphaNormEC` and :class:`DeepClippedFedAvg` subclass
:class:`~privfedstat.FedAlphaNormEC` and :class:`~privfedstat.ClippedFedAvg` through the network
mixin of :mod:`privfedstat.deep.estimators`: the server loop, the calibration (mu, or a target
(epsilon, delta) by the PLD), the participation, the client-level ledger and the accounting are
theirs; the clients are :class:`~privfedstat.deep.clients.TorchClients`, whose verbs
``normec_round`` and ``clipped_update`` answer as the GLM clients' do. What differs: the step sizes
gamma and eta are numbers (no GLM curvature bound), and the local steps may use minibatches
(``batch_size``; the paper's experiments use 32).
"""

from __future__ import annotations

import math

from torch import nn

from ..algorithms.fednormec import ClippedFedAvg, FedAlphaNormEC
from .estimators import PROGRESS_PARAM, _Network

__all__ = ["DeepFedAlphaNormEC", "DeepClippedFedAvg"]

_NETWORK = """
    Network parameters (besides those of the GLM estimator, whose ``family`` does not apply):

    model : torch.nn.Module
        The network (float32 or float64; its current weights are x^0); never changed by ``fit``.
    loss : {"cross_entropy", "nll"} or callable, default "cross_entropy"
        ``loss(outputs, targets)`` returning the mean over the batch.
    step_size, server_step_size : float
        gamma and eta, numbers (``"auto"`` is the GLM curvature bound and does not apply).
    batch_size : int or None, default None
        Rows per local gradient step (a fresh uniform sample each step); None: the full batch.
""" + PROGRESS_PARAM + """

    ``fit`` takes a :class:`~privfedstat.deep.data.TensorFederatedData`; ``coef_`` is the flat
    parameter vector and ``model_`` a copy of ``model`` holding it (see
    :mod:`privfedstat.deep.estimators`).
"""


class _NetworkUnitMessages(_Network):
    """The network mixin for the unit-message estimators: no per-sample clipping, numeric step sizes."""

    clip = math.inf  # the message is normalised (or its pseudo-gradient clipped), not the per-sample gradients

    def _validate_params(self, mu: float) -> None:
        if isinstance(self.server_step_size, str):
            raise ValueError("server_step_size must be a number for networks (the GLM curvature bound of 'auto' does "
                             "not apply).")
        super()._validate_params(mu)


class DeepFedAlphaNormEC(_NetworkUnitMessages, FedAlphaNormEC):
    __doc__ = FedAlphaNormEC.__doc__.split("\n")[0].replace("Fed-alpha-NormEC:", "Fed-alpha-NormEC for networks:") + """

    The algorithm, the decisions where the paper is open, the privacy and the calibration are
    those of :class:`~privfedstat.FedAlphaNormEC`; the clients run their local operator on the
    network (verb ``normec_round`` of :class:`~privfedstat.deep.clients.TorchClients`).
""" + _NETWORK

    method = "Fed-alpha-NormEC (network)"

    def __init__(self, *, model: nn.Module, loss="cross_entropy", n_rounds: int = 50, alpha: float = 0.01,
                 beta: float = 0.1, step_size: float = 0.1, server_step_size: float = 0.1, n_local_steps: int = 1,
                 local_solver: str = "gd", server_normalization: bool = False, batch_size: int | None = None,
                 mu: float | None = 2.0, epsilon: tuple[float, float] | None = None, sigma: str | None = None,
                 participation=None, weights="size", random_state=None, on_client_failure: str = "raise",
                 secure_mode: bool = False, progress: bool = True) -> None:
        self.model = model
        self.loss = loss
        self.n_rounds = n_rounds
        self.alpha = alpha
        self.beta = beta
        self.step_size = step_size
        self.server_step_size = server_step_size
        self.n_local_steps = n_local_steps
        self.local_solver = local_solver
        self.server_normalization = server_normalization
        self.batch_size = batch_size
        self.mu = mu
        self.epsilon = epsilon
        self.sigma = sigma
        self.participation = participation
        self.weights = weights
        self.random_state = random_state
        self.on_client_failure = on_client_failure
        self.secure_mode = secure_mode
        self.progress = progress


class DeepClippedFedAvg(_NetworkUnitMessages, ClippedFedAvg):
    __doc__ = """DP-FedAvg with clipping for networks, the comparator of Fed-alpha-NormEC (App. A.1).

    As :class:`~privfedstat.ClippedFedAvg` (the clients answer the verb ``clipped_update`` of
    :class:`~privfedstat.deep.clients.TorchClients`: full-batch local GD, update clipped to
    ``gamma beta``).
""" + _NETWORK.replace("""    batch_size : int or None, default None
        Rows per local gradient step (a fresh uniform sample each step); None: the full batch.
""", "")

    method = "DP-FedAvg (clipped, App. A.1, network)"

    def __init__(self, *, model: nn.Module, loss="cross_entropy", n_rounds: int = 50, beta: float = 0.1,
                 step_size: float = 0.1, server_step_size: float = 0.1, n_local_steps: int = 1,
                 mu: float | None = 2.0, epsilon: tuple[float, float] | None = None, sigma: str | None = None,
                 participation=None, weights="size", random_state=None, on_client_failure: str = "raise",
                 secure_mode: bool = False, progress: bool = True) -> None:
        self.model = model
        self.loss = loss
        self.n_rounds = n_rounds
        self.beta = beta
        self.step_size = step_size
        self.server_step_size = server_step_size
        self.n_local_steps = n_local_steps
        self.mu = mu
        self.epsilon = epsilon
        self.sigma = sigma
        self.participation = participation
        self.weights = weights
        self.random_state = random_state
        self.on_client_failure = on_client_failure
        self.secure_mode = secure_mode
        self.progress = progress
