# Synchronised clocks for the window timing mode (cython_ext/clock.pyx): what the timing loop
# reads without the GIL.
from mpi4py.libmpi cimport MPI_Wtime


cdef struct ClockModel:
    # this rank's clock: local = MPI_Wtime() * (1 + fake_drift) + fake_offset, where the fake
    # terms are a synthetic skew for tests (0 otherwise); the common ("global") time, rank 0's
    # clock, is local - offset - drift * (local - anchor)
    double fake_offset
    double fake_drift
    double offset
    double drift
    double anchor


cdef inline double local_now(const ClockModel *m) noexcept nogil:
    return MPI_Wtime() * (1.0 + m.fake_drift) + m.fake_offset


cdef inline double global_of(const ClockModel *m, double local) noexcept nogil:
    return local - m.offset - m.drift * (local - m.anchor)


cdef inline double global_now(const ClockModel *m) noexcept nogil:
    return global_of(m, local_now(m))


cdef class SyncedClock:
    cdef ClockModel model
    # half the shortest round trip of this rank's last synchronisation (s): its offset's bound
    cdef public double error_s
    # (anchor, offset) of the synchronisations so far, for the drift
    cdef list history
