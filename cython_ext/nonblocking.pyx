"""The MPI library's non-blocking collectives and OSU's overlap measurement, called straight from C.

``NonblockingCollective``: MPI_Iallgather / MPI_Ireduce_scatter_block / MPI_Iallreduce, posted by
``post`` and completed by ``wait``; as a CollOp its call is the two back to back (the pure
communication time, OSU's "Pure Comm."). ``OverlapOp``: the same collective posted, a dummy compute
on this CPU of a set length (with ``test_calls`` MPI_Test calls spread through it, OSU's ``-t``),
then the wait (OSU's "Overall"); it keeps each call's compute and MPI_Test time.

OSU Micro-Benchmarks (osu_iallreduce.c; osu_util_mpi.c ``do_compute_and_probe``,
``do_compute_cpu``): the compute is a small arithmetic kernel run until its own clock says the target
has passed; with test calls, the target is cut into that many pieces, an MPI_Test after each.
"""
from libc.stdlib cimport free, realloc
from mpi4py.libmpi cimport *
from mpi4py.MPI cimport Comm

import numpy as np

from cython_ext.core cimport CollOp, check_mpi
from cython_ext.kinds cimport K_ALLGATHER, K_REDUCE_SCATTER
from cython_ext.native cimport NativeCollective

#: the collectives posted here (cython_ext/kinds.pxd)
KINDS = ("allgather", "reduce_scatter", "allreduce")
cdef enum:
    # the multiply-adds of one piece of the dummy compute between two looks at the clock (about 1 us)
    _CHUNK = 512
#: the same, for Python
CHUNK = _CHUNK


cdef class NonblockingCollective(NativeCollective):
    """MPI_Iallgather / MPI_Ireduce_scatter_block / MPI_Iallreduce on raw addresses, then MPI_Wait: the
    blocking call's arguments (cython_ext/native.pyx NativeCollective) posted."""
    cdef MPI_Request request

    def __cinit__(self, *args, **kwargs):
        self.request = MPI_REQUEST_NULL

    cdef int post(self) except -1 nogil:
        if self.kind == K_ALLGATHER:
            return check_mpi(MPI_Iallgather(self.send, self.count, self.datatype, self.recv, self.count,
                                            self.datatype, self.comm, &self.request))
        if self.kind == K_REDUCE_SCATTER:
            return check_mpi(MPI_Ireduce_scatter_block(self.send, self.recv, self.count, self.datatype,
                                                       self.mpiop, self.comm, &self.request))
        return check_mpi(MPI_Iallreduce(self.send, self.recv, self.count, self.datatype, self.mpiop,
                                        self.comm, &self.request))

    cdef int test(self) except -1 nogil:
        """One MPI_Test of the posted request (a completed one is MPI_REQUEST_NULL: a no-op)."""
        cdef int flag = 0
        return check_mpi(MPI_Test(&self.request, &flag, MPI_STATUS_IGNORE))

    cdef int wait(self) except -1 nogil:
        return check_mpi(MPI_Wait(&self.request, MPI_STATUS_IGNORE))

    cdef int run(self) except -1 nogil:
        self.post()
        return self.wait()

    def start(self):
        """Post the collective (the device path calls it from Python)."""
        with nogil:
            self.post()

    def poll(self):
        """One MPI_Test of the posted collective."""
        with nogil:
            self.test()

    def finish(self):
        """Wait for the posted collective."""
        with nogil:
            self.wait()


cdef double _sink = 0.0


cdef double compute_for(double seconds) noexcept nogil:
    """OSU's dummy compute on this CPU: pieces of CHUNK dependent multiply-adds until ``seconds``
    of them have passed on MPI_Wtime; the time they took."""
    global _sink
    cdef double began = MPI_Wtime(), now = began, x = _sink + 1.0
    cdef int i
    while now - began < seconds:
        for i in range(_CHUNK):
            x = x * 0.999999 + 1e-6
        now = MPI_Wtime()
    _sink = x  # kept, so the compiler cannot drop the loop
    return now - began


def compute(double seconds) -> float:
    """The dummy compute alone (for tests and calibration checks): the seconds it took."""
    cdef double took
    with nogil:
        took = compute_for(seconds)
    return took


cdef class OverlapOp(CollOp):
    """Post, compute ``compute_s`` on this CPU (``test_calls`` MPI_Test calls spread through it), wait:
    OSU's overlapped iteration. Each call's compute time (without the MPI_Test calls) and MPI_Test
    time are kept, in call order (``times``)."""
    cdef NonblockingCollective collective
    cdef public double compute_s
    cdef public int test_calls
    cdef double *compute_times
    cdef double *test_times
    cdef Py_ssize_t calls, room

    def __init__(self, NonblockingCollective collective, double compute_s, int test_calls=0):
        if compute_s < 0 or test_calls < 0:
            raise ValueError(f"OverlapOp: compute_s {compute_s} and test_calls {test_calls} must be >= 0")
        self.comm = collective.comm
        self.keepalive = collective
        self.collective = collective
        self.compute_s, self.test_calls = compute_s, test_calls
        self.calls = self.room = 0

    def __dealloc__(self):
        free(self.compute_times)
        free(self.test_times)

    cdef int _keep(self, double computed, double tested) except -1 nogil:
        cdef double *grown
        if self.calls == self.room:
            self.room = max(64, 2 * self.room)
            grown = <double *>realloc(self.compute_times, self.room * sizeof(double))
            if grown == NULL:
                with gil:
                    raise MemoryError("OverlapOp: times")
            self.compute_times = grown
            grown = <double *>realloc(self.test_times, self.room * sizeof(double))
            if grown == NULL:
                with gil:
                    raise MemoryError("OverlapOp: times")
            self.test_times = grown
        self.compute_times[self.calls] = computed
        self.test_times[self.calls] = tested
        self.calls += 1
        return 0

    cdef int run(self) except -1 nogil:
        cdef double computed = 0.0, tested = 0.0, t0
        cdef int k
        self.collective.post()
        if self.test_calls == 0:
            computed = compute_for(self.compute_s)
        else:
            for k in range(self.test_calls):
                computed += compute_for(self.compute_s / self.test_calls)
                t0 = MPI_Wtime()
                self.collective.test()
                tested += MPI_Wtime() - t0
        self.collective.wait()
        return self._keep(computed, tested)

    def times(self, Py_ssize_t last=-1):
        """(compute seconds, MPI_Test seconds) of the last ``last`` calls (-1: every call), as arrays."""
        cdef Py_ssize_t n = self.calls if last < 0 else min(last, self.calls)
        if n == 0:
            return np.empty(0), np.empty(0)
        first = self.calls - n
        return (np.asarray(<double[:self.calls]>self.compute_times)[first:].copy(),
                np.asarray(<double[:self.calls]>self.test_times)[first:].copy())
