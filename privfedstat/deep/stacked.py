"""Many clients' minibatch losses and gradients at once: ``torch.func.vmap`` over stacked client parameters.

The client-level algorithms (client-level DP-FedAvg, Fed-alpha-NormEC and its comparator,
HiFedProx) run local steps on every client from the same server model, each client on its own
rows. :class:`StackedLoss` evaluates, for k clients at once, the mean loss ``f_i(theta_i)`` of
client i's batch B_i and its gradient, each at the client's own parameters theta_i: the
parameters are *stacked* (a leading client dimension on every tensor) and one
:func:`~torch.func.vmap` over that dimension runs all clients' forward and backward passes as
one batched computation, in place of one Python call per client.

Batches of different sizes are grouped by size (a vmap needs equal shapes): the clients of an
IID split fall into one or two groups; each group is evaluated in chunks of at most
:data:`STACK_ELEMENTS` stacked numbers. Within a group every client's batch goes through the
model and ``loss_fn`` exactly as in a per-client call (no padding, no masks), so the two
strategies compute the same quantity and agree to float rounding (the batched kernels may sum
in another order).

The vectorised strategy is used where the model allows it: :class:`StackedLoss` tries it once
(at its first evaluation) on two clients of the data and falls back to the per-client loop if
``vmap`` refuses the model (an operation without a batching rule, ``.item()`` in ``forward``,
...). Models with batch statistics or random masks in training mode never get here (refused by
:func:`~privfedstat.deep.per_sample.check_model`).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import torch
from torch import nn
from torch.func import functional_call, grad_and_value, vmap

__all__ = ["StackedLoss", "STACK_ELEMENTS"]

#: numbers one vmap call holds at most: per client its parameters and their gradient (2 P) and its batch's inputs
#: (b times an input's size); 2^23 float32 numbers are 32 MiB (the activations come on top)
STACK_ELEMENTS = 2**23


class StackedLoss:
    """Clients' batch mean losses and their gradients at stacked parameters, vectorised across clients.

    Parameters
    ----------
    model : torch.nn.Module
        Evaluated with :func:`~torch.func.functional_call` on the given parameters (its own
        trainable parameters are not used or changed; frozen parameters and buffers are used as
        they are). Checked by :func:`~privfedstat.deep.per_sample.check_model` beforehand.
    loss_fn : callable
        ``loss_fn(outputs, targets)`` -> the mean loss of a batch.
    names : list of str
        The trainable parameters, in the order of the flat parameter vector.
    inputs, targets : torch.Tensor
        All clients' rows (inputs in the model's dtype); batches are index tensors into them.
    vectorise : bool, default True
        Use ``vmap`` across clients where the model allows it; False: one call per client (the
        reference the vectorised strategy is tested against).

    Attributes
    ----------
    vectorised : bool
        Whether the vmap strategy is in use (tried at the first evaluation).
    """

    def __init__(self, model: nn.Module, loss_fn: Callable, names: list[str], inputs: torch.Tensor,
                 targets: torch.Tensor, *, vectorise: bool = True) -> None:
        self._model = model
        self._loss_fn = loss_fn
        self._names = list(names)
        self._inputs = inputs
        self._targets = targets
        self._fixed = ({n: p.detach() for n, p in model.named_parameters() if not p.requires_grad},
                       dict(model.named_buffers()))
        self._one = grad_and_value(self._batch_loss)
        self._many = vmap(self._one)
        self._many_values = vmap(self._batch_loss)
        self._row_numel = max(1, int(np.prod(inputs.shape[1:], dtype=np.int64)))
        trainable = dict(model.named_parameters())
        self._initial = {n: trainable[n].detach() for n in self._names}
        self._n_params = sum(p.numel() for p in self._initial.values())
        self._vectorised = None if vectorise else False

    @property
    def vectorised(self) -> bool:
        """Whether the vmap strategy is in use (decided at the first use: :meth:`_vmap_allowed`)."""
        if self._vectorised is None:
            self._vectorised = self._vmap_allowed(self._initial)
        return self._vectorised

    def _batch_loss(self, params: dict, inputs: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        frozen, buffers = self._fixed
        return self._loss_fn(functional_call(self._model, ({**params, **frozen}, buffers), (inputs,)), targets)

    def _vmap_allowed(self, params: dict) -> bool:
        """Whether vmap takes the model: one vectorised evaluation of two clients at the initial parameters."""
        rows = torch.arange(min(2, self._inputs.shape[0]))
        stacked = {n: p.unsqueeze(0).expand(2, *p.shape) for n, p in params.items()}
        try:
            self._many(stacked, self._inputs[rows].unsqueeze(0).expand(2, *rows.shape, *self._inputs.shape[1:]),
                       self._targets[rows].unsqueeze(0).expand(2, *rows.shape))
        except (RuntimeError, NotImplementedError):
            return False
        return True

    def value_and_gradient(self, params: dict[str, torch.Tensor],
                           batches: list[torch.Tensor]) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """``f_i(theta_i)`` and its gradient for every client i: the mean loss of its batch at its parameters.

        Parameters
        ----------
        params : dict of str to torch.Tensor
            theta_i stacked: each trainable parameter with a leading client dimension of size k.
        batches : list of k int64 tensors
            Row indices (into ``inputs``) of each client's batch B_i (at least one row each).

        Returns
        -------
        losses : torch.Tensor of shape (k,)
        gradients : dict of str to torch.Tensor
            Each of shape (k, *shape), in the model's dtype.
        """
        losses = torch.empty(len(batches), dtype=next(iter(params.values())).dtype)
        grads = {n: torch.empty(params[n].shape, dtype=params[n].dtype) for n in self._names}
        for who, rows in self._chunks(batches):
            g, f = self._evaluate(self._part(params, who), self._inputs[rows], self._targets[rows])
            losses[who] = f
            for n in self._names:
                grads[n][who] = g[n]
        return losses, grads

    def value(self, params: dict[str, torch.Tensor], batches: list[torch.Tensor]) -> torch.Tensor:
        """``f_i(theta_i)`` only (forward passes, no gradient), shape (k,)."""
        losses = torch.empty(len(batches), dtype=next(iter(params.values())).dtype)
        with torch.no_grad():
            for who, rows in self._chunks(batches):
                part = self._part(params, who)
                inputs, targets = self._inputs[rows], self._targets[rows]
                if self.vectorised:
                    losses[who] = self._many_values(part, inputs, targets)
                else:
                    losses[who] = torch.stack([self._batch_loss({n: p[k] for n, p in part.items()}, inputs[k],
                                                                targets[k]) for k in range(len(who))])
        return losses

    def _part(self, params: dict[str, torch.Tensor], who: torch.Tensor) -> dict[str, torch.Tensor]:
        """The parameters of the clients ``who``: a view where every client holds the same (client stride 0: one
        theta broadcast), else a gathered copy."""
        return {n: params[n][:1].expand(len(who), *params[n].shape[1:]) if params[n].stride(0) == 0
                else params[n][who] for n in self._names}

    def _evaluate(self, params: dict, inputs: torch.Tensor, targets: torch.Tensor) -> tuple[dict, torch.Tensor]:
        """Gradients and losses of one chunk of equal-size batches (inputs of shape (k, b, ...))."""
        if self.vectorised:
            return self._many(params, inputs, targets)
        out = [self._one({n: p[k] for n, p in params.items()}, inputs[k], targets[k]) for k in range(inputs.shape[0])]
        return {n: torch.stack([g[n] for g, _ in out]) for n in self._names}, torch.stack([f for _, f in out])

    def _chunks(self, batches: list[torch.Tensor]):
        """(clients, rows of shape (k, b)) per chunk: the clients grouped by batch size, at most STACK_ELEMENTS each."""
        sizes = np.array([b.numel() for b in batches], dtype=np.int64)
        if np.any(sizes < 1):
            raise ValueError("every client's batch needs at least one row.")
        for b in np.unique(sizes):
            group = np.flatnonzero(sizes == b)
            per_chunk = max(1, STACK_ELEMENTS // (2 * self._n_params + int(b) * self._row_numel))
            for lo in range(0, group.size, per_chunk):
                who = group[lo:lo + per_chunk]
                yield torch.from_numpy(who), torch.stack([batches[k] for k in who])
