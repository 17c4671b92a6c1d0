"""The single entry point for randomness.

``random_state`` (``None``, an ``int``, a :class:`numpy.random.SeedSequence` or a
:class:`numpy.random.Generator`) is resolved once into a :class:`~numpy.random.SeedSequence`;
everything random is drawn from children of it (``SeedSequence.spawn``), one per purpose and per
client, so streams are independent and the same seed gives bit-identical results. Global numpy
state is never touched.

In secure mode (``secure_mode=True`` on the private estimators) no seed may be given:
:func:`check_secure_mode` refuses anything but ``random_state=None``, so every stream is seeded
from the operating system's entropy and the noise cannot be replayed by anyone who knows a seed.
"""

from __future__ import annotations

import numpy as np

RandomState = int | np.random.SeedSequence | np.random.Generator | None

__all__ = ["RandomState", "as_seed_sequence", "spawn_generators", "child_seed", "child_entropy", "check_secure_mode"]

_WORD = 0xFFFFFFFF


def as_seed_sequence(random_state: RandomState) -> np.random.SeedSequence:
    """Resolve ``random_state`` into a :class:`numpy.random.SeedSequence`.

    The same int or SeedSequence always gives the same streams. A ``Generator`` is consumed once
    (one 128-bit draw) to seed the sequence, so passing the same generator twice gives different,
    but still reproducible, streams.
    """
    if random_state is None or isinstance(random_state, (int, np.integer)):
        if random_state is not None and int(random_state) < 0:
            raise ValueError(f"random_state must be a non-negative integer, got {random_state}.")
        return np.random.SeedSequence(None if random_state is None else int(random_state))
    if isinstance(random_state, np.random.SeedSequence):
        # a fresh copy: spawning from the caller's object would advance its child counter, so
        # fitting twice with the same SeedSequence would give different streams
        return np.random.SeedSequence(random_state.entropy, spawn_key=random_state.spawn_key,
                                      pool_size=random_state.pool_size)
    if isinstance(random_state, np.random.Generator):
        return np.random.SeedSequence(random_state.integers(0, 2**63, size=2).tolist())
    raise TypeError(
        "random_state must be None, an int, a numpy SeedSequence or a numpy Generator; "
        f"got {type(random_state).__name__}."
    )


def spawn_generators(seed: np.random.SeedSequence, n: int, first: int = 0) -> list[np.random.Generator]:
    """Return ``n`` independent generators spawned from ``seed``: its children ``first, ..., first + n - 1``.

    ``first`` is the federation index of the first client these streams belong to: a process
    holding clients ``first ...`` (a Flower node holds one) draws what they draw when all clients
    are held in one process.
    """
    return [np.random.Generator(np.random.PCG64(s)) for s in seed.spawn(first + n)[first:]]


def child_seed(seed: np.random.SeedSequence, index: int) -> np.random.SeedSequence:
    """Child ``index`` of ``seed``, as ``seed.spawn(index + 1)[index]`` gives on a fresh ``seed`` (``seed`` unchanged)."""
    return np.random.SeedSequence(seed.entropy, spawn_key=tuple(seed.spawn_key) + (int(index),), pool_size=seed.pool_size)


def child_entropy(seed: np.random.SeedSequence) -> np.ndarray:
    """The entropy words numpy's ``SeedSequence`` mixes for every child of ``seed``, before the child's own index.

    A child ``SeedSequence(seed.entropy, spawn_key=seed.spawn_key + (i,))`` assembles its entropy as
    the 32-bit words of ``seed.entropy`` (zero-padded to ``pool_size`` words, as numpy pads when there
    is a spawn key), then those of the spawn key; the words of ``i`` come last
    (:func:`privfedstat.kernels.pcg64_nb.pcg64_children` adds them and hashes every child at once).
    """
    run = _uint32_words(seed.entropy)
    run += [0] * max(0, seed.pool_size - len(run))
    return np.array(run + _uint32_words(seed.spawn_key), dtype=np.uint32)


def _uint32_words(value) -> list[int]:
    """A SeedSequence's entropy or spawn key as numpy coerces it: each int's 32-bit words, least significant first."""
    if value is None:
        return []
    words: list[int] = []
    for v in ([value] if isinstance(value, (int, np.integer)) else value):
        v = int(v)
        words.append(v & _WORD)
        v >>= 32
        while v:
            words.append(v & _WORD)
            v >>= 32
    return words


def check_secure_mode(secure_mode: bool, random_state: RandomState) -> bool:
    """Validate ``secure_mode`` against ``random_state``; return ``secure_mode``.

    Secure mode draws its noise from the operating system's CSPRNG, so an explicit seed (an int,
    a SeedSequence or a Generator) would be ignored at best and, where it seeded anything, would
    let whoever knows it reproduce the noise. It is refused with an error rather than ignored.
    """
    if not isinstance(secure_mode, (bool, np.bool_)):
        raise TypeError(f"secure_mode must be True or False, got {secure_mode!r}.")
    if secure_mode and random_state is not None:
        raise ValueError(
            f"secure_mode=True takes its randomness from the operating system, so random_state must be "
            f"None, got a {type(random_state).__name__}: a known seed would let anyone who knows it "
            "reproduce and subtract the noise. Use secure_mode=False for reproducible fits."
        )
    return bool(secure_mode)
