# One communicator's shared window as the shared-memory collectives see it (cython_ext/shm.pyx).
from libc.stdint cimport int64_t, uint32_t, uint64_t, uintptr_t
from posix.types cimport pid_t

from cython_ext.wait cimport Patience

cdef extern from "shm_ops.h" nogil:
    void shm_ll_write(volatile uint64_t *slot, const char *src, int64_t nbytes, uint32_t flag)
    int64_t shm_ll_read(volatile uint64_t *slot, char *dst, int64_t nbytes, uint32_t flag, int64_t start)
    int shm_allow_ptrace()
    int shm_cma_read(pid_t pid, char *dst, uintptr_t src, int64_t nbytes)
    int shm_cma_read_pieces(pid_t pid, char *dst, int64_t dst_stride, uintptr_t src, int64_t src_stride,
                            int64_t piece, int64_t npieces)

cdef enum:
    LINE = 64
    HEADER = 4 * LINE      # ready | pid | probe | ping-pong
    OFF_PID = LINE
    OFF_PROBE = 2 * LINE
    OFF_PING = 3 * LINE
    BUSY_POLLS = 64        # polls without a pause (a pause is ~100 cycles; the data may be there sooner)


cdef inline int64_t clamp(int64_t left, int64_t most) noexcept nogil:
    return 0 if left <= 0 else (most if left > most else left)


cdef inline int64_t ll_slot_bytes(int64_t ll_bytes, int nranks) noexcept nogil:
    # twice the payload (half of each word is flag), one spare word per segment (reduce-scatter
    # segments start on a word), rounded to a cache line
    return ((2 * ll_bytes + 8 * (nranks + 1)) + LINE - 1) // LINE * LINE


cdef class Segment:
    cdef char **bases
    cdef pid_t *pids
    cdef public int rank, size
    cdef public uint64_t step
    cdef public double timeout_s
    cdef public uint64_t spin_limit
    cdef public int64_t ll_bytes, chunk_bytes
    cdef public bint cma
    cdef int64_t ll_slot
    cdef object keepalive

    cdef inline uint64_t next_step(self) noexcept nogil:
        self.step += 1
        return self.step

    cdef inline volatile uint64_t *ready(self, int q) noexcept nogil:
        return <volatile uint64_t *>self.bases[q]

    cdef inline volatile uint64_t *ll(self, int q, uint64_t step) noexcept nogil:
        return <volatile uint64_t *>(self.bases[q] + HEADER + (step & 1) * self.ll_slot)

    cdef inline char *buf(self, int q, uint64_t step) noexcept nogil:
        return self.bases[q] + HEADER + 2 * self.ll_slot + (step & 1) * self.chunk_bytes

    cdef int waited(self, Patience *w, int peer, const char *what, uint64_t step) except -1 nogil
    cdef int publish(self, uint64_t step) noexcept nogil
    cdef int wait_all(self, uint64_t step, const char *what) except -1 nogil
    cdef int sync(self, const char *what) except -1 nogil
    cdef int ll_read(self, int q, uint64_t step, int64_t word_offset, char *dst, int64_t nbytes) except -1 nogil
    cdef int cma_read(self, int q, char *dst, uintptr_t src, int64_t nbytes) except -1 nogil
    cdef int cma_read_pieces(self, int q, char *dst, int64_t dst_stride, uintptr_t src, int64_t src_stride,
                             int64_t piece, int64_t npieces) except -1 nogil
