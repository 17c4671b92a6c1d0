"""``FederatedData``: the clients' data stored concatenated with offsets.

Client ``i`` owns rows ``offsets[i]:offsets[i + 1]`` of ``X`` and ``y`` (and of the optional
per-row ``offset`` of the linear predictor); one numba kernel can then sweep all clients in one
pass. The object is immutable by convention (arrays are made read-only).
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import cached_property

import numpy as np

from .._linalg import row_norm_bounds
from .._rng import RandomState, as_seed_sequence, spawn_generators
from .._validation import check_finite_array, check_matrix

__all__ = ["FederatedData", "client_labels"]

#: the kernels' "no offset" (an empty offset array)
_NO_OFFSET = np.empty(0)
_NO_OFFSET.setflags(write=False)


def client_labels(clients, n: int) -> np.ndarray:
    """``clients`` as an array of one label per row of ``n``, refusing missing labels (NaN or None), which
    ``np.unique`` would otherwise gather into one silent client."""
    labels = np.asarray(clients)
    if labels.shape != (n,):
        raise ValueError(f"clients must have one label per row ({n}), got shape {labels.shape}.")
    if labels.dtype.kind == "f":
        missing = int(np.count_nonzero(np.isnan(labels)))
    elif labels.dtype.kind == "O":
        missing = sum(1 for v in labels if v is None or (isinstance(v, float) and v != v))
    else:
        missing = 0
    if missing:
        raise ValueError(f"clients has {missing} missing label(s) (NaN or None); every row needs a client.")
    return labels


class FederatedData:
    """Data held by ``n_clients`` clients, each with a design matrix and a response vector.

    Use the constructors :meth:`from_arrays` and :meth:`from_pooled`. ``X`` is used as given: add
    a column of ones for an intercept.

    An ``offset`` ``o_j`` enters the linear predictor with its coefficient fixed at 1,
    ``z_j = x_j^T theta + o_j`` (statsmodels' and R's ``offset``; ``log(exposure)`` for a Poisson
    rate model). It is a per-row covariate of the row's owner, private like ``X`` and ``y``; it
    changes only the residual ``ell'(y_j, z_j)``, never ``x_j``, so the clipping bound
    ``|ell'| ||x_j|| <= B`` and hence every sensitivity stay as they are. Not to be confused with
    ``offsets``, the client boundaries.

    Parameters
    ----------
    X : ndarray of shape (n_samples, n_features)
        All clients' rows, concatenated client after client.
    y : ndarray of shape (n_samples,)
        Responses in the same order.
    offsets : ndarray of shape (n_clients + 1,)
        ``offsets[0] = 0``, ``offsets[-1] = n_samples``, strictly increasing (no empty client).
    offset : ndarray of shape (n_samples,), optional
        Finite offset ``o_j`` of each row's linear predictor; None (default) for none.
    """

    def __init__(self, X: np.ndarray, y: np.ndarray, offsets: np.ndarray, offset: np.ndarray | None = None) -> None:
        X = check_matrix(X, "X")
        y = check_finite_array(y, "y", ndim=1)
        offsets = np.asarray(offsets, dtype=np.int64)
        if y.shape[0] != X.shape[0]:
            raise ValueError(f"X has {X.shape[0]} rows but y has {y.shape[0]} entries; they must match.")
        if offset is not None:
            offset = check_finite_array(offset, "offset", ndim=1).copy()  # a copy: the caller's array stays writeable
            if offset.shape[0] != X.shape[0]:
                raise ValueError(f"X has {X.shape[0]} rows but offset has {offset.shape[0]} entries; they must match.")
        if X.shape[1] == 0:
            raise ValueError("X has no columns; give at least one feature (e.g. a column of ones).")
        if X.shape[0] == 0:
            raise ValueError(f"the data have no rows (X has shape {X.shape}): a fit needs at least one row per client "
                             "(check a filter or na_action='drop' that removed every row).")
        if offsets.ndim != 1 or offsets.size < 2 or offsets[0] != 0 or offsets[-1] != X.shape[0]:
            raise ValueError("offsets must start at 0, end at n_samples and list one boundary per client.")
        sizes = np.diff(offsets)
        if np.any(sizes <= 0):
            empty = np.flatnonzero(sizes <= 0).tolist()
            raise ValueError(f"client(s) {empty[:10]} have no rows; every client needs at least one sample.")
        self.X = np.ascontiguousarray(X)
        self.y = np.ascontiguousarray(y)
        self.offsets = offsets
        self.offset = offset
        self.labels: np.ndarray | None = None  # the clients' labels, sorted, where from_pooled was given them
        for a in (self.X, self.y, self.offsets, self.eta_offset):
            a.setflags(write=False)

    # ------------------------------------------------------------------ constructors
    @classmethod
    def from_arrays(cls, clients: Sequence[tuple[np.ndarray, ...]]) -> FederatedData:
        """Build from a list of ``(X_i, y_i)`` pairs, one per client, or of ``(X_i, y_i, offset_i)``
        triples (every client then gives its rows' offsets; see the class docstring)."""
        if isinstance(clients, (np.ndarray, str)) or len(clients) == 0:
            raise ValueError("clients must be a non-empty list of (X_i, y_i) pairs or (X_i, y_i, offset_i) triples.")
        Xs, ys, os = [], [], []
        for i, part in enumerate(clients):
            if not isinstance(part, (tuple, list)) or len(part) not in (2, 3):
                raise TypeError(f"client {i}: expected an (X, y) pair or an (X, y, offset) triple, got "
                                f"{type(part).__name__}{f' of length {len(part)}' if isinstance(part, (tuple, list)) else ''}.")
            if len(part) != len(clients[0]):
                raise ValueError(f"client {i} gives {len(part)} arrays but client 0 gives {len(clients[0])}: "
                                 "either every client gives its offsets or none does.")
            Xi = check_matrix(part[0], f"X of client {i}")
            yi = check_finite_array(part[1], f"y of client {i}", ndim=1)
            if Xi.shape[0] != yi.shape[0]:
                raise ValueError(f"client {i}: X has {Xi.shape[0]} rows but y has {yi.shape[0]} entries.")
            if Xi.shape[0] == 0:
                raise ValueError(f"client {i} has no rows; every client needs at least one sample.")
            if Xs and Xi.shape[1] != Xs[0].shape[1]:
                raise ValueError(f"client {i} has {Xi.shape[1]} features but client 0 has {Xs[0].shape[1]}.")
            if len(part) == 3:
                oi = check_finite_array(part[2], f"offset of client {i}", ndim=1)
                if oi.shape[0] != Xi.shape[0]:
                    raise ValueError(f"client {i}: X has {Xi.shape[0]} rows but offset has {oi.shape[0]} entries.")
                os.append(oi)
            Xs.append(Xi)
            ys.append(yi)
        offsets = np.concatenate([[0], np.cumsum([len(v) for v in ys])])
        return cls(np.concatenate(Xs), np.concatenate(ys), offsets, np.concatenate(os) if os else None)

    @classmethod
    def from_pooled(
        cls,
        X: np.ndarray,
        y: np.ndarray,
        *,
        clients: Sequence | np.ndarray | None = None,
        sizes: Sequence[int] | np.ndarray | None = None,
        offset: np.ndarray | None = None,
    ) -> FederatedData:
        """Split pooled data across clients.

        Parameters
        ----------
        X, y : array-like
            Pooled design matrix (n_samples, n_features) and responses (n_samples,).
        clients : array-like of shape (n_samples,), optional
            Client label of each row (any hashable values). Clients are ordered by sorted label;
            rows keep their original order within a client.
        sizes : sequence of int, optional
            Consecutive block sizes (``sum(sizes) == n_samples``): the first ``sizes[0]`` rows go
            to client 0, and so on.
        offset : array-like of shape (n_samples,), optional
            Offset of each row's linear predictor (e.g. ``np.log(exposure)``); it moves with its row.

        Exactly one of ``clients`` and ``sizes`` must be given.
        """
        if (clients is None) == (sizes is None):
            raise ValueError("give exactly one of clients= (a label per row) or sizes= (rows per client).")
        X = check_matrix(X, "X")
        y = check_finite_array(y, "y", ndim=1)
        if X.shape[0] != y.shape[0]:
            raise ValueError(f"X has {X.shape[0]} rows but y has {y.shape[0]} entries; they must match.")
        if offset is not None:
            offset = check_finite_array(offset, "offset", ndim=1)
            if offset.shape[0] != X.shape[0]:
                raise ValueError(f"X has {X.shape[0]} rows but offset has {offset.shape[0]} entries; they must match.")
        if sizes is not None:
            sizes = np.asarray(sizes)
            if sizes.ndim != 1 or sizes.size == 0 or not np.issubdtype(sizes.dtype, np.integer):
                raise TypeError("sizes must be a non-empty 1-D sequence of integers.")
            if np.any(sizes <= 0):
                raise ValueError("every entry of sizes must be >= 1 (no empty clients).")
            if sizes.sum() != X.shape[0]:
                raise ValueError(f"sizes sum to {int(sizes.sum())} but there are {X.shape[0]} rows.")
            return cls(X, y, np.concatenate([[0], np.cumsum(sizes)]), offset)
        labels = client_labels(clients, X.shape[0])
        try:
            names, codes = np.unique(labels, return_inverse=True)
        except TypeError as exc:
            raise TypeError(f"client labels must be sortable (all numbers or all strings): {exc}") from None
        order = np.argsort(codes, kind="stable")
        counts = np.bincount(codes)
        data = cls(X[order], y[order], np.concatenate([[0], np.cumsum(counts)]), None if offset is None else offset[order])
        data.labels = names
        return data

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
    def n_features(self) -> int:
        """Number of columns of X (d)."""
        return self.X.shape[1]

    @property
    def n_samples(self) -> int:
        """Total number of rows (N)."""
        return self.X.shape[0]

    @property
    def eta_offset(self) -> np.ndarray:
        """The offset as the kernels take it: ``offset``, or an empty array when there is none (read-only)."""
        return _NO_OFFSET if self.offset is None else self.offset

    @cached_property
    def row_norms(self) -> np.ndarray:
        """Upper bounds on the Euclidean norms of the rows of X, shape (n_samples,); see :func:`row_norm_bounds`.

        The kernels clip per-sample gradients with them (no per-sample gradient is formed), so the
        bound ``row_norms[j] >= ||x_j||`` is what makes the clipping hold for every finite row.
        """
        r = row_norm_bounds(self.X)
        r.setflags(write=False)
        return r

    @cached_property
    def columns(self) -> np.ndarray:
        """X transposed, C-contiguous, shape (n_features, n_samples) (for the small-d kernels)."""
        c = np.ascontiguousarray(self.X.T)
        c.setflags(write=False)
        return c

    def client(self, i: int) -> tuple[np.ndarray, ...]:
        """Return client ``i``'s ``(X_i, y_i)``, or ``(X_i, y_i, offset_i)`` for data with an offset (read-only
        views; the form :meth:`from_arrays` takes)."""
        if not -self.n_clients <= i < self.n_clients:
            raise IndexError(f"client index {i} out of range for {self.n_clients} clients.")
        i %= self.n_clients
        sl = slice(self.offsets[i], self.offsets[i + 1])
        return (self.X[sl], self.y[sl]) if self.offset is None else (self.X[sl], self.y[sl], self.offset[sl])

    def take(self, rows: np.ndarray, sizes: np.ndarray) -> FederatedData:
        """New data with the given global ``rows`` (and their offsets), grouped into consecutive clients of ``sizes``."""
        return FederatedData(self.X[rows], self.y[rows], np.concatenate([[0], np.cumsum(sizes)]),
                             None if self.offset is None else self.offset[rows])

    def split_halves(self, random_state: RandomState = None, first_client: int = 0) -> tuple[FederatedData, FederatedData]:
        """Randomly split every client's rows into two disjoint halves (FedNewton's sample splitting).

        Client ``i`` gets ``floor(n_i / 2)`` rows in the first half and the rest in the second; the
        permutation of each client comes from its own stream spawned from ``random_state`` (the
        child ``first_client + i``: ``first_client`` is the federation index of this data's first client).
        """
        gens = spawn_generators(as_seed_sequence(random_state), self.n_clients, first=first_client)
        sizes, starts = self.sizes, self.offsets[:-1]
        s1 = sizes // 2
        if np.any(s1 == 0):
            raise ValueError("sample splitting needs at least 2 rows per client.")
        rows = np.concatenate([g.permutation(n) for g, n in zip(gens, sizes)]) + np.repeat(starts, sizes)
        in_first = np.arange(rows.size) - np.repeat(starts - self.offsets[0], sizes) < np.repeat(s1, sizes)
        return self.take(rows[in_first], s1), self.take(rows[~in_first], sizes - s1)

    def __repr__(self) -> str:
        s = self.sizes
        return (
            f"FederatedData(n_clients={self.n_clients}, n_samples={self.n_samples}, n_features={self.n_features}, "
            f"sizes min/median/max={s.min()}/{int(np.median(s))}/{s.max()}{', with offset' if self.offset is not None else ''})"
        )
