"""Gaussian noise for the clients: reproducible per-client streams, or secure noise.

:class:`ClientNoise` (the default) gives each client the stream of a :class:`numpy.random.Generator`
spawned from the fit's seed, reproduced bit for bit by a numba kernel over all clients' states
(:mod:`privfedstat.kernels.pcg64_nb`), so a draw costs no Python work per client. Every call draws
one block for every client, whether or not it takes part in the round, so the streams advance in
lockstep and a client's draws depend only on its own stream and the sequence of requests.

:class:`SecureClientNoise` (``secure_mode=True``) takes every bit from the operating system's
CSPRNG and sums several normal draws, the mitigation of floating-point attacks on the Gaussian
mechanism described in its docstring. Both have the same interface (``n_clients`` and
``standard_normal(shape)``), which is all :func:`~privfedstat.federation.clients.privatize` uses.
"""

from __future__ import annotations

import math
import os

import numpy as np

from .._rng import child_entropy
from ..kernels.pcg64_nb import pcg64_children, pcg64_standard_normal

__all__ = ["ClientNoise", "SecureClientNoise"]

_LOW52 = np.uint64(2**52 - 1)
_SIGN = np.uint64(2**63)


class ClientNoise:
    """Standard normal draws from one independent stream per client.

    Client i's stream is ``numpy.random.Generator(numpy.random.PCG64(child_i))``, ``child_i`` the
    child ``first + i`` of ``seed`` (as ``seed.spawn(first + n_clients)[first + i]`` gives on a
    fresh ``seed``), and its draws are that generator's ``standard_normal`` values, bit for bit.
    The streams are held as one array of PCG64 states and drawn by a numba kernel over all clients
    (:mod:`privfedstat.kernels.pcg64_nb`): no generator object per client, no Python work per
    client, 32 bytes of state per client.

    Parameters
    ----------
    seed : numpy.random.SeedSequence
        The parent of the clients' streams.
    n_clients : int
        Number of clients (m).
    first : int, default 0
        Federation index of the first client held here: a process holding clients ``first ...``
        (a Flower node holds one) draws what they draw when all clients are held in one process.
    """

    def __init__(self, seed: np.random.SeedSequence, n_clients: int, first: int = 0) -> None:
        n, first = int(n_clients), int(first)
        if first + n > 2**32:
            raise ValueError("client indices must be below 2**32.")
        self._states = pcg64_children(child_entropy(seed), seed.pool_size, first, n)

    @property
    def n_clients(self) -> int:
        return self._states.shape[0]

    def standard_normal(self, shape: tuple[int, ...]) -> np.ndarray:
        """Return an array of shape ``(n_clients, *shape)``; row i is the next draws of client i's stream."""
        out = np.empty((self.n_clients, math.prod(shape)))
        pcg64_standard_normal(self._states, out)
        return out.reshape((self.n_clients, *shape))


class SecureClientNoise:
    r"""Standard normal draws for secure mode: OS randomness, several normals summed.

    Every value is ``Z = (Z_1 + Z_2 + Z_3 + Z_4) / 2`` with four independent standard normals
    ``Z_k``, so ``Z ~ N(0, 1)`` (the division by 2 is exact in floating point). Each ``Z_k`` is
    drawn by inversion from 53 bits of :func:`os.urandom` (the operating system's CSPRNG,
    ``getrandom(2)`` on Linux): a sign bit ``s`` and a 52-bit integer ``k`` give
    ``U = (2k + 1) 2^{-54}``, uniform on ``(0, 1/2)`` and exactly representable, and
    ``Z_k = (-1)^s (-Phi^{-1}(U))``, so the sampler is exactly symmetric.

    Why. A float64 Gaussian sampler maps a few uniform floats to a sparse ("porous") set of
    doubles; an observer of ``fl(x + sigma Z)`` can test whether ``fl(x + sigma Z) - x`` is a value
    the sampler can produce and so tell neighbouring inputs ``x`` apart far more often than
    the mu-GDP guarantee allows (Mironov 2012 for the Laplace mechanism; Jin et al. 2022 for the
    Gaussian mechanism, including DP-SGD). Summing ``2n`` draws makes every double of the
    relevant range reachable in many ways and raises the cost of that test to about
    ``2^{p(2n - 1)}`` operations (``p`` = 53 bits per draw; Holohan & Braghin 2021, Section 5.1);
    with ``2n = 4`` that is about ``2^159``. Opacus' ``secure_mode`` uses the same sum of four
    draws (``_generate_noise``) with a cryptographically secure generator. A CSPRNG (rather than
    numpy's PCG64, whose state can in principle be recovered from its raw outputs) removes the
    other route, predicting the noise.

    What it does not cover. Timing and other side channels (run time, memory, power) of the
    noise generation and of the whole fit; rounding of the noisy value ``fl(x + sigma Z)``
    itself beyond the reachability test above (no formal float-level DP proof such as Mironov's
    snapping mechanism exists for this Gaussian sampler); attacks on the operating system's
    random source. Each ``|Z_k|`` is at most ``-Phi^{-1}(2^{-54}) < 8.3``, so ``|Z| < 16.6``: a
    release of GDP parameter ``mu_r`` can differ from the exact Gaussian mechanism only on an
    event of probability below ``Phi(mu_r - 16.5)`` (< 1e-40 for ``mu_r <= 3``).

    Parameters
    ----------
    n_clients : int
        Number of clients (m); every call returns one independent block per client.

    References
    ----------
    Mironov, I. (2012). On significance of the least significant bits for differential privacy.
    ACM CCS 2012, 650-661.
    Holohan, N. and Braghin, S. (2021). Secure random sampling in differential privacy. ESORICS
    2021, LNCS 12973, 523-542.
    Jin, J., McMurtry, E., Rubinstein, B. I. P. and Ohrimenko, O. (2022). Are we there yet? Timing
    and floating-point attacks on differential privacy systems. IEEE S&P 2022, 473-488.
    """

    #: independent normals summed per value (2n with n = 2, as in Opacus)
    n_summed = 4

    def __init__(self, n_clients: int) -> None:
        self._m = int(n_clients)

    @property
    def n_clients(self) -> int:
        return self._m

    def standard_normal(self, shape: tuple[int, ...]) -> np.ndarray:
        """Return an array of shape ``(n_clients, *shape)`` of independent secure N(0, 1) draws."""
        from scipy.special import ndtri  # scipy.special: imported here, not at module level (slow to import)

        size = self._m * int(np.prod(shape, dtype=np.int64))
        bits = np.frombuffer(os.urandom(8 * self.n_summed * size), dtype=np.uint64).reshape(self.n_summed, size)
        u = ((bits & _LOW52) * 2 + 1).astype(np.float64) * 2.0**-54  # (2k + 1) 2^-54, exact
        # ndtri(u) < 0 on (0, 1/2); the top bit flips its IEEE sign bit (an exact negation)
        z = (ndtri(u).view(np.uint64) ^ (bits & _SIGN)).view(np.float64)
        total = z[0] + z[1] + z[2] + z[3]
        return (0.5 * total).reshape((self._m, *shape))

    def subset(self, clients: np.ndarray) -> SecureClientNoise:
        """The draws of ``clients`` only (the streams are independent and stateless: a generator for that many)."""
        return SecureClientNoise(len(clients))
