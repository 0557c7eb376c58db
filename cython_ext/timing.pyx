"""The timing loop: warm-up, then per-iteration timing, all in C.

sync mode (default, OSU/IMB style): barrier, MPI_Wtime, the call, MPI_Wtime.
pipelined mode: the calls back to back, each timed locally, no barrier.
An iteration's time is the maximum over ranks (the honest cross-rank reduction).

``time_cell`` adds, without the GIL in the loop:

* warm-up until stable: after the fixed warm-up, timed warm-up batches until a batch's median
  is within ``warm_tol`` of the previous one (at most ``max_warmup`` iterations, at most the
  time budget); what was discarded (iterations, the slowest of them) is reported;
* an adaptive stop (hyperfine/asv style): timed batches until the distribution-free 95%
  interval of the median is within +-``target_ci`` of it, the time budget (the sum of the
  samples) is spent, or ``iters`` is reached, never below ``min_iters``; why it stopped is
  reported.

Every decision is taken from samples already reduced over ranks (max), so every rank reaches
the same one with no extra synchronisation.
"""
from libc.math cimport ceil, floor, sqrt
from libc.stdlib cimport free, malloc, qsort
from libc.string cimport memcpy
from mpi4py.libmpi cimport *
from mpi4py.MPI cimport Comm

import numpy as np

from cython_ext.core cimport CollOp, check_mpi

MODES = ("sync", "pipelined")
#: why a cell's timed loop stopped
STOP_REASONS = ("precision", "budget", "iters", "fixed")
#: why the warm-up stopped: "fixed" (warm-up count only), "stable", "max_warmup", "budget"
WARMUP_REASONS = ("fixed", "stable", "max_warmup", "budget")
#: 97.5% normal quantile: the order-statistic interval of the median is two-sided 95%
cdef double Z95 = 1.959964


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


cdef int _compare(const void *a, const void *b) noexcept nogil:
    cdef double x = (<double *>a)[0]
    cdef double y = (<double *>b)[0]
    return (x > y) - (x < y)


cdef double _sorted_median(double *s, int n) noexcept nogil:
    if n % 2:
        return s[n // 2]
    return 0.5 * (s[n // 2 - 1] + s[n // 2])


cdef double _median(double *x, int n, double *scratch) noexcept nogil:
    memcpy(scratch, x, n * sizeof(double))
    qsort(scratch, n, sizeof(double), _compare)
    return _sorted_median(scratch, n)


cdef double _median_ci_rel(double *x, int n, double *scratch) noexcept nogil:
    """Half-width of the distribution-free 95% interval of the median (order statistics
    n/2 -+ z sqrt(n)/2), relative to the median; 1e300 when n is too small to bound it."""
    cdef int lo, hi
    cdef double med
    memcpy(scratch, x, n * sizeof(double))
    qsort(scratch, n, sizeof(double), _compare)
    lo = <int>floor(0.5 * n - 0.5 * Z95 * sqrt(<double>n)) - 1
    hi = <int>ceil(0.5 * n + 0.5 * Z95 * sqrt(<double>n))
    med = _sorted_median(scratch, n)
    if lo < 0 or hi > n - 1 or med <= 0:
        return 1e300
    return 0.5 * (scratch[hi] - scratch[lo]) / med


cdef inline bint _agrees(double now, double before, double tol) noexcept nogil:
    """Two warm-up batch medians within a factor 1 + tol of each other (before > 0: there was one)."""
    return before > 0 and now <= before * (1.0 + tol) and now >= before / (1.0 + tol)


cdef inline double _account(const double *w, int count, double *slowest) noexcept nogil:
    """The sum of a warm-up batch's times; ``slowest`` raised to its slowest one."""
    cdef double total = 0.0
    cdef int i
    for i in range(count):
        total += w[i]
        if w[i] > slowest[0]:
            slowest[0] = w[i]
    return total


cdef int _timed_batch(CollOp op, MPI_Comm c, bint sync, double *t, int count) except -1 nogil:
    """``count`` timed iterations into t[0:count], then the max over ranks, in place."""
    cdef int i
    cdef double t0
    check_mpi(MPI_Barrier(c))
    for i in range(count):
        if sync:
            check_mpi(MPI_Barrier(c))
        t0 = MPI_Wtime()
        op.run()
        t[i] = MPI_Wtime() - t0
    check_mpi(MPI_Allreduce(MPI_IN_PLACE, t, count, MPI_DOUBLE, MPI_MAX, c))
    return 0


def time_cell(CollOp op, Comm comm, str mode="sync", int warmup=5, int iters=20, int min_iters=1,
              double budget_s=0.0, double target_ci=0.0, int max_warmup=0, double warm_tol=0.1):
    """(per-iteration seconds, max over ranks; info dict) of one cell.

    ``target_ci`` 0 and ``max_warmup`` 0: exactly ``time_op`` (a number of iterations fixed
    after the warm-up from the budget). Otherwise see the module's doc. ``info`` holds
    ``stop_reason``, ``ci_rel`` (the half-width reached, relative; nan when unbounded),
    ``warmup_discarded`` (iterations run before the samples, all ranks alike),
    ``warmup_slowest_us`` (the slowest timed warm-up iteration; nan when none was timed) and
    ``warmup_reason``.
    """
    if mode not in MODES:
        raise ValueError(f"timing mode must be one of {MODES}, got {mode!r}")
    if target_ci <= 0 and max_warmup <= 0:
        samples = time_op(op, comm, mode, warmup, iters, min_iters, budget_s)
        return samples, {"stop_reason": "fixed", "ci_rel": _ci_of(samples), "warmup_discarded": max(warmup, 0),
                         "warmup_slowest_us": float("nan"), "warmup_reason": "fixed"}
    cdef bint sync = mode == "sync"
    cdef MPI_Comm c = comm.ob_mpi
    cdef int i, n = 0, batch, wbatch, warm_done = 0, wreason = 0, sreason = 0, cap = max(iters, 1)
    cdef int lowest = max(min(min_iters, cap), 1)
    cdef double spent = 0.0, warm_spent = 0.0, previous = -1.0, current, slowest = -1.0, rel = 1e300
    wbatch = max(warmup, 5)
    cdef int wcap = max(max_warmup, 0) + wbatch
    cdef double *w = <double *>malloc(wcap * sizeof(double))
    cdef double *scratch = <double *>malloc(max(cap, wcap) * sizeof(double))
    samples = np.empty(cap, dtype=np.float64)
    cdef double[::1] t = samples
    if w == NULL or scratch == NULL:
        free(w)
        free(scratch)
        raise MemoryError("time_cell: scratch buffers")
    try:
        with nogil:
            check_mpi(MPI_Barrier(c))
            for i in range(warmup):
                if sync:
                    check_mpi(MPI_Barrier(c))
                op.run()
            warm_done = warmup
            # warm-up until two batches agree: the first calls of a cell (lazy set-up in the MPI
            # library, page faults, a rank still arriving) can take 10^4 times a warm call
            while max_warmup > 0:
                batch = min(wbatch, max_warmup + warmup - warm_done)
                if batch <= 0:
                    wreason = 2
                    break
                _timed_batch(op, c, sync, w, batch)
                warm_done += batch
                warm_spent += _account(w, batch, &slowest)
                current = _median(w, batch, scratch)
                if _agrees(current, previous, warm_tol):
                    wreason = 1
                    break
                previous = current
                if budget_s > 0 and warm_spent >= budget_s:
                    wreason = 3
                    break
            # the timed batches: the first reaches min_iters, the later ones grow by a quarter
            batch = lowest
            while True:
                batch = min(batch, cap - n)
                _timed_batch(op, c, sync, &t[n], batch)
                for i in range(batch):
                    spent += t[n + i]
                n += batch
                if target_ci > 0:
                    rel = _median_ci_rel(&t[0], n, scratch)
                if n >= lowest and target_ci > 0 and rel <= target_ci:
                    sreason = 0
                    break
                if n >= cap:
                    sreason = 2
                    break
                if budget_s > 0 and spent >= budget_s and n >= lowest:
                    sreason = 1
                    break
                if target_ci <= 0 and budget_s > 0 and n >= lowest:
                    # no precision target: as time_op, the count the budget allows from here
                    batch = <int>ceil((budget_s - spent) / (spent / n))
                    if batch < 1:
                        sreason = 1
                        break
                else:
                    batch = max(8, n // 4)
    finally:
        free(w)
        free(scratch)
    samples = samples[:n].copy()
    info = {"stop_reason": STOP_REASONS[sreason], "ci_rel": _ci_of(samples), "warmup_discarded": warm_done,
            "warmup_slowest_us": slowest * 1e6 if slowest >= 0 else float("nan"),
            "warmup_reason": WARMUP_REASONS[wreason] if max_warmup > 0 else "fixed"}
    return samples, info


def _ci_of(samples) -> float:
    """Relative half-width of the median's distribution-free 95% interval; nan when unbounded."""
    cdef double[::1] x = np.ascontiguousarray(samples, dtype=np.float64)
    cdef int n = x.shape[0]
    if n < 1:
        return float("nan")
    scratch = np.empty(n, dtype=np.float64)
    cdef double[::1] s = scratch
    cdef double rel = _median_ci_rel(&x[0], n, &s[0])
    return float("nan") if rel >= 1e299 else float(rel)


cdef int _timed_turns(CollOp a, CollOp b, MPI_Comm c, bint sync, double *ta, double *tb, int count) except -1 nogil:
    """``count`` turns of both ops, timed each (order ABBA...: neither arm always goes first), then
    the max over ranks of both arrays."""
    cdef int i, j
    cdef double t0
    check_mpi(MPI_Barrier(c))
    for i in range(count):
        for j in range(2):
            if sync:
                check_mpi(MPI_Barrier(c))
            t0 = MPI_Wtime()
            if (i + j) % 2 == 0:
                a.run()
                ta[i] = MPI_Wtime() - t0
            else:
                b.run()
                tb[i] = MPI_Wtime() - t0
    check_mpi(MPI_Allreduce(MPI_IN_PLACE, ta, count, MPI_DOUBLE, MPI_MAX, c))
    check_mpi(MPI_Allreduce(MPI_IN_PLACE, tb, count, MPI_DOUBLE, MPI_MAX, c))
    return 0


def time_turns(CollOp a, CollOp b, Comm comm, str mode="sync", int warmup=5, int iters=20, int min_iters=1,
               double budget_s=0.0, double target_ci=0.0, int max_warmup=0, double warm_tol=0.1):
    """Two arms of one cell timed in turns, iteration by iteration (same-job comparison): every
    change of the machine's speed lands on both alike. (samples of a, samples of b, info); the
    rules of ``time_cell``, applied to both (precision: both intervals narrow enough; the budget
    is per arm)."""
    if mode not in MODES:
        raise ValueError(f"timing mode must be one of {MODES}, got {mode!r}")
    cdef bint sync = mode == "sync"
    cdef MPI_Comm c = comm.ob_mpi
    cdef int i, n = 0, batch, warm_done = 0, wreason = 0, sreason = 0, cap = max(iters, 1)
    cdef int lowest = max(min(min_iters, cap), 1)
    cdef int wbatch = max(warmup, 5)
    cdef int wcap = max(max_warmup, 0) + wbatch
    cdef double spent = 0.0, warm_spent = 0.0, pa = -1.0, pb = -1.0, ca, cb, slowest = -1.0
    cdef double ra = 1e300, rb = 1e300
    cdef double *wa = <double *>malloc(wcap * sizeof(double))
    cdef double *wb = <double *>malloc(wcap * sizeof(double))
    cdef double *scratch = <double *>malloc(max(cap, wcap) * sizeof(double))
    first = np.empty(cap, dtype=np.float64)
    second = np.empty(cap, dtype=np.float64)
    cdef double[::1] ta = first
    cdef double[::1] tb = second
    if wa == NULL or wb == NULL or scratch == NULL:
        free(wa)
        free(wb)
        free(scratch)
        raise MemoryError("time_turns: scratch buffers")
    try:
        with nogil:
            check_mpi(MPI_Barrier(c))
            for i in range(warmup):
                if sync:
                    check_mpi(MPI_Barrier(c))
                a.run()
                if sync:
                    check_mpi(MPI_Barrier(c))
                b.run()
            warm_done = warmup
            while max_warmup > 0:
                batch = min(wbatch, max_warmup + warmup - warm_done)
                if batch <= 0:
                    wreason = 2
                    break
                _timed_turns(a, b, c, sync, wa, wb, batch)
                warm_done += batch
                warm_spent += _account(wa, batch, &slowest) + _account(wb, batch, &slowest)
                ca = _median(wa, batch, scratch)
                cb = _median(wb, batch, scratch)
                if _agrees(ca, pa, warm_tol) and _agrees(cb, pb, warm_tol):
                    wreason = 1
                    break
                pa = ca
                pb = cb
                if budget_s > 0 and warm_spent >= 2 * budget_s:
                    wreason = 3
                    break
            batch = lowest
            while True:
                batch = min(batch, cap - n)
                _timed_turns(a, b, c, sync, &ta[n], &tb[n], batch)
                for i in range(batch):
                    spent += ta[n + i] + tb[n + i]
                n += batch
                if target_ci > 0:
                    ra = _median_ci_rel(&ta[0], n, scratch)
                    rb = _median_ci_rel(&tb[0], n, scratch)
                if n >= lowest and target_ci > 0 and ra <= target_ci and rb <= target_ci:
                    sreason = 0
                    break
                if n >= cap:
                    sreason = 2
                    break
                if budget_s > 0 and spent >= 2 * budget_s and n >= lowest:
                    sreason = 1
                    break
                batch = max(8, n // 4)
    finally:
        free(wa)
        free(wb)
        free(scratch)
    first = first[:n].copy()
    second = second[:n].copy()
    common = {"stop_reason": STOP_REASONS[sreason], "warmup_discarded": warm_done,
              "warmup_slowest_us": slowest * 1e6 if slowest >= 0 else float("nan"),
              "warmup_reason": WARMUP_REASONS[wreason] if max_warmup > 0 else "fixed"}
    return first, second, [{**common, "ci_rel": _ci_of(first)}, {**common, "ci_rel": _ci_of(second)}]
