"""``TensorFederatedData``: the clients' N-dimensional inputs and integer labels, concatenated with offsets.

The network counterpart of :class:`~privfedstat.FederatedData`: client ``i`` owns rows
``offsets[i]:offsets[i + 1]`` of ``inputs`` (shape ``(n_samples, *input_shape)``, e.g. images
``(n, 1, 8, 8)``) and ``targets`` (class labels). Stored as torch tensors (float32 or float64
inputs, int64 labels); immutable by convention.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

from .._rng import RandomState, as_seed_sequence
from ..data.federated import client_labels

__all__ = ["TensorFederatedData", "FailingTensorData"]


class TensorFederatedData:
    """Data held by ``n_clients`` clients: inputs of any shape and integer class labels.

    Use :meth:`from_pooled` or :meth:`split_iid`.

    Parameters
    ----------
    inputs : torch.Tensor or ndarray of shape (n_samples, *input_shape)
        All clients' inputs, concatenated client after client; float32 or float64, finite.
    targets : torch.Tensor or ndarray of shape (n_samples,)
        Integer class labels (>= 0) in the same order.
    offsets : array-like of shape (n_clients + 1,)
        ``offsets[0] = 0``, ``offsets[-1] = n_samples``, strictly increasing (no empty client).
    """

    def __init__(self, inputs, targets, offsets) -> None:
        inputs = torch.as_tensor(inputs)
        targets = torch.as_tensor(targets)
        offsets = np.array(offsets, dtype=np.int64)
        if inputs.dtype not in (torch.float32, torch.float64) or inputs.dim() < 2:
            raise TypeError(f"inputs must be a float32 or float64 array of shape (n_samples, ...), got {inputs.dtype} "
                            f"of shape {tuple(inputs.shape)}.")
        if not bool(torch.isfinite(inputs).all()):
            raise ValueError("inputs contain NaN or infinite values.")
        if targets.dim() != 1 or targets.dtype.is_floating_point or targets.dtype.is_complex or targets.dtype == torch.bool:
            raise TypeError(f"targets must be a 1-D array of integer class labels, got {targets.dtype} of shape "
                            f"{tuple(targets.shape)}.")
        if targets.shape[0] != inputs.shape[0]:
            raise ValueError(f"inputs have {inputs.shape[0]} rows but targets have {targets.shape[0]}; they must match.")
        if targets.numel() and int(targets.min()) < 0:
            raise ValueError("class labels must be >= 0.")
        if inputs.shape[0] == 0:
            raise ValueError(f"the data have no rows (inputs of shape {tuple(inputs.shape)}): every client needs at "
                             "least one sample.")
        if offsets.ndim != 1 or offsets.size < 2 or offsets[0] != 0 or offsets[-1] != inputs.shape[0]:
            raise ValueError("offsets must start at 0, end at n_samples and list one boundary per client.")
        if np.any(np.diff(offsets) <= 0):
            raise ValueError(f"client(s) {np.flatnonzero(np.diff(offsets) <= 0)[:10].tolist()} have no rows; every "
                             "client needs at least one sample.")
        self.inputs = inputs.contiguous()
        self.targets = targets.to(torch.int64).contiguous()
        self.offsets = offsets
        self.offsets.setflags(write=False)

    # ------------------------------------------------------------------ constructors
    @classmethod
    def from_pooled(cls, inputs, targets, *, sizes: Sequence[int] | None = None,
                    clients: Sequence | np.ndarray | None = None) -> TensorFederatedData:
        """Split pooled data across clients: consecutive blocks of ``sizes`` rows, or by a client label per row.

        Exactly one of ``sizes`` and ``clients`` must be given; with ``clients`` the clients are
        ordered by sorted label and rows keep their order within a client (as
        :meth:`FederatedData.from_pooled <privfedstat.FederatedData.from_pooled>`).
        """
        if (clients is None) == (sizes is None):
            raise ValueError("give exactly one of clients= (a label per row) or sizes= (rows per client).")
        n = len(inputs)
        if len(targets) != n:
            raise ValueError(f"inputs have {n} rows but targets have {len(targets)}; they must match (one label per "
                             "input).")
        if sizes is not None:
            sizes = np.asarray(sizes)
            if sizes.ndim != 1 or sizes.size == 0 or not np.issubdtype(sizes.dtype, np.integer):
                raise TypeError("sizes must be a non-empty 1-D sequence of integers.")
            if sizes.sum() != n:
                raise ValueError(f"sizes sum to {int(sizes.sum())} but there are {n} rows.")
            return cls(inputs, targets, np.concatenate([[0], np.cumsum(sizes)]))
        labels = client_labels(clients, n)
        _, codes = np.unique(labels, return_inverse=True)
        order = torch.as_tensor(np.argsort(codes, kind="stable"))
        return cls(torch.as_tensor(inputs)[order], torch.as_tensor(targets)[order],
                   np.concatenate([[0], np.cumsum(np.bincount(codes))]))

    @classmethod
    def split_iid(cls, inputs, targets, n_clients: int, *, n_per_client: int | None = None,
                  random_state: RandomState = None) -> TensorFederatedData:
        """An IID split (Section 5.2.1): rows drawn at random without replacement, dealt to ``n_clients`` clients.

        Parameters
        ----------
        inputs, targets : arrays of shape (n_samples, ...) and (n_samples,)
            The pooled data.
        n_clients : int
            m.
        n_per_client : int, optional
            Rows per client (Scenario 1: ``m n`` rows drawn at random); None: every row is used and
            the clients' sizes differ by at most one (Scenario 2).
        random_state : int, Generator, SeedSequence or None
        """
        n = len(inputs)
        if len(targets) != n:
            raise ValueError(f"inputs have {n} rows but targets have {len(targets)}; they must match (one label per "
                             "input).")
        if isinstance(n_clients, bool) or not isinstance(n_clients, (int, np.integer)) or not 1 <= n_clients <= n:
            raise ValueError(f"n_clients must be an integer in [1, {n}], got {n_clients!r}.")
        if n_per_client is not None and (isinstance(n_per_client, bool) or not isinstance(n_per_client, (int, np.integer))
                                         or n_per_client < 1):
            raise ValueError(f"n_per_client must be an integer >= 1 (rows per client) or None, got {n_per_client!r}.")
        total = n if n_per_client is None else int(n_per_client) * int(n_clients)
        if total > n:
            raise ValueError(f"{n_clients} clients of {n_per_client} rows need {total} rows, more than the {n} given.")
        rng = np.random.default_rng(as_seed_sequence(random_state))
        rows = torch.as_tensor(rng.permutation(n)[:total])
        sizes = np.full(n_clients, total // n_clients)
        sizes[: total % n_clients] += 1
        return cls(torch.as_tensor(inputs)[rows], torch.as_tensor(targets)[rows], np.concatenate([[0], np.cumsum(sizes)]))

    # ------------------------------------------------------------------ properties
    @property
    def n_clients(self) -> int:
        """Number of clients (m)."""
        return self.offsets.size - 1

    @property
    def sizes(self) -> np.ndarray:
        """Rows per client (n_i), shape (n_clients,)."""
        return np.diff(self.offsets)

    @property
    def n_samples(self) -> int:
        """Total number of rows (N)."""
        return int(self.inputs.shape[0])

    @property
    def input_shape(self) -> tuple[int, ...]:
        """Shape of one input (e.g. ``(1, 8, 8)``)."""
        return tuple(self.inputs.shape[1:])

    @property
    def n_features(self) -> int:
        """Numbers per input (the product of :attr:`input_shape`)."""
        return int(np.prod(self.input_shape, dtype=np.int64))

    def client(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Client ``i``'s ``(inputs_i, targets_i)`` (views)."""
        if not -self.n_clients <= i < self.n_clients:
            raise IndexError(f"client index {i} out of range for {self.n_clients} clients.")
        i %= self.n_clients
        return self.inputs[self.offsets[i]:self.offsets[i + 1]], self.targets[self.offsets[i]:self.offsets[i + 1]]

    def to_numpy(self) -> tuple[np.ndarray, np.ndarray]:
        """All rows as numpy arrays ``(inputs, targets)`` (sharing memory with the tensors)."""
        return self.inputs.numpy(), self.targets.numpy()

    def __repr__(self) -> str:
        s = self.sizes
        return (f"TensorFederatedData(n_clients={self.n_clients}, n_samples={self.n_samples}, "
                f"input_shape={self.input_shape}, sizes min/median/max={s.min()}/{int(np.median(s))}/{s.max()})")


class FailingTensorData(TensorFederatedData):
    """Fault injection for :class:`~privfedstat.deep.clients.TorchClients`: data whose clients fail on cue.

    The counterpart of :class:`~privfedstat.federation.FailingData`, with the same meaning: client
    ``i`` fails while answering its ``failures[i]``-th request (0-based, counting every verb call
    of the fit) and answers nothing afterwards.

    Parameters
    ----------
    data : TensorFederatedData
    failures : dict of int to int
    """

    def __init__(self, data: TensorFederatedData, failures: dict[int, int]) -> None:
        super().__init__(data.inputs, data.targets, data.offsets)
        bad = [i for i in failures if not 0 <= int(i) < data.n_clients]
        if bad:
            raise ValueError(f"failures name clients {bad} outside 0..{data.n_clients - 1}.")
        self.failures = {int(i): int(at) for i, at in failures.items()}
