"""Gaussian noise for the clients: one independent, reproducible stream per client.

Each client owns a :class:`numpy.random.Generator` spawned from the fit's seed. Draws are served
from a per-client buffer refilled in chunks; because ``Generator.standard_normal`` produces the
same sequence whether values are drawn one at a time or in blocks, the numbers a client uses depend
only on its own stream, not on the chunk size. This removes one Python-level generator call per
client and message from the hot loop. All clients draw in lockstep (full participation).
"""

from __future__ import annotations

import numpy as np

__all__ = ["ClientNoise"]


class ClientNoise:
    """Standard normal draws from one independent stream per client.

    Parameters
    ----------
    generators : list of numpy.random.Generator
        One generator per client (spawned from a ``SeedSequence``).
    chunk : int
        Normals drawn per client at the first refill of the buffer; each refill doubles it.
    """

    def __init__(self, generators: list[np.random.Generator], chunk: int = 256) -> None:
        self._gens = list(generators)
        self._chunk = int(chunk)
        self._buf = np.empty((len(self._gens), 0))
        self._pos = 0

    @property
    def n_clients(self) -> int:
        return len(self._gens)

    def standard_normal(self, shape: tuple[int, ...]) -> np.ndarray:
        """Return an array of shape ``(n_clients, *shape)``; row i comes from client i's stream."""
        size = int(np.prod(shape, dtype=np.int64))
        unread = self._buf[:, self._pos:]
        if unread.shape[1] < size:
            width = max(self._chunk, size)
            self._chunk *= 2  # geometric refills: few generator calls, at most ~2x over-drawn
            fresh = np.empty((self.n_clients, width))
            for i, g in enumerate(self._gens):
                g.standard_normal(out=fresh[i])
            self._buf = np.concatenate([unread, fresh], axis=1)
            self._pos = 0
        out = self._buf[:, self._pos: self._pos + size]
        self._pos += size
        return out.reshape((self.n_clients, *shape)).copy()
