"""The timing loop for device ops: cython_ext/timing.pyx's protocol, with the stream in the window.

sync mode: barrier, MPI_Wtime, the call, stream synchronisation, MPI_Wtime.
pipelined mode: the same without the barrier. An iteration's time is the maximum
over ranks. Device ops are Python callables (CuPy launches kernels from Python), so
this loop is Python too; host ops keep the Cython loop.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

MODES = ("sync", "pipelined")


def iterations(iters: int, min_iters: int, budget_s: float, warm_s: float, warmup: int) -> int:
    """As the Cython loop: fit ``budget_s`` from the slowest rank's warm-up, within [min_iters, iters]."""
    n = iters
    if budget_s > 0 and warmup > 0:
        per_iter = warm_s / warmup
        if per_iter > 0:
            n = int(min(iters, max(min_iters, math.ceil(budget_s / per_iter))))
    return max(n, 1)


def time_device_op(op: Callable[[], None], synchronize: Callable[[], None], comm, mode: str = "sync",
                   warmup: int = 5, iters: int = 20, min_iters: int = 1, budget_s: float = 0.0) -> np.ndarray:
    """Per-iteration seconds (max over ranks), shape (n,), n <= iters; every rank reaches the same n."""
    from mpi4py import MPI

    if mode not in MODES:
        raise ValueError(f"timing mode must be one of {MODES}, got {mode!r}")
    barrier = comm.Barrier if mode == "sync" else (lambda: None)
    synchronize()
    comm.Barrier()
    start = MPI.Wtime()
    for _ in range(warmup):
        barrier()
        op()
        synchronize()
    warm_s = comm.allreduce(MPI.Wtime() - start, op=MPI.MAX)
    n = iterations(iters, min_iters, budget_s, warm_s, warmup)
    samples = np.empty(n, dtype=np.float64)
    wtime = MPI.Wtime
    comm.Barrier()
    for i in range(n):
        barrier()
        start = wtime()
        op()
        synchronize()
        samples[i] = wtime() - start
    comm.Allreduce(MPI.IN_PLACE, samples, op=MPI.MAX)
    return samples
