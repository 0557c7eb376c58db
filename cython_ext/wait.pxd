# Shared by every module that waits in C (shm, ucx, rdma, timing): the monotonic clock, the
# atomics of wait.h, sched_yield, and one bounded wait, so that every wait of a call ends in a
# timeout that names the peer instead of a hang, and the timeout is checked the same way.
from libc.stdint cimport uint64_t
from posix.time cimport CLOCK_MONOTONIC, clock_gettime, timespec

cdef extern from "<sched.h>" nogil:
    int sched_yield()

cdef extern from "wait.h" nogil:
    uint64_t pccl_load_acquire(volatile uint64_t *p)
    void pccl_store_release(volatile uint64_t *p, uint64_t v)
    void pccl_cpu_pause()


cdef inline double now() noexcept nogil:
    """Seconds on CLOCK_MONOTONIC (what every timeout is measured in)."""
    cdef timespec t
    clock_gettime(CLOCK_MONOTONIC, &t)
    return t.tv_sec + 1e-9 * t.tv_nsec


cdef struct Patience:
    # polls that found nothing so far, and when the first of them was
    unsigned long polls
    double start


cdef inline void patience_begin(Patience *w) noexcept nogil:
    w.polls = 0
    w.start = 0.0


cdef inline bint out_of_patience(Patience *w, double timeout_s) noexcept nogil:
    """Count one failed poll; True once ``timeout_s`` has passed since the first. The clock is read
    at the first poll (a wait that finds its data at once costs none) and every 1024th after."""
    w.polls += 1
    if w.polls == 1:
        w.start = now()
        return False
    return (w.polls & 1023) == 0 and now() - w.start > timeout_s
