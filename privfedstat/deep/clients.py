"""Torch clients on the client/server seam: the verbs the network estimators send, answered for an ``nn.Module``.

:class:`TorchClients` is the torch counterpart of
:class:`~privfedstat.federation.InProcessClients`: it owns the clients' data
(:class:`~privfedstat.deep.data.TensorFederatedData`), a working copy of the model, one noise
stream and one minibatch stream per client, and answers the shared verbs ``gradients``,
``local_descent``, ``clipped_update`` and ``count_at_most`` (gradient norms) with the same
arguments and the same :class:`~privfedstat.federation.Reply`, and every verb of the table
(:mod:`privfedstat.federation.verbs`) for which a torch implementation is registered: the network
algorithms register theirs next to their estimators (``normec_round`` in
:mod:`~privfedstat.deep.normec`, ``composite_round`` and ``scaffold_round`` in
:mod:`~privfedstat.deep.fednmap`, ``hifedprox_round`` in :mod:`~privfedstat.deep.hifedprox`,
``head_newton_steps`` in :mod:`~privfedstat.deep.newton`). Every reply is privatized by
:func:`privfedstat.federation.clients.privatize` and carries its release records, so the
Channel, the ledger, the failure policy (``on_client_failure``, fault injection through
:class:`~privfedstat.deep.data.FailingTensorData`) and the server loops are the GLM estimators' own.

The server's parameter vector theta is the model's trainable parameters flattened in
``model.named_parameters()`` order (float64 on the server; the clients evaluate the model in its
own dtype). Only the clients asked in a round compute anything, and each draws its noise from its
own stream only when it answers (so a client's draws depend on its own stream and on the requests
it answered, not on the others': the streams do not run in lockstep as ``ClientNoise``'s do).

The client-level verbs (``clipped_update``, ``normec_round``, ``hifedprox_round``) take every asked client's local
steps at once, one ``vmap`` over the clients' stacked parameters
(:class:`~privfedstat.deep.stacked.StackedLoss`), where the model allows it; each client still
draws its minibatches and its noise from its own streams, so the numbers are those of one client
after the other, to float rounding.
"""

from __future__ import annotations

import math
import types
from collections.abc import Callable
from dataclasses import replace

import numpy as np
import torch
from torch import nn

from .._rng import child_seed
from .._validation import iterate_error
from ..federation import clients as federation_clients
from ..federation.clients import InProcessClients, Reply, _Status
from ..federation.verbs import implementation
from ..privacy.ledger import Release
from ..privacy.mechanisms import SecureClientNoise
from .data import TensorFederatedData
from .per_sample import PerSampleGradients, clip_factors, sample_norms
from .stacked import StackedLoss

__all__ = ["TorchClients", "TorchNoise"]


def seeded_generator(seed: np.random.SeedSequence) -> torch.Generator:
    """A CPU ``torch.Generator`` seeded with 64 bits of ``seed``'s state (same SeedSequence, same stream)."""
    return torch.Generator().manual_seed(int(seed.generate_state(1, np.uint64)[0]))


class TorchNoise:
    """Standard normal draws from one ``torch.Generator`` per client (the interface of
    :class:`~privfedstat.privacy.mechanisms.ClientNoise`: ``n_clients`` and ``standard_normal``).

    Parameters
    ----------
    generators : list of torch.Generator
        One per client, e.g. from :meth:`from_seed`.
    """

    def __init__(self, generators: list[torch.Generator]) -> None:
        self._gens = list(generators)

    @classmethod
    def from_seed(cls, seed: np.random.SeedSequence, n_clients: int) -> TorchNoise:
        """One generator per client, each seeded from a child of ``seed`` (``seed.spawn(n_clients)``)."""
        return cls([seeded_generator(s) for s in seed.spawn(n_clients)])

    @property
    def n_clients(self) -> int:
        return len(self._gens)

    def standard_normal(self, shape: tuple[int, ...]) -> np.ndarray:
        """An array of shape ``(n_clients, *shape)`` (float64); row i from client i's generator."""
        out = np.empty((self.n_clients, *shape))
        for row, g in zip(out, self._gens):
            torch.randn(tuple(shape), generator=g, dtype=torch.float64, out=torch.from_numpy(row))
        return out

    def subset(self, clients: np.ndarray) -> TorchNoise:
        """The streams of ``clients`` only (the same generators: draws advance them)."""
        return TorchNoise([self._gens[i] for i in clients])


class TorchClients:
    """All clients of a network in this process: their data, noise and minibatch streams, and the verbs they answer.

    Parameters
    ----------
    data : TensorFederatedData
        The clients' rows; a :class:`~privfedstat.deep.data.FailingTensorData` injects failures.
    model : torch.nn.Module
        The network; its current parameters are theta^(0) (public: the server's initial model).
        Evaluated with ``functional_call`` on the parameters of each request: never changed.
        Float32 or float64.
    loss_fn : callable
        ``loss_fn(outputs, targets)`` -> the *mean* loss of a batch (``rho``; e.g.
        ``torch.nn.functional.cross_entropy``), so that the gradient of a batch's loss is the mean
        of its per-sample gradients.
    seed : numpy.random.SeedSequence
        The fit's noise seed: the noise streams (:class:`TorchNoise`) and the minibatch streams are
        spawned from it.
    batch_size : int or None, default None
        Rows per local step in ``local_descent`` (a fresh uniform sample without replacement of
        ``min(batch_size, n_i)`` rows each step, from the client's own ``torch.Generator``); None:
        full batch, as in the paper.
    first_client : int, default 0
        Federation index of the first client held here: client ``first_client + k`` gets the
        children ``first_client + k`` of the noise and minibatch seeds (and of HiFedProx's
        per-round minibatch seeds), the streams it has when all clients are held in one process (a
        Flower node holds one client, its partition id).
    secure : bool, default False
        Draw the noise from :class:`~privfedstat.privacy.mechanisms.SecureClientNoise` (the
        estimators' ``secure_mode``: the OS's CSPRNG, four normals summed) instead of the seeded
        :class:`TorchNoise` streams.
    on_round : callable or None, default None
        Called with no argument after each request the clients answer (one round of the server's
        loop, the clip search's included): the network estimators' progress bar counts them.
    vectorise : bool, default True
        Run the client-level verbs' local steps (``clipped_update``, ``normec_round``, HiFedProx's
        ``hifedprox_round``) for all asked clients at once, ``vmap`` over stacked client parameters
        (:class:`~privfedstat.deep.stacked.StackedLoss`), where the model allows it; False: one
        client after the other. Same numbers to float rounding, same random streams.

    Attributes (public: what the server may know)
    ----------------------------------------------
    n_clients, sizes, n_features, n_params, family (None: not a GLM), has_offset (False)
    """

    def __init__(self, data: TensorFederatedData, model: nn.Module, loss_fn: Callable, seed: np.random.SeedSequence, *,
                 batch_size: int | None = None, first_client: int = 0, secure: bool = False,
                 on_round: Callable[[], object] | None = None, vectorise: bool = True) -> None:
        if not isinstance(data, TensorFederatedData):
            raise TypeError(f"TorchClients need a TensorFederatedData, got {type(data).__name__}.")
        self._psg = PerSampleGradients(model, loss_fn)
        self._dtype = next(p.dtype for p in model.parameters() if p.requires_grad)
        self._inputs = data.inputs.to(self._dtype)
        self._targets = data.targets
        self._offsets = data.offsets
        noise_seed, batch_seed = seed.spawn(2)
        self.first_client = int(first_client)
        clients = range(first_client, first_client + data.n_clients)  # federation indices (a Flower node: its own)
        self._noise = (SecureClientNoise(data.n_clients) if secure
                       else TorchNoise([seeded_generator(child_seed(noise_seed, i)) for i in clients]))
        self._batches = [seeded_generator(child_seed(batch_seed, i)) for i in clients]
        self._status = _Status(dict(getattr(data, "failures", None) or {}), 0, np.zeros(data.n_clients, dtype=bool))
        self._on_round = on_round
        self._norm_cache: tuple[bytes, list[np.ndarray]] | None = None
        self._state: dict[str, object] = {}  # the registered verbs' client state, by verb (kept, never sent)
        self._numels = [int(np.prod(s, dtype=np.int64)) for s in self._psg.shapes]
        trainable = dict(model.named_parameters())
        self._stacked = StackedLoss(model, loss_fn, self._psg.names, self._inputs, self._targets, vectorise=vectorise)
        self._theta0 = torch.cat([trainable[n].detach().reshape(-1) for n in self._psg.names]).to(torch.float64).numpy()
        self.n_clients = data.n_clients
        self.sizes = data.sizes.copy()
        self._batch_sizes = self.sizes if batch_size is None else np.minimum(self.sizes, int(batch_size))
        self._all_rows = [torch.arange(lo, hi) for lo, hi in zip(self._offsets[:-1], self._offsets[1:])]
        self.n_features = data.n_features
        self.n_params = self._psg.n_params
        self.family = None
        self.has_offset = False

    # the failure bookkeeping and the assembly of a reply are InProcessClients' own (shared, not copied)
    _begin = InProcessClients._begin

    def __getattr__(self, name: str):
        """A registered verb (:mod:`~privfedstat.federation.verbs`) answered by its torch implementation."""
        answer = None if name.startswith("_") else implementation(name, "torch")
        if answer is None:
            raise AttributeError(f"{type(self).__name__} has no attribute {name!r} and no torch implementation of a "
                                 f"verb {name!r} is registered (an algorithm registers its verb when its module is "
                                 "imported: privfedstat.deep imports them all).")
        return types.MethodType(answer, self)

    def _reply(self, values: np.ndarray, releases: list[Release], answered: np.ndarray, failing: np.ndarray,
               leak: str | None = None, error: Exception | None = None) -> Reply:
        """The reply of one request (every verb ends here), after telling ``on_round`` that a round is done; ``error``:
        the client's failure (a diverging local descent), raised by the server after it books ``releases``."""
        if self._on_round is not None:
            self._on_round()
        return InProcessClients._reply(self, values, releases, answered, failing, leak, error)

    def initial_parameters(self) -> np.ndarray:
        """theta^(0): the model's initial trainable parameters, flat, float64 (public)."""
        return self._theta0.copy()

    # ------------------------------------------------------------------ plumbing
    def _params(self, theta: np.ndarray) -> dict[str, torch.Tensor]:
        """theta (flat, float64) as the model's parameters, in the model's dtype."""
        flat = torch.from_numpy(np.ascontiguousarray(theta, dtype=np.float64)).to(self._dtype)
        return {n: t.view(s) for n, t, s in zip(self._psg.names, torch.split(flat, self._numels), self._psg.shapes)}

    def _broadcast(self, theta: np.ndarray, k: int) -> dict[str, torch.Tensor]:
        """theta (flat, float64) as k clients' stacked parameters, shape (k, *shape) each (views: not to be written)."""
        return {n: p.expand(k, *p.shape) for n, p in self._params(theta).items()}

    def _stacked_params(self, theta: np.ndarray) -> dict[str, torch.Tensor]:
        """The rows of theta (k, P; float64) as stacked parameters: shape (k, *shape) each, in the model's dtype."""
        flat = torch.from_numpy(np.ascontiguousarray(theta, dtype=np.float64)).to(self._dtype)
        return {n: t.reshape(-1, *s) for n, t, s in zip(self._psg.names, torch.split(flat, self._numels, dim=1),
                                                        self._psg.shapes)}

    def _flat_rows(self, params: dict[str, torch.Tensor]) -> np.ndarray:
        """Stacked parameters (or gradients) as rows of flat vectors, float64, shape (k, P)."""
        out = torch.empty((next(iter(params.values())).shape[0], self.n_params), dtype=torch.float64)
        for part, n in zip(torch.split(out, self._numels, dim=1), self._psg.names):
            part.copy_(params[n].reshape(part.shape))
        return out.numpy()

    @staticmethod
    def _flat(tensors: list[torch.Tensor]) -> np.ndarray:
        return torch.cat([t.reshape(-1) for t in tensors]).to(torch.float64).numpy()

    def _index(self, i: int, batch: bool = False) -> torch.Tensor:
        """Indices of client i's rows, or (``batch``) of a fresh minibatch of ``min(batch_size, n_i)`` of them drawn
        from its own stream."""
        lo, n = int(self._offsets[i]), int(self.sizes[i])
        if batch and self._batch_sizes[i] < n:
            return lo + torch.randperm(n, generator=self._batches[i])[: int(self._batch_sizes[i])]
        return self._all_rows[i]

    def _rows(self, i: int, batch: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
        """Client i's rows, or (``batch``) a fresh minibatch of them (:meth:`_index`)."""
        rows = self._index(i, batch)
        return self._inputs[rows], self._targets[rows]

    def _gradient(self, params: dict, inputs: torch.Tensor, targets: torch.Tensor, clip: float) -> list[torch.Tensor]:
        """Mean of the per-sample gradients clipped to B; with B = inf the gradient of the mean loss (the same
        quantity, from one backward pass)."""
        if math.isinf(clip):
            return self._psg.mean_gradient(params, inputs, targets)
        return self._psg.clipped_mean(params, inputs, targets, clip)

    def _privatize(self, values: np.ndarray, clients: np.ndarray, sensitivity, mu: float, stage: str, kind: str,
                   unit: str = "record") -> tuple[np.ndarray, Release]:
        """Privatize the rows of the answering ``clients`` with their own streams; the record covers every client
        (sensitivity and sigma 0 for those that sent nothing)."""
        sens = np.broadcast_to(np.asarray(sensitivity, dtype=np.float64), (self.n_clients,))
        noisy, rec = federation_clients.privatize(values, self._noise.subset(clients), sens[clients], mu, stage, kind,
                                                  unit)
        full_sens, full_sigma = np.zeros(self.n_clients), np.zeros(self.n_clients)
        full_sens[clients], full_sigma[clients] = rec.sensitivity, rec.sigma
        return noisy, replace(rec, sensitivity=full_sens, sigma=full_sigma)

    def _scatter(self, rows: np.ndarray, clients: np.ndarray) -> np.ndarray:
        """``rows`` (one per client of ``clients``, float64) in a zero array of one row per client (``rows`` itself when
        every client is there)."""
        if clients.size == self.n_clients and rows.dtype == np.float64:
            return rows
        out = np.zeros((self.n_clients, *rows.shape[1:]))
        out[clients] = rows
        return out

    def _stack(self, rows: list[np.ndarray], width: int) -> np.ndarray:
        return np.stack(rows) if rows else np.empty((0, width))

    # ------------------------------------------------------------------ verbs that release
    def gradients(self, theta, *, clip: float, sensitivity, mu: float, stage: str, active=None) -> Reply:
        """Each asked client's mean of per-sample gradients clipped to ``clip`` (B) over its rows, plus noise."""
        answered, failing = self._begin(active)
        clients = np.flatnonzero(answered)
        params = self._params(theta)
        values = self._stack([self._flat(self._gradient(params, *self._rows(i), clip)) for i in clients], self.n_params)
        noisy, rec = self._privatize(values, clients, sensitivity, mu, stage, "aggregated")
        return self._reply(self._scatter(noisy, clients), [rec], answered, failing)

    def local_descent(self, theta0, *, clip: float, step_size: float, n_steps: int, sensitivity, mu: float,
                      stage: str, active=None) -> Reply:
        """``n_steps`` local steps ``theta <- theta - eta gbar(theta) + s Z`` (Algorithm 3: noise on the parameters at
        every step); send the final theta.

        ``gbar`` is the mean of per-sample gradients clipped to B over the client's rows, or over a
        fresh minibatch of ``b_i = min(batch_size, n_i)`` rows. ``sensitivity`` is the server's
        sensitivity of a full-batch step ``eta gbar``, ``2 B eta / n_i`` (it knows n_i only); a
        client stepping on minibatches sends noise for ``2 B eta / b_i``, the stated sensitivity
        times ``n_i / b_i`` (the record shows it, and the ledger still totals mu: sigma is
        sensitivity / mu). No amplification by the batch sampling is claimed.
        """
        answered, failing = self._begin(active)
        clients = np.flatnonzero(answered)
        sens = np.broadcast_to(np.asarray(sensitivity, dtype=np.float64), (self.n_clients,)) * self.sizes / self._batch_sizes
        theta = np.array(np.broadcast_to(theta0, (clients.size, self.n_params)), dtype=np.float64)
        records = []
        for _ in range(n_steps):
            g = self._stack([self._flat(self._gradient(self._params(t), *self._rows(i, batch=True), clip))
                             for t, i in zip(theta, clients)], self.n_params)
            theta, rec = self._privatize(theta - step_size * g, clients, sens, mu, stage, "local")
            records.append(rec)
            if (error := iterate_error(theta, stage, step_size)) is not None:
                return self._reply(self._scatter(theta, clients), records, answered, failing, error=error)
        return self._reply(self._scatter(theta, clients), records, answered, failing)

    def clipped_update(self, theta, *, step_size: float, n_steps: int, update_clip: float, sensitivity, mu: float,
                       stage: str, active=None) -> Reply:
        """Client-level DP-FedAvg: K local full-batch GD steps on the mean loss from theta (no noise, no per-sample
        clipping), the update clipped to L2 norm S (``update_clip``), plus noise; unit ``"client"``.

        The update's norm is computed without overflow (:func:`~privfedstat.deep.per_sample.sample_norms`)
        and clipped to ``S kappa`` (:func:`~privfedstat.deep.per_sample.clip_factors`); a non-finite
        update (diverging local steps) is sent as 0, so every update lies in the ball of radius S and
        replacing a client's whole dataset moves it by at most 2S (the server's ``sensitivity``).
        """
        answered, failing = self._begin(active)
        clients = np.flatnonzero(answered)
        params = self._broadcast(theta, clients.size)
        batches = [self._index(i) for i in clients]
        for _ in range(n_steps):
            _, step = self._stacked.value_and_gradient(params, batches)
            params = {n: p - step_size * step[n] for n, p in params.items()}
        delta = self._flat_rows(params)
        delta -= theta
        delta = torch.from_numpy(delta)
        if clients.size:
            norms = sample_norms([delta])
            finite = torch.isfinite(norms)
            if not bool(finite.all()):
                delta = torch.where(finite[:, None], delta, torch.zeros((), dtype=delta.dtype))
            delta *= clip_factors(norms, update_clip, torch.float64)[:, None]
        noisy, rec = self._privatize(delta.numpy(), clients, sensitivity, mu, stage, "aggregated", unit="client")
        return self._reply(self._scatter(noisy, clients), [rec], answered, failing)

    def count_at_most(self, which: str, theta, threshold: float, *, mu: float, stage: str, active=None) -> Reply:
        """Each asked client's number of rows whose per-sample gradient norm is <= ``threshold``, plus noise
        (sensitivity 1; the private clip search). Only ``which="gradient"``: networks have no other norms here."""
        if which != "gradient":
            raise ValueError(f"TorchClients count per-sample gradient norms only (which='gradient'), got {which!r}.")
        answered, failing = self._begin(active)
        clients = np.flatnonzero(answered)
        norms = self._norms(theta)
        counts = np.array([[np.count_nonzero(norms[i] <= threshold)] for i in clients], dtype=np.float64).reshape(-1, 1)
        noisy, rec = self._privatize(counts, clients, 1.0, mu, stage, "aggregated")
        return self._reply(self._scatter(noisy, clients), [rec], answered, failing)

    def _norms(self, theta) -> list[np.ndarray]:
        """Every client's per-sample gradient norms at theta, cached for the repeated thresholds of one search."""
        key = np.asarray(theta, dtype=np.float64).tobytes()
        if self._norm_cache is None or self._norm_cache[0] != key:
            params = self._params(theta)
            self._norm_cache = (key, [self._psg.norms(params, *self._rows(i)).numpy() for i in range(self.n_clients)])
        return self._norm_cache[1]
