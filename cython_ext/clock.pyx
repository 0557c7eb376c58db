"""Synchronised clocks: every rank's offset (and drift) from rank 0's clock, for the window timing
mode (cython_ext/timing.pyx), as ReproMPI and MPIX_Harmonize do it.

A synchronisation is collective: in round k of a recursive-doubling tree, each rank r < 2^k
that already knows its offset is the reference for rank r + 2^k, with ``rounds`` ping-pongs of
their clocks; the one with the shortest round trip is kept (the least queueing), and the client's
offset is its reading minus the reference's global time at the midpoint of that round trip. The
error is bounded by half that round trip, assuming the two directions take as long. log2(p)
rounds, p - 1 pairs in all. Drift is the least-squares slope of the offsets measured over the
launch, once they span a second (a single synchronisation is too short to see it); until then
0. ``PCCL_BENCH_FAKE_CLOCK=RANK:OFFSET_US:DRIFT_PPM[,...]`` gives ranks a synthetic skew (a clock
that reads MPI_Wtime() * (1 + drift) + offset), for tests on machines whose ranks share a clock.
"""
from mpi4py.libmpi cimport *
from mpi4py.MPI cimport Comm

from cython_ext.core cimport check_mpi

#: a tag no collective of the library uses
cdef int TAG = 0x5EC
#: drift is fitted once the offsets span this long (s), over at most this many of the latest
DRIFT_SPAN_S = 1.0
DRIFT_POINTS = 16


def fake_skew(text: str, rank: int) -> tuple[float, float]:
    """(offset s, drift) for ``rank`` from ``PCCL_BENCH_FAKE_CLOCK``; ValueError naming what is wrong."""
    for entry in filter(None, (part.strip() for part in text.split(","))):
        fields = entry.split(":")
        if len(fields) != 3:
            raise ValueError(f"PCCL_BENCH_FAKE_CLOCK={text!r}: entries are RANK:OFFSET_US:DRIFT_PPM")
        if int(fields[0]) == rank:
            return float(fields[1]) * 1e-6, float(fields[2]) * 1e-6
    return 0.0, 0.0


cdef int _reference(MPI_Comm c, int partner, ClockModel *m, double error, int rounds) except -1 nogil:
    cdef double ts = 0.0, tc = 0.0, tr, best = 1e300
    cdef double out[3]
    cdef int n
    out[0] = 0.0
    out[2] = 0.0
    for n in range(rounds):
        ts = local_now(m)
        check_mpi(MPI_Send(&ts, 1, MPI_DOUBLE, partner, TAG, c))
        check_mpi(MPI_Recv(&tc, 1, MPI_DOUBLE, partner, TAG, c, MPI_STATUS_IGNORE))
        tr = local_now(m)
        if tr - ts < best:
            best = tr - ts
            out[0] = tc - global_of(m, 0.5 * (ts + tr))  # the client's reading minus the global time
            out[2] = tc
    out[1] = 0.5 * best + error  # errors add up down the tree
    check_mpi(MPI_Send(out, 3, MPI_DOUBLE, partner, TAG, c))
    return 0


cdef int _client(MPI_Comm c, int partner, ClockModel *m, int rounds, double *out) except -1 nogil:
    cdef double ts = 0.0, tc
    cdef int n
    for n in range(rounds):
        check_mpi(MPI_Recv(&ts, 1, MPI_DOUBLE, partner, TAG, c, MPI_STATUS_IGNORE))
        tc = local_now(m)
        check_mpi(MPI_Send(&tc, 1, MPI_DOUBLE, partner, TAG, c))
    check_mpi(MPI_Recv(out, 3, MPI_DOUBLE, partner, TAG, c, MPI_STATUS_IGNORE))
    return 0


cdef class SyncedClock:
    """This rank's clock and its model of the common time; ``sync`` (collective) refreshes it."""

    def __init__(self, double fake_offset_s=0.0, double fake_drift=0.0):
        self.model.fake_offset = fake_offset_s
        self.model.fake_drift = fake_drift
        self.model.offset = 0.0
        self.model.drift = 0.0
        self.model.anchor = 0.0
        self.error_s = 0.0
        self.history = []

    def sync(self, Comm comm, int rounds=10):
        """Measure this rank's offset from rank 0 (collective over ``comm``); the bound of its
        error (s), the same on every rank (the largest)."""
        cdef MPI_Comm c = comm.ob_mpi
        cdef int rank = comm.Get_rank(), size = comm.Get_size(), step = 1
        cdef double measured[3]
        cdef double worst = 0.0
        cdef double error = 0.0
        while step < size:
            if rank < step and rank + step < size:
                with nogil:
                    _reference(c, rank + step, &self.model, error, rounds)
            elif step <= rank < 2 * step:
                with nogil:
                    _client(c, rank - step, &self.model, rounds, measured)
                # synchronised before it is the reference for a rank of a later round
                self._update(measured[0], measured[2])
                error = measured[1]
            step *= 2
        self.error_s = error
        worst = error
        with nogil:
            check_mpi(MPI_Allreduce(MPI_IN_PLACE, &worst, 1, MPI_DOUBLE, MPI_MAX, c))
        return worst

    def _update(self, double offset, double anchor):
        history = self.history
        history.append((anchor, offset))
        if len(history) > DRIFT_POINTS:
            del history[:len(history) - DRIFT_POINTS]
        self.model.offset = offset
        self.model.anchor = anchor
        span = history[len(history) - 1][0] - history[0][0]
        self.model.drift = _slope(history) if span >= DRIFT_SPAN_S else 0.0

    @property
    def offset_s(self) -> float:
        """This rank's clock minus the common time, now."""
        cdef double local = local_now(&self.model)
        return local - global_of(&self.model, local)

    @property
    def drift(self) -> float:
        return self.model.drift

    def now(self) -> float:
        """The common time (s)."""
        return global_now(&self.model)

    def true_now(self) -> float:
        """MPI_Wtime: on one machine, without a fake skew, the same clock as every rank's."""
        return MPI_Wtime()


def _slope(points: list) -> float:
    n = len(points)
    mean_x = sum(x for x, _ in points) / n
    mean_y = sum(y for _, y in points) / n
    spread = sum((x - mean_x) ** 2 for x, _ in points)
    return sum((x - mean_x) * (y - mean_y) for x, y in points) / spread if spread > 0 else 0.0
