"""Window mode's windows: their length from the warm-up, their growth when calls miss them, and the
common time the first of a batch opens at (cython_ext/timing.pyx times the calls in them)."""
from mpi4py.libmpi cimport MPI_Barrier, MPI_Bcast, MPI_Comm, MPI_DOUBLE

from cython_ext.clock cimport global_now
from cython_ext.core cimport check_mpi
from cython_ext.timing cimport WINDOW, Starts


cdef void size_windows(Starts *s, double call_s) noexcept nogil:
    """Window mode: each call's window holds three median calls (``call_s``), at least the
    median and 50 us, and room for the clocks' error; the first window opens after the
    broadcast has reached everyone."""
    s.window = max(3 * call_s, call_s + 50e-6) + 4 * s.clock_error
    s.initial = s.window
    _set_tolerance(s)


cdef void resize_windows(Starts *s, int kept, int missed) noexcept nogil:
    """After a batch: when more than half of its calls missed their windows, the windows double
    (at most to 16 times their first length, 1 s)."""
    if missed * 2 > kept + missed and s.window < min(16 * s.initial, 1.0):
        s.window *= 2
        _set_tolerance(s)


cdef void _set_tolerance(Starts *s) noexcept nogil:
    """A call may begin up to 5% of its window after it opened (at least 10 us: an interrupt or a
    wake-up, far below the link latencies a common start is for); the first window opens after
    the broadcast of its time has reached every rank."""
    s.tolerance = max(0.05 * s.window, 10e-6)
    s.lead = 2 * s.window + 1e-3


cdef int open_windows(MPI_Comm c, Starts *s) except -1 nogil:
    """Window mode: rank 0 picks when the batch's first window opens; everyone learns it."""
    if s.mode != WINDOW:
        check_mpi(MPI_Barrier(c))
        return 0
    s.first = global_now(s.clock) + s.lead
    check_mpi(MPI_Bcast(&s.first, 1, MPI_DOUBLE, 0, c))
    return 0


cdef int drop_missed(double **t, double **skew, int nops, int start, int count) noexcept nogil:
    """Keep the turns whose calls all met their windows, moved to the front of [start, start +
    count); how many were kept."""
    cdef int i, j, kept = start
    cdef bint whole
    for i in range(start, start + count):
        whole = True
        for j in range(nops):
            if t[j][i] < 0:
                whole = False
        if whole:
            for j in range(nops):
                t[j][kept] = t[j][i]
                skew[j][kept] = skew[j][i]
            kept += 1
    return kept - start
