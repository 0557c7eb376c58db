"""One communicator's shared window for the shared-memory collectives (cython_ext/shm.pyx).

collectives/transports/shm/ops.py makes it once per communicator with MPI_Win_allocate_shared; every rank's
region holds a header (the ``ready`` word on its own cache line, the pid, a probe word for the
cross-memory-attach test, a ping-pong word), two LL slots and two copy buffers (parity = step
% 2); the layout is in shm_segment.pxd. The step counter lives here, so every op on the
segment agrees on it. Waits poll (BUSY_POLLS back to back, then with a pause), yield after
``spin_limit`` polls, and raise ShmTimeout after ``timeout_s`` naming the peer.
"""
from libc.stdint cimport int64_t, uint32_t, uint64_t, uintptr_t
from libc.stdlib cimport calloc, free
from posix.types cimport pid_t

from cython_ext.wait cimport (Patience, now, out_of_patience, patience_begin, pccl_cpu_pause, pccl_load_acquire,
                              pccl_store_release, sched_yield)


class ShmError(RuntimeError):
    """A shared-memory collective failed (a peer's memory could not be read)."""


class ShmTimeout(ShmError, TimeoutError):
    """A peer did not publish what this rank waited for within the timeout."""


def region_bytes(int64_t ll_bytes, int nranks, int64_t chunk_bytes) -> int:
    """Bytes of one rank's region for LL slots carrying ``ll_bytes`` and copy buffers of ``chunk_bytes``."""
    return HEADER + 2 * ll_slot_bytes(ll_bytes, nranks) + 2 * chunk_bytes


cdef class Segment:
    """Every rank's region of one communicator's shared window, and the step counter they share."""

    def __cinit__(self):
        self.bases = NULL
        self.pids = NULL

    def __init__(self, int rank, bases, int64_t ll_bytes, int64_t chunk_bytes, double timeout_s,
                 uint64_t spin_limit, keepalive=None):
        """``bases``: the address of every rank's region (from MPI_Win_shared_query), zeroed and
        synchronised by the caller."""
        cdef int q
        self.rank, self.size = rank, len(bases)
        self.bases = <char **>calloc(self.size, sizeof(char *))
        self.pids = <pid_t *>calloc(self.size, sizeof(pid_t))
        if self.bases == NULL or self.pids == NULL:
            raise MemoryError()
        for q in range(self.size):
            self.bases[q] = <char *><uintptr_t>bases[q]
        self.step = 0
        self.ll_bytes, self.chunk_bytes = ll_bytes, chunk_bytes
        self.ll_slot = ll_slot_bytes(ll_bytes, self.size)
        self.timeout_s, self.spin_limit = timeout_s, spin_limit
        self.cma = False
        self.keepalive = keepalive

    def __dealloc__(self):
        free(self.bases)
        free(self.pids)

    # -- setup (Python, before any call) ---------------------------------------------------------

    def publish_pid(self, long pid, uint64_t probe):
        """Write this rank's pid and a probe value into its header; allow peers to attach (Yama)."""
        shm_allow_ptrace()
        (<uint64_t *>(self.bases[self.rank] + OFF_PID))[0] = <uint64_t>pid
        (<uint64_t *>(self.bases[self.rank] + OFF_PROBE))[0] = probe
        # where the probe word is in this process (peers map the region at other addresses)
        (<uint64_t *>(self.bases[self.rank] + OFF_PROBE + 8))[0] = <uint64_t><uintptr_t>(self.bases[self.rank] + OFF_PROBE)

    def probe_cma(self) -> str:
        """Read every peer's probe word by process_vm_readv; '' when all came back right, else why not."""
        cdef int q, err
        cdef uint64_t got
        for q in range(self.size):
            self.pids[q] = <pid_t>(<uint64_t *>(self.bases[q] + OFF_PID))[0]
        for q in range(self.size):
            if q == self.rank:
                continue
            got = 0
            err = shm_cma_read(self.pids[q], <char *>&got,
                               <uintptr_t>(<uint64_t *>(self.bases[q] + OFF_PROBE + 8))[0], 8)
            if err:
                import os

                return f"process_vm_readv from rank {q} failed: {os.strerror(err)} (errno {err})"
            if got != (<uint64_t *>(self.bases[q] + OFF_PROBE))[0]:
                return f"process_vm_readv from rank {q} read {got}, not the probe value"
        return ""

    def pingpong(self, int peer, int iters) -> float:
        """Seconds for ``iters`` round trips of one cache line between this rank and ``peer`` (call
        on both; the lower rank starts). Nothing else is touched, and the waits poll without
        pausing: the machine's floor."""
        cdef volatile uint64_t *mine = <volatile uint64_t *>(self.bases[self.rank] + OFF_PING)
        cdef volatile uint64_t *theirs = <volatile uint64_t *>(self.bases[peer] + OFF_PING)
        cdef uint64_t base = pccl_load_acquire(mine), i
        cdef double start
        cdef bint first = self.rank < peer
        with nogil:
            start = now()
            for i in range(base + 1, base + 1 + <uint64_t>iters):
                if first:
                    pccl_store_release(mine, i)
                    while pccl_load_acquire(theirs) < i:
                        pass
                else:
                    while pccl_load_acquire(theirs) < i:
                        pass
                    pccl_store_release(mine, i)
            start = now() - start
        return start

    # -- in a call (nogil) ----------------------------------------------------------------------

    cdef int waited(self, Patience *w, int peer, const char *what, uint64_t step) except -1 nogil:
        """One failed poll: poll again at once (the first BUSY_POLLS), then pause, and yield past the
        spin limit; ShmTimeout past timeout_s."""
        if out_of_patience(w, self.timeout_s):
            with gil:
                raise ShmTimeout(f"no {what.decode()} from rank {peer} within {self.timeout_s:g} s (step {step}, "
                                 f"its ready word {self.ready(peer)[0]}): the peer is gone or stalled "
                                 f"(PCCL_SHM_TIMEOUT_S sets the bound)")
        if w.polls >= self.spin_limit:
            sched_yield()
        elif w.polls > BUSY_POLLS:
            pccl_cpu_pause()
        return 0

    cdef int publish(self, uint64_t step) noexcept nogil:
        pccl_store_release(self.ready(self.rank), step)
        return 0

    cdef int wait_all(self, uint64_t step, const char *what) except -1 nogil:
        cdef int i, q
        cdef Patience w
        for i in range(1, self.size):
            q = (self.rank + i) % self.size
            patience_begin(&w)
            while pccl_load_acquire(self.ready(q)) < step:
                self.waited(&w, q, what, step)
        return 0

    cdef int sync(self, const char *what) except -1 nogil:
        """A step that is only a synchronisation: publish it, wait for every peer's."""
        cdef uint64_t s = self.next_step()
        self.publish(s)
        return self.wait_all(s, what)

    cdef int ll_read(self, int q, uint64_t step, int64_t word_offset, char *dst, int64_t nbytes) except -1 nogil:
        cdef volatile uint64_t *slot = self.ll(q, step) + word_offset
        cdef uint32_t flag = <uint32_t>step
        cdef int64_t words = (nbytes + 3) // 4, done = 0
        cdef Patience w
        patience_begin(&w)
        done = shm_ll_read(slot, dst, nbytes, flag, 0)
        while done < words:
            self.waited(&w, q, b"LL data", step)
            done = shm_ll_read(slot, dst, nbytes, flag, done)
        return 0

    cdef int cma_read(self, int q, char *dst, uintptr_t src, int64_t nbytes) except -1 nogil:
        cdef int err
        if nbytes <= 0:
            return 0
        err = shm_cma_read(self.pids[q], dst, src, nbytes)
        if err:
            with gil:
                import os

                raise ShmError(f"process_vm_readv of {nbytes} bytes from rank {q} failed: {os.strerror(err)}")
        return 0

    cdef int cma_read_pieces(self, int q, char *dst, int64_t dst_stride, uintptr_t src, int64_t src_stride,
                             int64_t piece, int64_t npieces) except -1 nogil:
        """``npieces`` pieces of ``piece`` bytes, the k-th from src + k * src_stride to dst + k * dst_stride."""
        cdef int err
        if piece <= 0 or npieces <= 0:
            return 0
        err = shm_cma_read_pieces(self.pids[q], dst, dst_stride, src, src_stride, piece, npieces)
        if err:
            with gil:
                import os

                raise ShmError(f"process_vm_readv of {npieces} pieces of {piece} bytes from rank {q} failed: "
                               f"{os.strerror(err)}")
        return 0

