"""Client-size bookkeeping for the bounds: given ``sizes`` (..., m) or equal sizes from (N, m).

Every bound has a per-client form (explicit sizes) and a comparable-size form (m clients of N/m);
:class:`Clients` gives both the same per-client sums, so each bound is written once.
"""

from __future__ import annotations

import numpy as np

from ._common import as_float, clients

__all__ = ["Clients"]


class Clients:
    """Per-client sums for either explicit sizes or m equal clients of size N/m.

    Parameters
    ----------
    sizes : array of shape (..., m) or None
        Client sizes, last axis = clients, ``nan`` = padding.
    n_samples, n_clients : array or None
        Used when ``sizes`` is None: m clients of N/m samples each (the comparable-size case).
    """

    def __init__(self, sizes=None, n_samples=None, n_clients=None) -> None:
        if sizes is not None:
            if n_samples is not None or n_clients is not None:
                raise TypeError("give either sizes or (n_samples, n_clients), not both.")
            self.per_client = True
            self.n, self.mask = clients(sizes)
            self.N = np.sum(self.n * self.mask, axis=-1)
            self.m = np.sum(self.mask, axis=-1).astype(np.float64)
            self.n_min = np.min(np.where(self.mask, self.n, np.inf), axis=-1)
            self.n_max = np.max(np.where(self.mask, self.n, -np.inf), axis=-1)
        else:
            if n_samples is None or n_clients is None:
                raise TypeError("give the client sizes (sizes=...) or both n_samples (N) and n_clients (m).")
            N = as_float(n_samples, "n_samples")
            m = as_float(n_clients, "n_clients")
            if np.any(~(m >= 1)) or np.any(m != np.floor(m)):
                raise ValueError(f"n_clients must be integers >= 1, got {m}.")
            if np.any(~(N >= m)) or np.any(np.isinf(N)):
                raise ValueError("n_samples must be finite and at least n_clients (every client holds a sample).")
            self.per_client = False
            self.N, self.m = np.broadcast_arrays(N, m)
            self.n = self.N / self.m
            self.n_min = self.n_max = self.n
            self.mask = None

    def x(self, a):
        """Expand a setting-level parameter so that it broadcasts against the client axis."""
        a = np.asarray(a, dtype=np.float64)
        return a[..., None] if self.per_client else a

    def sum(self, terms):
        """Sum of per-client ``terms`` (computed from ``self.n`` and expanded parameters)."""
        if self.per_client:
            return np.sum(np.where(self.mask, terms, 0.0), axis=-1)
        return self.m * terms

    def harmonic(self, terms):
        """``(sum_i 1 / terms_i)^{-1}``: the form of eqs. (2), (7) and Theorem 3.5."""
        with np.errstate(divide="ignore"):
            return 1.0 / self.sum(1.0 / terms)

    def client_param(self, a, name: str):
        """A parameter given per client (broadcast against ``sizes``, last axis = clients)."""
        a = as_float(a, name)
        if not self.per_client:
            return a
        return np.broadcast_to(a, np.broadcast_shapes(a.shape, self.n.shape))

    def max(self, terms):
        if self.per_client:
            return np.max(np.where(self.mask, terms, -np.inf), axis=-1)
        return terms
