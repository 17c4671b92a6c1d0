"""Fed-alpha-NormEC and its clipped DP-FedAvg comparator for networks (Shulgin et al. 2025, Section 6).

:class:`DeepFedAlphaNormEC` and :class:`DeepClippedFedAvg` subclass
:class:`~privfedstat.FedAlphaNormEC` and :class:`~privfedstat.ClippedFedAvg` through the network
mixin of :mod:`privfedstat.deep.estimators`: the server loop, the calibration (mu, or a target
(epsilon, delta) by the PLD), the participation, the client-level ledger and the accounting are
theirs; the clients are :class:`~privfedstat.deep.clients.TorchClients`, which answer ``clipped_update``
and ``normec_round`` (its torch implementation, :func:`normec_round`, registered here for the verb
table's entry) as the GLM clients do. What differs: the step sizes
gamma and eta are numbers (no GLM curvature bound), and the local steps may use minibatches
(``batch_size``; the paper's experiments use 32).
"""

from __future__ import annotations

import math

import numpy as np
import torch
from torch import nn

from .._linalg import smoothed_normalize
from ..algorithms.fednormec import ClippedFedAvg, FedAlphaNormEC
from ..federation.clients import Reply
from ..federation.verbs import implement
from .clients import TorchClients
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


# ---------------------------------------------------------------------------- the clients' half
@implement("normec_round", "torch")
def normec_round(clients: TorchClients, x, *, alpha: float, beta: float, step_size: float, n_steps: int,
                 incremental: bool, sensitivity, mu: float, stage: str, active=None) -> Reply:
    """One round of Fed-alpha-NormEC on every live client; ``active`` ones send (as
    :func:`~privfedstat.algorithms.fednormec_client.normec_round`).

    Every live client runs its local operator T_i from ``x`` (``n_steps`` (T) gradient steps of
    size ``gamma / T`` on its mean loss, over all its rows or over a fresh minibatch each step
    with ``batch_size``; or with ``incremental`` one pass of per-sample steps of size
    ``gamma / n_i`` over its rows in their order), forms ``u_i = (x - T_i(x)) / gamma`` as the
    mean of its local gradients, ``Delta_i = Norm_alpha(u_i - v_i)`` (0 when not finite) and
    ``v_i <- v_i + beta Delta_i`` (v_i = 0 at the start; it stays on the client). The ``active``
    clients send ``Delta_i`` plus noise: norm below 1, client-level sensitivity 2 (``sensitivity``).
    """
    computing, failing = clients._begin(None)
    asked = np.flatnonzero(computing)
    memory = clients._state.get("normec_round")
    if memory is None:
        memory = clients._state["normec_round"] = np.zeros((clients.n_clients, clients.n_params))
    # every client live (the usual case): the memory itself, not a gathered copy
    rows = slice(None) if asked.size == clients.n_clients else asked
    diff = _local_gradient_means(clients, x, asked, step_size, n_steps, incremental)
    with np.errstate(all="ignore"):  # diverging local steps: their clients send 0 (below)
        diff -= memory[rows]
    diff[~np.all(np.isfinite(diff), axis=1)] = 0.0
    delta = smoothed_normalize(diff, alpha)
    memory[rows] += beta * delta
    noisy, rec = clients._privatize(delta, asked, sensitivity, mu, stage, "aggregated", unit="client")
    sent = computing if active is None else computing & np.asarray(active, dtype=bool)
    return clients._reply(clients._scatter(noisy, asked), [rec], sent, failing)


def _local_gradient_means(clients: TorchClients, x, asked: np.ndarray, step_size: float, n_steps: int,
                          incremental: bool) -> np.ndarray:
    """``(x - T_i(x)) / gamma`` for each of ``asked`` (rows, shape (k, P)): the mean of the (unclipped) gradients
    along its local path; all their steps at once (:class:`~privfedstat.deep.stacked.StackedLoss`).

    Incremental: step j takes client i's row j (the clients with more than j rows), size ``gamma / n_i``;
    otherwise ``n_steps`` steps of size ``gamma / T`` on every client's rows or a fresh minibatch of them.
    """
    params = clients._broadcast(x, asked.size)  # views of x until the first step moves them
    if incremental:
        total = np.zeros((asked.size, clients.n_params))
        sizes, lo = clients.sizes[asked], clients._offsets[asked]
        eta = torch.from_numpy(step_size / sizes).to(clients._dtype)
        n_total = int(sizes.max(initial=0))
        steps = ((np.flatnonzero(sizes > j), lambda who, j=j: [torch.tensor([lo[k] + j]) for k in who])
                 for j in range(n_total))
        count = sizes
    else:
        total = None  # the first step's gradients (every client steps)
        eta = torch.full((asked.size,), step_size / n_steps, dtype=torch.float64).to(clients._dtype)
        n_total = n_steps
        steps = ((np.arange(asked.size), lambda who: [clients._index(asked[k], batch=True) for k in who])
                 for _ in range(n_steps))
        count = np.full(asked.size, n_steps)
    for step, (who, batches) in enumerate(steps):
        everyone = who.size == asked.size  # then a view (no gather, no scatter)
        rows, index = (slice(None), slice(None)) if everyone else (who, torch.from_numpy(who))
        _, g = clients._stacked.value_and_gradient({n: p[index] for n, p in params.items()}, batches(who))
        flat = clients._flat_rows(g)
        if total is None:
            total = flat
        else:
            total[rows] += flat
        if step + 1 == n_total:  # the last step's iterate is not needed, only its gradient
            break
        if step == 0:
            params = {n: p.clone() for n, p in params.items()}  # stepped in place from here on
        for n, p in params.items():
            p[index] -= eta[index].view(-1, *(1,) * (p.dim() - 1)) * g[n]
    total /= count[:, None]
    return total
