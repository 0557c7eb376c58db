"""The timing loop: warm-up, then per-iteration timing, all in C. One loop for one op (a cell)
and for up to ``MAX_OPS`` ops timed in turns (the arms of a cell); every mode is an option of it.

How each timed call starts (``mode``):

* ``sync`` (default, OSU/IMB style): a barrier, then the call; its time is its own span.
* ``pipelined``: the calls back to back, each timed locally, no barrier.
* ``window`` (ReproMPI style): every rank starts call k at the same common time, first + k x
  window, on clocks synchronised before the cell (cython_ext/clock.pyx); the call's time is the
  latest finish over ranks minus that start. A barrier lets ranks go at different times (up to
  about one link latency across a slow link), which can hide a one-step difference between
  schedules; a common start does not. A window holds three median warm-up calls (at least the
  median and 50 us); a call some rank began later than its window allowed (5% of it, at least
  10 us: the previous call overran, a rank was descheduled) is dropped and counted, and when more
  than half of a batch are, the windows double (to at most 16 times their first length).

An iteration's time is the maximum over ranks (the honest cross-rank reduction). With a common
clock (always in window mode; in the others when the caller passes one) each iteration's start
skew, the latest start minus the earliest over ranks, is measured too.

``measure`` times one op, or several in turns, as a plan (collectives/timing_plan.py ``TimingPlan``)
says; its options, without the GIL in the loop:

* warm-up until stable (``max_warmup`` > 0): after the fixed warm-up, timed warm-up batches until
  a batch's median is within ``warm_tol`` of the previous one (at most ``max_warmup`` iterations,
  at most the time budget); what was discarded (iterations, the slowest of them) is reported;
* an adaptive stop (``target_ci`` > 0, hyperfine/asv style): timed batches until the
  distribution-free 95% interval of the median is within +-``target_ci`` of it, the time budget
  (the sum of the samples; in window mode, of the windows) is spent, or ``iters`` is reached,
  never below ``min_iters``;
* with neither (and not in window mode), one batch of the count the budget allows at the
  warm-up's pace, never below ``min_iters``.

Why the warm-up and the timed loop stopped are the enums ``Warm`` and ``Stop``; the rows carry
their names (``WARMUP_REASONS``, ``STOP_REASONS``).

Every decision is taken from samples already reduced over ranks, so every rank reaches the same
one with no extra synchronisation.
"""
from libc.math cimport NAN, ceil
from libc.stdlib cimport free, malloc
from posix.time cimport nanosleep, timespec

from mpi4py.libmpi cimport *
from mpi4py.MPI cimport Comm

import numpy as np

from collectives.timing_plan import MAX_TURNS, MODES, TimingPlan

from cython_ext.clock cimport SyncedClock, global_now
from cython_ext.core cimport CollOp, check_mpi
from cython_ext.order_stats cimport median, median_ci_rel
from cython_ext.order_stats import ci_of, skew_info
from cython_ext.windows cimport drop_missed, open_windows, resize_windows, size_windows
from cython_ext.wait cimport sched_yield

#: the name a row carries for each reason of timing.pxd (the tidy table's stop_reason / warmup_reason values)
STOP_NAMES = {STOP_PRECISION: "precision", STOP_BUDGET: "budget", STOP_ITERS: "iters", STOP_FIXED: "fixed"}
WARMUP_NAMES = {WARM_FIXED: "fixed", WARM_STABLE: "stable", WARM_MAX: "max_warmup", WARM_BUDGET: "budget"}
#: the names, in the order of the enums
STOP_REASONS = tuple(STOP_NAMES[code] for code in sorted(STOP_NAMES))
WARMUP_REASONS = tuple(WARMUP_NAMES[code] for code in sorted(WARMUP_NAMES))
if MAX_OPS != 4 or MAX_TURNS != MAX_OPS:
    raise ImportError(f"cython_ext.timing: _Ops holds 4 ops, MAX_OPS is {MAX_OPS}, the plan's MAX_TURNS {MAX_TURNS}")
cdef dict MODE_CODES = {"sync": SYNC, "pipelined": PIPELINED, "window": WINDOW}
if set(MODE_CODES) != set(MODES):
    raise ImportError(f"cython_ext.timing: its Mode enum has {sorted(MODE_CODES)}, the plan's modes are {MODES}")


cdef Mode _mode(str mode) except *:
    if mode not in MODE_CODES:
        raise ValueError(f"timing mode must be one of {MODES}, got {mode!r}")
    return MODE_CODES[mode]


cdef inline double _now(Starts *s) noexcept nogil:
    return global_now(s.clock) if s.clock != NULL else MPI_Wtime()


cdef inline double _begin(MPI_Comm c, Starts *s, int k) except? -1.0 nogil:
    """Wait for call number ``k`` of the batch to be due (a barrier, or its window opening), and
    the time it begins. A wait of milliseconds sleeps first, then polls the clock, yielding the
    core between reads: a rank that spins would hold a core that a peer of an oversubscribed
    machine needs to reach its own start (sched_yield returns at once where nothing else waits)."""
    cdef double due, left
    cdef timespec pause
    if s.mode == SYNC:
        check_mpi(MPI_Barrier(c))
    elif s.mode == WINDOW:
        due = s.first + k * s.window
        left = due - global_now(s.clock)
        if left > 2e-3:
            left -= 1e-3
            pause.tv_sec = <long>left
            pause.tv_nsec = <long>((left - pause.tv_sec) * 1e9)
            nanosleep(&pause, NULL)
        while global_now(s.clock) < due:
            sched_yield()
    return _now(s)


cdef class _Ops:
    """The ops of one loop, callable by index without the GIL (a C array cannot hold Python objects)."""
    cdef CollOp op0, op1, op2, op3
    cdef int n

    def __cinit__(self, tuple ops):
        self.n = len(ops)
        self.op0 = ops[0]
        self.op1 = ops[min(1, self.n - 1)]  # unused slots repeat the last op; never called
        self.op2 = ops[min(2, self.n - 1)]
        self.op3 = ops[min(3, self.n - 1)]

    cdef inline int call(self, int j) except -1 nogil:
        if j == 0:
            return self.op0.run()
        if j == 1:
            return self.op1.run()
        if j == 2:
            return self.op2.run()
        return self.op3.run()


cdef int _batch(_Ops ops, int nops, MPI_Comm c, Starts *s, double **t, double **skew, int at,
                double *work, int count) except -1 nogil:
    """``count`` turns of the ``nops`` ops (turn i starts with op i % nops and goes round: with two,
    ABBA..., so no op always goes first) into
    t[j][at + i], the time of op j's i-th call (max over ranks; -1 where its window was missed),
    and skew[j][at + i], its start skew (nan without a clock). ``work``: 2 x nops x count doubles.
    """
    cdef int i, j, k, slot, calls = nops * count
    cdef double start, end, due
    cdef double *late = work             # per call: the start (window: after the due time)
    cdef double *early = work + calls    # per call: minus the start, for the minimum
    open_windows(c, s)
    for i in range(count):
        for k in range(nops):
            j = (i + k) % nops
            slot = i * nops + k
            start = _begin(c, s, slot)
            ops.call(j)
            end = _now(s)
            # window: the finish; its max over ranks, minus the common start, is the call's time
            t[j][at + i] = end if s.mode == WINDOW else end - start
            late[slot] = start
            early[slot] = -start
    for j in range(nops):
        check_mpi(MPI_Allreduce(MPI_IN_PLACE, t[j] + at, count, MPI_DOUBLE, MPI_MAX, c))
    if s.clock == NULL:
        for j in range(nops):
            for i in range(count):
                skew[j][at + i] = NAN
        return 0
    check_mpi(MPI_Allreduce(MPI_IN_PLACE, work, 2 * calls, MPI_DOUBLE, MPI_MAX, c))
    for i in range(count):
        for k in range(nops):
            j = (i + k) % nops
            slot = i * nops + k
            skew[j][at + i] = late[slot] + early[slot]
            if s.mode == WINDOW:
                due = s.first + slot * s.window
                t[j][at + i] -= due
                if late[slot] - due > s.tolerance:
                    t[j][at + i] = -1.0
    return 0


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


cdef int _warm_up(_Ops ops, int nops, MPI_Comm c, Starts *s, Plan *p, Outcome *o, double **w,
                  double **ws, double *work, double *scratch) except -1 nogil:
    """The fixed warm-up, then warm-up batches until two agree (for every op)."""
    cdef int i, j, batch, kept, wbatch = max(p.warmup, 5)
    cdef double previous[MAX_OPS]
    cdef double current, call_s, warm_spent = 0.0
    cdef bint agreed
    cdef double t0, began
    for j in range(nops):
        previous[j] = -1.0
    check_mpi(MPI_Barrier(c))
    began = MPI_Wtime()
    for i in range(p.warmup):
        for j in range(nops):
            if s.mode != PIPELINED:
                check_mpi(MPI_Barrier(c))
            t0 = MPI_Wtime()
            ops.call(j)
            w[j][i] = MPI_Wtime() - t0
    o.warm_done = p.warmup
    o.warm_call_s = (MPI_Wtime() - began) / p.warmup if p.warmup > 0 else 0.0
    check_mpi(MPI_Allreduce(MPI_IN_PLACE, &o.warm_call_s, 1, MPI_DOUBLE, MPI_MAX, c))
    # the windows start from the median warm-up call (the slowest rank's): the first calls of a
    # cell can take 10^4 times a warm one
    call_s = 0.0
    for j in range(nops):
        if p.warmup > 0:
            call_s = max(call_s, median(w[j], p.warmup, scratch))
    check_mpi(MPI_Allreduce(MPI_IN_PLACE, &call_s, 1, MPI_DOUBLE, MPI_MAX, c))
    size_windows(s, call_s)
    # warm-up until two batches agree: the first calls of a cell (lazy set-up in the MPI library,
    # page faults, a rank still arriving) can take 10^4 times a warm call
    while p.max_warmup > 0:
        batch = min(wbatch, p.max_warmup + p.warmup - o.warm_done)
        if batch <= 0:
            o.warm_reason = WARM_MAX
            break
        _batch(ops, nops, c, s, w, ws, 0, work, batch)
        o.warm_done += batch
        kept = batch
        if s.mode == WINDOW:
            kept = drop_missed(w, ws, nops, 0, batch)
            resize_windows(s, kept, batch - kept)
        agreed = kept > 0
        for j in range(nops):
            warm_spent += _account(w[j], kept, &o.slowest) if s.mode != WINDOW else batch * s.window
            current = median(w[j], kept, scratch) if kept > 0 else -1.0
            agreed = agreed and _agrees(current, previous[j], p.warm_tol)
            previous[j] = current
        if agreed:
            o.warm_reason = WARM_STABLE
            break
        if p.budget_s > 0 and warm_spent >= nops * p.budget_s:
            o.warm_reason = WARM_BUDGET
            break
    return 0


cdef int _timed(_Ops ops, int nops, MPI_Comm c, Starts *s, Plan *p, Outcome *o, double **t,
                double **skew, double *work, double *scratch) except -1 nogil:
    """Timed batches until the precision, the budget or the cap (for every op). Without a precision
    target or a warm-up until stable, one batch of a count fixed after the warm-up: as many as
    the budget allows at the warm-up's pace, never below ``min_iters`` (not in window mode, whose
    windows are sized batch by batch)."""
    cdef int i, j, batch = p.lowest, kept, missed
    cdef double spent = 0.0, rel
    cdef bint precise, fixed = p.target_ci <= 0 and p.max_warmup <= 0 and s.mode != WINDOW
    if fixed:
        batch = p.cap
        if p.budget_s > 0 and o.warm_call_s > 0:
            batch = <int>min(<double>p.cap, max(<double>p.lowest, ceil(nops * p.budget_s / o.warm_call_s)))
    while True:
        batch = min(batch, p.cap - o.attempted)
        _batch(ops, nops, c, s, t, skew, o.n, work, batch)
        o.attempted += batch
        if s.mode == WINDOW:
            spent += nops * batch * s.window
            kept = drop_missed(t, skew, nops, o.n, batch)
            missed = batch - kept
            o.missed += missed
            resize_windows(s, kept, missed)
            batch = kept
        else:
            for j in range(nops):
                for i in range(batch):
                    spent += t[j][o.n + i]
        o.n += batch
        if fixed:
            o.stop_reason = STOP_FIXED
            break
        precise = p.target_ci > 0 and o.n >= p.lowest
        for j in range(nops):
            rel = median_ci_rel(t[j], o.n, scratch) if p.target_ci > 0 else 1e300
            precise = precise and rel <= p.target_ci
        if precise:
            o.stop_reason = STOP_PRECISION
            break
        if o.attempted >= p.cap:
            o.stop_reason = STOP_ITERS
            break
        if p.budget_s > 0 and spent >= nops * p.budget_s and o.n >= p.lowest:
            o.stop_reason = STOP_BUDGET
            break
        if p.target_ci <= 0 and p.budget_s > 0 and o.n >= p.lowest and o.n > 0:
            # no precision target: the count the budget allows from here
            batch = <int>ceil((nops * p.budget_s - spent) / (spent / o.n))
            if batch < 1:
                o.stop_reason = STOP_BUDGET
                break
        else:
            batch = max(8, o.n // 4)
    if p.target_ci <= 0 and p.max_warmup <= 0:
        # no adaptive stop (window mode too, whose batches ended on the budget or the cap)
        o.stop_reason = STOP_FIXED
    return 0


cdef class _Loop:
    """The buffers of one cell's loop (freed with it)."""
    cdef double *block
    cdef double *t[MAX_OPS]
    cdef double *skew[MAX_OPS]
    cdef double *w[MAX_OPS]
    cdef double *ws[MAX_OPS]
    cdef double *work
    cdef double *scratch

    def __cinit__(self, int nops, int cap, int wcap):
        cdef int j, room = max(cap, wcap)
        cdef size_t total = <size_t>(2 * nops * cap + 2 * nops * wcap + 2 * nops * room + room)
        self.block = <double *>malloc(total * sizeof(double))
        if self.block == NULL:
            raise MemoryError("timing loop: buffers")
        for j in range(nops):
            self.t[j] = self.block + j * cap
            self.skew[j] = self.block + (nops + j) * cap
            self.w[j] = self.block + 2 * nops * cap + j * wcap
            self.ws[j] = self.block + 2 * nops * cap + (nops + j) * wcap
        self.work = self.block + 2 * nops * cap + 2 * nops * wcap
        self.scratch = self.work + 2 * nops * room

    def __dealloc__(self):
        free(self.block)


cdef int _rules(Plan *p, plan) except -1:
    """The loop's rules from a TimingPlan (or anything with its fields)."""
    cdef int warmup = plan.warmup, iters = plan.iters, min_iters = plan.min_iters, max_warmup = plan.max_warmup
    p.warmup, p.cap, p.max_warmup = max(warmup, 0), max(iters, 1), max(max_warmup, 0)
    p.lowest = max(min(min_iters, p.cap), 1)
    p.budget_s, p.target_ci, p.warm_tol = plan.budget_s, plan.target_ci, plan.warm_tol
    return 0


def measure(ops, Comm comm, plan=None, SyncedClock clock=None, int clock_rounds=10) -> list:
    """Time one op, or several in turns, as ``plan`` (collectives.timing_plan.TimingPlan; default
    ``TimingPlan()``) says: per op, (per-iteration seconds, max over ranks; info dict).

    ``ops``: a CollOp (one cell), or a tuple of one to MAX_OPS. Several (the arms of one cell,
    same-job comparison) are timed in turns, iteration by iteration, each turn starting with the
    next op: every change of the machine's speed lands on all alike; the plan's rules hold for
    every one (precision: every interval narrow enough; the budget is per op). A clock (cython_ext/clock.pyx, needed in window mode) is synchronised
    first, in ``clock_rounds`` rounds.

    ``info`` holds ``stop_reason`` (``STOP_REASONS``; "fixed" without a precision target or a
    warm-up until stable), ``ci_rel`` (the half-width reached, relative; nan when unbounded),
    ``warmup_discarded`` (iterations run before the samples, all ranks alike),
    ``warmup_slowest_us`` (the slowest timed warm-up iteration; nan when none was timed) and
    ``warmup_reason`` (``WARMUP_REASONS``), ``warmup_call_us`` (the fixed warm-up's time per turn of
    all ops, slowest rank's: the pace a fixed count is sized from; nan without a warm-up); with a clock, ``clock_error_us`` and
    ``start_skew_us_p50``/``_p95``; in window mode ``window_us`` and ``window_missed``.
    """
    ops = (ops,) if isinstance(ops, CollOp) else tuple(ops)
    if not 1 <= len(ops) <= MAX_OPS:
        raise ValueError(f"the timing loop times one op or up to {MAX_OPS} in turns, not {len(ops)}")
    plan = TimingPlan() if plan is None else plan
    cdef _Ops loop_ops = _Ops(ops)
    cdef int j, nops = len(ops)
    cdef Starts s
    cdef Plan p
    cdef Outcome o
    cdef MPI_Comm c = comm.ob_mpi
    cdef _Loop buffers
    s.mode = _mode(plan.mode)
    if s.mode == WINDOW and clock is None:
        raise ValueError("window mode needs a SyncedClock")
    if s.mode == WINDOW and plan.warmup < 1:
        raise ValueError("window mode needs a warm-up (its windows are sized from it)")
    s.clock = &clock.model if clock is not None else NULL
    s.clock_error = 0.0
    _rules(&p, plan)
    o.n = o.warm_done = o.missed = o.attempted = 0
    o.warm_reason, o.stop_reason = WARM_FIXED, STOP_FIXED
    o.slowest = -1.0
    buffers = _Loop(nops, p.cap, p.max_warmup + max(p.warmup, 5))
    if clock is not None:
        s.clock_error = clock.sync(comm, clock_rounds)
    with nogil:
        _warm_up(loop_ops, nops, c, &s, &p, &o, buffers.w, buffers.ws, buffers.work, buffers.scratch)
        _timed(loop_ops, nops, c, &s, &p, &o, buffers.t, buffers.skew, buffers.work, buffers.scratch)
    shared = {"stop_reason": STOP_NAMES[o.stop_reason], "warmup_discarded": o.warm_done,
              "warmup_slowest_us": o.slowest * 1e6 if o.slowest >= 0 else float("nan"),
              "warmup_reason": WARMUP_NAMES[o.warm_reason],
              "warmup_call_us": o.warm_call_s * 1e6 if p.warmup > 0 else float("nan")}
    if clock is not None:
        shared["clock_error_us"] = s.clock_error * 1e6
    if s.mode == WINDOW:
        shared["window_us"] = s.window * 1e6
        shared["window_missed"] = o.missed
    out = []
    for j in range(nops):
        samples = np.asarray(<double[:o.n]>buffers.t[j]).copy() if o.n else np.empty(0)
        skews = np.asarray(<double[:o.n]>buffers.skew[j]).copy() if o.n else np.empty(0)
        out.append((samples, {**shared, "ci_rel": ci_of(samples), **skew_info(skews)}))
    return out


def time_op(CollOp op, Comm comm, str mode, int warmup, int iters, int min_iters=1, double budget_s=0.0,
            SyncedClock clock=None):
    """The samples only, for the probes and benchmarks: per-iteration seconds (max over ranks),
    shape (n,), n <= iters, of ``measure`` with a fixed warm-up and no precision target (with a
    time budget, the count the budget allows after the warm-up, never below min_iters)."""
    plan = TimingPlan(mode=mode, warmup=warmup, iters=iters, min_iters=min_iters, budget_s=budget_s,
                      target_ci=0.0, max_warmup=0)
    return measure(op, comm, plan, clock)[0][0]
