"""HiFedProx for networks (Kabgani & Ahookhosh): the GLM estimator's rounds, run on torch clients.

:class:`DeepHiFedProx` subclasses :class:`~privfedstat.HiFedProx` through the network mixin of
:mod:`privfedstat.deep.estimators`: the server loop (cohorts, client-uniform average, minibatch
seeds per round, optional client-level DP and its ledger) is the GLM estimator's; the clients are
:class:`~privfedstat.deep.clients.TorchClients`, which answer ``hifedprox_round`` with its torch
implementation (:func:`hifedprox_round`, registered here for the verb table's entry): the local
steps with the same solver (:func:`~privfedstat.federation.power_prox.power_prox_descent`) and the
same minibatch streams as the numba clients, on the network's minibatch loss (one gradient
evaluation per local step, one forward pass per Armijo trial; all clients' at once). The paper's network is
:class:`~privfedstat.deep.models.FemnistCNN` (27,326 parameters).
"""

from __future__ import annotations

import math

import numpy as np
import torch
from torch import nn

from .._linalg import clip_rows
from ..algorithms.hifedprox import HiFedProx
from ..federation.clients import Reply
from ..federation.power_prox import client_batch_rng, minibatch_rows, power_prox_descent
from ..federation.verbs import implement
from ..kernels.glm_nb import CLIP_SAFETY
from .clients import TorchClients
from .estimators import PROGRESS_PARAM, _loss, _Network

__all__ = ["DeepHiFedProx", "hifedprox_round"]


class DeepHiFedProx(_Network, HiFedProx):
    __doc__ = f"""HiFedProx for networks: power-p proximal local objectives with Armijo minibatch steps.

    The algorithm, the decisions where the paper is open, the participation and the optional
    client-level privacy are those of :class:`~privfedstat.HiFedProx`; the clients take their
    local steps on the network's minibatch loss (verb ``hifedprox_round`` of
    :class:`~privfedstat.deep.clients.TorchClients`). The paper's study: ``model=FemnistCNN()``,
    ``mu=inf``, ``n_rounds=100``, ``participation=18`` of 60 writers, ``batch_size=16``,
    ``n_local_steps=3``, ``step_size=0.5``, ``prox_coef=0.03``, ``prox_radius=1`` and p in 2..8
    (:mod:`privfedstat.deep.hifedprox_study`).

    Parameters: those of :class:`~privfedstat.HiFedProx` (same names, meanings and defaults) except
    ``family`` and ``inference``, plus:

    model : torch.nn.Module
        The network (float32 or float64; its current weights are w^0); never changed by ``fit``.
        No default: its initial weights are the caller's (the study draws them once per seed and
        shares them across p), e.g. :class:`~privfedstat.deep.models.FemnistCNN`.
    loss : {"cross_entropy", "nll"} or callable, default "cross_entropy"
        f_i's per-batch mean loss, ``loss(outputs, targets)``.
{PROGRESS_PARAM}

    ``fit`` takes a :class:`~privfedstat.deep.data.TensorFederatedData`; ``coef_`` is the flat
    parameter vector and ``model_`` a copy of ``model`` holding it (see
    :mod:`privfedstat.deep.estimators`). The attributes are :class:`~privfedstat.HiFedProx`'s
    (``displacements_``, ``armijo_trials_``, ``line_search_failures_``, ...).
    """

    method = "HiFedProx (network)"
    clip = math.inf  # no per-sample clipping (the update is clipped)
    #: one step size per client, as HiFedProx's (the networks' mixin allows a single number only)
    _parameter_constraints = {"step_size": HiFedProx._parameter_constraints["step_size"]}

    def __init__(self, *, model: nn.Module, loss="cross_entropy", mu: float = 2.0, n_rounds: int = 100,
                 power: float = 5.0, prox_coef: float = 0.03, prox_radius: float = 1.0, n_local_steps=3,
                 step_size=0.5, batch_size: int | None = 16, armijo_c: float = 1e-4, backtrack_factor: float = 0.5,
                 max_backtracks: int = 12, update_clip: float | str = "auto", participation=None, random_state=None,
                 on_client_failure: str = "raise", secure_mode: bool = False, progress: bool = True) -> None:
        self.model = model
        self.loss = loss
        self.mu = mu
        self.n_rounds = n_rounds
        self.power = power
        self.prox_coef = prox_coef
        self.prox_radius = prox_radius
        self.n_local_steps = n_local_steps
        self.step_size = step_size
        self.batch_size = batch_size
        self.armijo_c = armijo_c
        self.backtrack_factor = backtrack_factor
        self.max_backtracks = max_backtracks
        self.update_clip = update_clip
        self.participation = participation
        self.random_state = random_state
        self.on_client_failure = on_client_failure
        self.secure_mode = secure_mode
        self.progress = progress

    def _make_clients(self, data, family, seed: np.random.SeedSequence, secure: bool) -> TorchClients:
        return TorchClients(data, self.model, _loss(self.loss), seed, secure=secure, on_round=self._round_done)


# ---------------------------------------------------------------------------- the clients' half
@implement("hifedprox_round", "torch")
def hifedprox_round(clients: TorchClients, w, *, prox, armijo, n_steps, step_size, batch_size: int | None, batch_seed,
                    update_clip: float, sensitivity, mu: float, stage: str, active=None) -> Reply:
    """One HiFedProx round on each asked client, as
    :func:`~privfedstat.algorithms.hifedprox.hifedprox_round`:
    ``n_steps[i]`` Armijo steps on ``f_B + phi(u - w)`` over minibatches from the client's stream
    for the round, ``Delta_i`` clipped to S plus noise (client-level), and with mu = inf the
    client's Armijo trial points and failed line searches after it.

    The asked clients' losses and gradients are evaluated together, vectorised across clients
    (:class:`~privfedstat.deep.stacked.StackedLoss`; each Armijo trial evaluates the loss of
    every client still stepping, the accepted ones' values unused)."""
    answered, failing = clients._begin(active)
    asked = np.flatnonzero(answered)
    w = np.asarray(w, dtype=np.float64)
    rngs = [client_batch_rng(batch_seed, clients.first_client + i) for i in asked]  # the federation index

    def batch_objective(step: int, who: np.ndarray):
        batches = [torch.from_numpy(int(clients._offsets[asked[k]])
                                    + minibatch_rows(rngs[k], int(clients.sizes[asked[k]]), batch_size))
                   for k in who]

        def loss(U: np.ndarray) -> np.ndarray:
            return clients._stacked.value(clients._stacked_params(U), batches).to(torch.float64).numpy()

        def loss_and_gradient(U: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
            f, g = clients._stacked.value_and_gradient(clients._stacked_params(U), batches)
            return f.to(torch.float64).numpy(), clients._flat_rows(g)
        return loss, loss_and_gradient

    u, trials, failures = power_prox_descent(w, np.asarray(n_steps)[asked],
                                             np.asarray(step_size, dtype=np.float64)[asked], prox, armijo,
                                             batch_objective)
    delta = clip_rows(u - w, update_clip * CLIP_SAFETY)
    noisy, rec = clients._privatize(delta, asked, sensitivity, mu, stage, "aggregated", unit="client")
    values = clients._scatter(noisy, asked)
    if math.isinf(mu):
        values = np.hstack([values, clients._scatter(np.column_stack([trials, failures]).astype(np.float64),
                                                     asked)])
    return clients._reply(values, [rec], answered, failing)
