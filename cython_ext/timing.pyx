"""The timing loop: warm-up, then per-iteration timing, all in C.

sync mode (default, OSU/IMB style): barrier, MPI_Wtime, the call, MPI_Wtime.
pipelined mode: the calls back to back, each timed locally, no barrier.
An iteration's time is the maximum over ranks (the honest cross-rank reduction).
"""
from libc.math cimport ceil
from libc.stdint cimport int64_t
from mpi4py.libmpi cimport *
from mpi4py.MPI cimport Comm

import numpy as np

from cython_ext.core cimport CollOp, check_mpi

MODES = ("sync", "pipelined")


def time_op(CollOp op, Comm comm, str mode="sync", int warmup=5, int iters=20,
            int min_iters=1, double budget_s=0.0):
    """Per-iteration seconds (max over ranks), shape (n,), with n <= iters.

    With a time budget, n is chosen after the warm-up from its slowest rank so
    that n * iteration time stays within the budget, but never below min_iters.
    Every rank reaches the same n, so no extra synchronisation enters the loop.
    """
    if mode not in MODES:
        raise ValueError(f"timing mode must be one of {MODES}, got {mode!r}")
    cdef bint sync = mode == "sync"
    cdef MPI_Comm c = comm.ob_mpi
    cdef int i, n = iters
    cdef double t0, warm_s = 0.0, per_iter
    with nogil:
        check_mpi(MPI_Barrier(c))
        t0 = MPI_Wtime()
        for i in range(warmup):
            if sync:
                check_mpi(MPI_Barrier(c))
            op.run()
        warm_s = MPI_Wtime() - t0
        check_mpi(MPI_Allreduce(MPI_IN_PLACE, &warm_s, 1, MPI_DOUBLE, MPI_MAX, c))
    if budget_s > 0 and warmup > 0:
        per_iter = warm_s / warmup
        if per_iter > 0:
            n = <int>min(<double>iters, max(<double>min_iters, ceil(budget_s / per_iter)))
    n = max(n, 1)
    samples = np.empty(n, dtype=np.float64)
    cdef double[::1] t = samples
    with nogil:
        check_mpi(MPI_Barrier(c))
        for i in range(n):
            if sync:
                check_mpi(MPI_Barrier(c))
            t0 = MPI_Wtime()
            op.run()
            t[i] = MPI_Wtime() - t0
        check_mpi(MPI_Allreduce(MPI_IN_PLACE, &t[0], n, MPI_DOUBLE, MPI_MAX, c))
    return samples
