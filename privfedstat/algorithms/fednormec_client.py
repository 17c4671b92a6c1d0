"""Fed-alpha-NormEC's client half: the verb ``normec_round``, registered in the verb table.

Next to :mod:`privfedstat.algorithms.fednormec` (the server loop), which imports it; a module of
its own only to keep each file short.
"""

from __future__ import annotations

import math

import numpy as np

from .._linalg import smoothed_normalize
from ..federation import clients as federation_clients
from ..federation.clients import InProcessClients, Reply
from ..federation.oracle import make_oracle
from ..federation.verbs import Verb, parameters, register

__all__ = ["normec_round"]


def normec_round(clients: InProcessClients, x, *, alpha: float, beta: float, step_size: float, n_steps: int,
                 incremental: bool, sensitivity, mu: float, stage: str, active=None) -> Reply:
    """One round of Fed-alpha-NormEC (Shulgin et al. 2025, Algorithm 1) on every live client; ``active`` ones send.

    Every live client runs its local operator from the broadcast ``x`` (``T_i``: ``n_steps`` (T)
    full-batch gradient steps of size ``gamma / T``, or with ``incremental`` one pass of
    per-sample steps of size ``gamma / n_i`` over its rows in their fixed order), forms
    ``u_i = (x - T_i(x)) / gamma`` (computed as the mean of the local gradients, which it equals,
    without the cancellation of the difference), ``Delta_i = Norm_alpha(u_i - v_i)``
    (:func:`~privfedstat._linalg.smoothed_normalize`) and updates its error memory
    ``v_i <- v_i + beta Delta_i`` (v_i = 0 at the start; it never leaves the client). Only the
    ``active`` clients (the server's participants; None: all) send ``Delta_i`` plus noise, a
    client-level release: the message has norm below 1 for any data and any v_i (a non-finite
    ``u_i - v_i``, from diverging local steps, gives ``Delta_i = 0``), so replacing the client's
    whole dataset moves it by less than 2, the server's ``sensitivity``.
    """
    computing, failing = clients._begin(None)
    o = clients._oracle
    memory = clients._state.get("normec_round")
    if memory is None:
        memory = np.zeros((o.n_clients, o.n_params))
    diff = _local_gradient_mean(clients, x, step_size, n_steps, incremental) - memory
    diff[~np.all(np.isfinite(diff), axis=1)] = 0.0  # diverging local steps: their clients send 0
    delta = smoothed_normalize(diff, alpha)
    clients._state["normec_round"] = np.where(computing[:, None], memory + beta * delta, memory)
    noisy, rec = federation_clients.privatize(delta, clients._noise, sensitivity, mu, stage, "aggregated",
                                              unit="client")
    sent = computing if active is None else computing & np.asarray(active, dtype=bool)
    return clients._reply(noisy, [rec], sent, failing)


def _local_gradient_mean(clients: InProcessClients, x, step_size: float, n_steps: int, incremental: bool) -> np.ndarray:
    """``(x - T_i(x)) / gamma`` for every client, the mean of the (unclipped) gradients along its local path (the
    oracles on the clients' j-th rows of the incremental pass are kept in ``clients._state``, rebuilt after a
    rescale)."""
    o = clients._oracle
    local = np.array(np.broadcast_to(x, (o.n_clients, o.n_params)), dtype=np.float64)
    total = np.zeros_like(local)
    if not incremental:
        for _ in range(n_steps):
            g = o.clipped_gradients(local, math.inf)
            total += g
            local = local - (step_size / n_steps) * g
        return total / n_steps
    row_oracles = clients._state.get("normec_rows")
    if row_oracles is None or row_oracles[0] is not o:  # built once per fit (and after rescale)
        d, sizes = o.data, o.sizes
        layers = []
        for j in range(int(sizes.max())):
            who = np.flatnonzero(sizes > j)
            layers.append((who, make_oracle(d.take(d.offsets[who] + j, np.ones(who.size, dtype=np.int64)), o.family)))
        row_oracles = clients._state["normec_rows"] = (o, layers)
    steps = (step_size / o.sizes)[:, None]
    for who, rows in row_oracles[1]:  # step j: every client with more than j rows, on its j-th row
        g = rows.clipped_gradients(local[who], math.inf)
        total[who] += g
        local[who] -= steps[who] * g
    return total / o.sizes[:, None]


register(Verb("normec_round", shape=parameters, per_client=("sensitivity", "active"), release=("aggregated", "client")),
         in_process=normec_round)
