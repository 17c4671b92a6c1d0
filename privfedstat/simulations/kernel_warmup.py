"""Compile the numba kernels of a parallel study once, in two processes, before its workers start.

Every loky worker of a :class:`~privfedstat.simulations.MonteCarlo` run compiles the kernels it calls
(``cache=True`` writes them to numba's cache only once compiled), so on a fresh clone two workers
compile the same four kernels side by side: 13.6 s of compilation each (measured one after another,
``benchmarks/RESULTS.md``, "The demo cold"). Here two processes compile two halves of about
equal cost into the cache, and the workers then load them (0.5 s). A kernel already in the cache is
not compiled again. The signatures are those every GLM study calls (read-only design arrays);
a kernel called with another signature is compiled by the worker as before.
"""

from __future__ import annotations

import multiprocessing
import os
import threading

__all__ = ["warm_kernels"]


def _shares():
    """The kernels and signatures, in two shares of about equal compile time (6.3 s; 3.3 + 0.9 + 3.1 s)."""
    from numba import types as T

    from ..kernels import glm_nb, pcg64_nb

    def arr(dtype, ndim, readonly):
        return T.Array(dtype, ndim, "C", readonly=readonly)

    f8, i8 = T.float64, T.int64
    rows = (arr(f8, 2, True), arr(f8, 1, True), arr(f8, 1, True), arr(f8, 1, True), arr(i8, 1, True),
            arr(f8, 2, False), f8, i8, f8)
    return ([(glm_nb.glm_clipped_mean_grad_cols, rows + (arr(f8, 2, False),))],
            [(glm_nb.glm_client_hessian, rows + (arr(f8, 3, False), f8)),
             (pcg64_nb._normals, (arr(T.uint64, 2, False), arr(f8, 2, False))),
             (pcg64_nb.pcg64_children, (arr(T.uint32, 1, False), i8, i8, i8))])


def _cached(dispatcher) -> bool:
    try:
        return os.path.exists(dispatcher._cache._cache_file._index_path)
    except AttributeError:  # another numba: compile (the cache then answers)
        return False


def _compile(share: int) -> None:
    for dispatcher, signature in _shares()[share]:
        dispatcher.compile(signature)


def warm_kernels() -> None:
    """Compile the kernels not yet in numba's cache in two processes (nothing if all are cached): forked when this
    process runs one thread (a fork copies no other thread's locks), else spawned (they import the kernels)."""
    todo = [i for i, share in enumerate(_shares()) if not all(_cached(f) for f, _ in share)]
    if not todo:
        return
    fork = "fork" in multiprocessing.get_all_start_methods() and threading.active_count() == 1
    ctx = multiprocessing.get_context("fork" if fork else "spawn")
    procs = [ctx.Process(target=_compile, args=(i,)) for i in todo]
    for p in procs:
        p.start()
    for p in procs:
        p.join()
