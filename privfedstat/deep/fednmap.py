"""FedNMap and its composite baselines for networks: sparse (l1 / elastic-net regularised) federated training.

The torch implementations of the verbs ``composite_round`` (FedNMap and Zhang et al. 2024a) and
``scaffold_round`` (SCAFFOLD, hence FedCanon) are registered here for the verb table's entries, so
:class:`~privfedstat.deep.clients.TorchClients` answer them with the arguments and the message
semantics of the GLM clients' (:func:`~privfedstat.algorithms.fednmap.composite_round`,
:func:`~privfedstat.algorithms.scaffold.scaffold_round`): Q local steps on noisy per-sample-clipped
gradients of the network's mean loss, corrections kept on the client, one vector sent. :class:`DeepFedNMap`,
:class:`DeepZhang` and :class:`DeepFedCanon` subclass :class:`~privfedstat.FedNMap`,
:class:`~privfedstat.ZhangComposite` and :class:`~privfedstat.FedCanon` through the network mixin
(:mod:`privfedstat.deep.estimators`): the server loops, the calibration (``mu / sqrt(R Q)`` per local
gradient, sensitivity ``2 B / n_i``), the ledger and the failure policy are theirs.

What differs from the GLM estimators: phi penalises **every** trainable parameter (the paper's l1 on the
network's weights; no ``unpenalized``), the steps are numbers, and the local gradients may be taken on
minibatches (``batch_size``: a fresh uniform sample of ``b_i`` rows each step, noise then calibrated to
``2 B / b_i``, the server's stated sensitivity times ``n_i / b_i``, as
:meth:`TorchClients.local_descent <privfedstat.deep.clients.TorchClients.local_descent>` does; no
amplification by sampling is claimed).
"""

from __future__ import annotations

import numpy as np
from torch import nn

from .._validation import iterate_error
from ..algorithms.fednmap import FedCanon, FedNMap, ZhangComposite, _store
from ..federation.clients import Reply
from ..federation.verbs import implement
from .clients import TorchClients
from .estimators import PROGRESS_PARAM, _Network

__all__ = ["DeepFedNMap", "DeepZhang", "DeepFedCanon", "composite_round", "scaffold_round"]


class _NetworkComposite(_Network):
    """The network mixin for the composite estimators: phi on every trainable parameter."""

    def _mask(self, n_features: int, family) -> np.ndarray:
        return np.ones(sum(p.numel() for p in self.model.parameters() if p.requires_grad), dtype=bool)


_NETWORK = """
    Network parameters (the GLM estimator's ``family``, ``scaling`` and ``unpenalized`` do not apply):

    model : torch.nn.Module
        The network (float32 or float64; its current weights are x_0); never changed by ``fit``.
        No BatchNorm or Dropout in training mode (see :func:`~privfedstat.deep.per_sample.check_model`).
    loss : {"cross_entropy", "nll"} or callable, default "cross_entropy"
        ``loss(outputs, targets)`` returning the mean over the batch.
    step_size, server_step_size : float
        eta_a and eta_s (numbers: the GLM curvature bound of ``"auto"`` does not apply).
    clip : float or AutoClip
        B (a number, or an AutoClip without pilot rounds).
    alpha, l1_ratio, penalty
        phi on every trainable parameter.
    batch_size : int or None, default None
        Rows per local gradient (a fresh uniform sample each step); None: the full batch.
""" + PROGRESS_PARAM + """

    ``fit`` takes a :class:`~privfedstat.deep.data.TensorFederatedData`; ``coef_`` is the flat
    parameter vector and ``model_`` a copy of ``model`` holding it.
"""


class DeepFedNMap(_NetworkComposite, FedNMap):
    __doc__ = FedNMap.__doc__.split("\n")[0].replace("on the GLM backend", "for networks") + """

    The algorithm, the privacy argument and the attributes are :class:`~privfedstat.FedNMap`'s; the
    clients run the local steps on the network (verb ``composite_round`` of
    :class:`~privfedstat.deep.clients.TorchClients`).
""" + _NETWORK

    method = "FedNMap (network)"

    def __init__(self, *, model: nn.Module, loss="cross_entropy", mu: float = 2.0, n_rounds: int = 10,
                 n_local_steps: int = 10, step_size: float = 0.01, server_step_size: float = 1.0,
                 gamma: float | str = "auto", penalty: str = "l1", alpha: float = 1e-4, l1_ratio: float | None = None,
                 clip=1.0, batch_size: int | None = None, weights="size", random_state=None,
                 on_client_failure: str = "raise", secure_mode: bool = False, progress: bool = True) -> None:
        _store(self, locals())


class DeepZhang(_NetworkComposite, ZhangComposite):
    __doc__ = """The composite method of Zhang, Hu & Johansson (2024a) for networks, FedNMap's first baseline.

    As :class:`~privfedstat.ZhangComposite` (same verb ``composite_round``, no normal-map term,
    local steps from x_t with a growing local prox parameter).
""" + _NETWORK

    method = "Zhang (2024a) (network)"

    def __init__(self, *, model: nn.Module, loss="cross_entropy", mu: float = 2.0, n_rounds: int = 10,
                 n_local_steps: int = 10, step_size: float = 0.01, server_step_size: float = 1.0,
                 penalty: str = "l1", alpha: float = 1e-4, l1_ratio: float | None = None, clip=1.0,
                 batch_size: int | None = None, weights="size", random_state=None,
                 on_client_failure: str = "raise", secure_mode: bool = False, progress: bool = True) -> None:
        _store(self, locals())


class DeepFedCanon(_NetworkComposite, FedCanon):
    __doc__ = """FedCanon for networks: SCAFFOLD with one proximal server step, FedNMap's second baseline.

    As :class:`~privfedstat.FedCanon` (**[I]** reconstructed; verb ``scaffold_round`` of
    :class:`~privfedstat.deep.clients.TorchClients`; ``n_local_steps`` K, ``step_size`` eta_l, ``server_step_size`` eta_g).
""" + _NETWORK

    method = "FedCanon (network)"

    __init__ = DeepZhang.__init__  # the same parameters


# ---------------------------------------------------------------------------- the clients' half
def _local_gradients(clients: TorchClients, points: np.ndarray, asked: np.ndarray, clip: float) -> np.ndarray:
    """Row k: client ``asked[k]``'s mean of per-sample gradients clipped to B at ``points[k]`` (full batch,
    or a fresh minibatch with ``batch_size``)."""
    return clients._stack([clients._flat(clients._gradient(clients._params(t), *clients._rows(i, batch=True), clip))
                           for t, i in zip(points, asked)], clients.n_params)


def _step_sensitivity(clients: TorchClients, sensitivity) -> np.ndarray:
    """The server's ``2 B / n_i`` for a full-batch gradient, times ``n_i / b_i`` for minibatches of ``b_i`` rows."""
    return np.broadcast_to(np.asarray(sensitivity, dtype=np.float64), (clients.n_clients,)) * clients.sizes / \
        clients._batch_sizes


@implement("composite_round", "torch")
def composite_round(clients: TorchClients, z, *, shift, prox_steps, penalty, ybar, clip: float, step_size: float,
                    sensitivity, mu: float, stage: str) -> Reply:
    """One round of FedNMap or of Zhang et al. (2024a) on every live client: send ``y_i``.

    As :func:`~privfedstat.algorithms.fednmap.composite_round`:
    ``c_i <- c_i - y_i + ybar`` (``ybar`` None: the first round), then Q = ``len(prox_steps)``
    local steps from ``z^0 = z``: ``x^l = prox_{tau_l phi}(z^l)``,
    ``z^{l+1} = z^l - eta_a (g~_i(x^l) + shift + c_i)`` with ``g~_i`` the clipped mean gradient
    plus noise (a local release); the upload is ``y_i = mean_l g~_i(x^l) + shift + c_i``.
    """
    answered, failing = clients._begin(None)
    asked = np.flatnonzero(answered)
    m, p = clients.n_clients, clients.n_params
    c, y_last = clients._state.get("composite_round") or (np.zeros((m, p)), np.zeros((m, p)))
    if ybar is not None:
        c = np.where(answered[:, None], c - y_last + ybar, c)
    sens = _step_sensitivity(clients, sensitivity)
    local = np.tile(np.asarray(z, dtype=np.float64), (asked.size, 1))
    direction = shift + c[asked]
    total = np.zeros((asked.size, p))
    records = []
    for tau in prox_steps:
        g, rec = clients._privatize(_local_gradients(clients, penalty.prox(local, tau), asked, clip), asked, sens, mu,
                                    stage, "local")
        records.append(rec)
        total += g
        local = local - step_size * (g + direction)
        if (error := iterate_error(local, "FedNMap local steps", step_size)) is not None:
            return clients._reply(clients._scatter(local, asked), records, answered, failing, error=error)
    upload = clients._scatter(total / len(prox_steps) + direction, asked)
    clients._state["composite_round"] = (c, np.where(answered[:, None], upload, y_last))
    return clients._reply(upload, records, answered, failing)


@implement("scaffold_round", "torch")
def scaffold_round(clients: TorchClients, x, c, *, clip: float, step_size: float, n_steps: int, sensitivity,
                   mu: float, stage: str) -> Reply:
    """One SCAFFOLD round on every live client (as :func:`~privfedstat.algorithms.scaffold.scaffold_round`): K
    noisy-gradient local steps with correction ``c - c_i``, send ``(y - x, dc_i)``, keep
    ``c_i <- c_i - c + (x - y) / (K eta)``."""
    answered, failing = clients._begin(None)
    asked = np.flatnonzero(answered)
    control = clients._state.get("scaffold_round")
    if control is None:
        control = clients._state["scaffold_round"] = np.zeros((clients.n_clients, clients.n_params))
    c_local = control[asked]
    sens = _step_sensitivity(clients, sensitivity)
    y = np.tile(np.asarray(x, dtype=np.float64), (asked.size, 1))
    correction = c - c_local
    records = []
    for _ in range(n_steps):
        g, rec = clients._privatize(_local_gradients(clients, y, asked, clip), asked, sens, mu, stage, "local")
        records.append(rec)
        y = y - step_size * (g + correction)
        if (error := iterate_error(y, "SCAFFOLD local steps", step_size)) is not None:
            return clients._reply(clients._scatter(y, asked), records, answered, failing, error=error)
    c_new = c_local - c + (x - y) / (n_steps * step_size)
    control[asked] = c_new
    upload = clients._scatter(np.hstack([y - x, c_new - c_local]), asked)
    return clients._reply(upload, records, answered, failing)
