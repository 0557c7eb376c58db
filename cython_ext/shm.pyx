"""Shared-memory collectives for ranks on one node: one segment, lock-free flags, no MPI in a call.

The segment (collectives/shm.py makes it once per communicator with MPI_Win_allocate_shared)
gives every rank a region that every other rank maps. A region holds:

* a header: the rank's ``ready`` word (its own cache line), its pid, a probe word for the
  cross-memory-attach test, a ping-pong word (the floor benchmark);
* two LL slots (parity = step % 2): 8-byte words, 4 bytes of data and 4 bytes of flag (the
  step's low 32 bits) written with one store, so a reader that sees the flag has the data:
  no separate flag, no fence, no second cache-line transfer;
* two copy buffers of ``chunk`` bytes (parity = step % 2) for large messages.

Every rank of the communicator counts **steps** (one counter per segment, so every op on
it agrees): each call advances it by the same number on every rank. In every step every
rank waits for something every peer published in that step (LL words carrying the step,
or ``ready >= step``); a peer publishes step s only after finishing step s-1, so when a
rank has finished step s-1, every peer has finished reading what it wrote at step s-2,
and the slot or buffer of parity s % 2 is free again. Sequence numbers only grow: nothing
is ever reset, and a slot is never read twice or overwritten early.

Paths (collectives/shm.py picks one per op from the size; the ``transport`` column says which):

* ``ll``: one step. All-gather: write the own block, read every peer's. Reduce-scatter:
  write the p segments, read segment r from every peer and reduce. All-reduce one-shot:
  write the buffer, read every peer's and reduce, in rank order on every rank.
* ``oneshot`` (all-reduce): one step through the copy buffers, every rank reduces every
  peer's whole buffer, in rank order (one synchronisation instead of two-shot's two).
* ``copy``: pipelined chunks through the double-buffered copy buffers (copy in, publish
  ``ready``, copy out / reduce from every peer). All-reduce is two-shot: reduce-scatter
  steps, then all-gather steps.
* ``cma``: single copy, process_vm_readv straight from the peers' buffers (addresses
  exchanged when the op is built): entry, (all-reduce: middle,) exit synchronisation steps.

Waits poll (64 times back to back, then with a pause), yield (sched_yield) after
``spin_limit`` polls (16 when the host's ranks outnumber its cores), and raise ShmTimeout
after ``timeout_s``: a peer that died or never calls is an error naming it, not a hang.
"""
from libc.stdint cimport int64_t, uint32_t, uint64_t, uintptr_t
from libc.stdlib cimport calloc, free
from libc.string cimport memcpy
from posix.time cimport CLOCK_MONOTONIC, clock_gettime, timespec
from posix.types cimport pid_t

from cython_ext.core cimport CollOp
from cython_ext.reduce cimport reduce_into

cdef extern from *:
    """
    #include <sched.h>
    #include <errno.h>
    #include <sys/uio.h>
    #include <sys/prctl.h>
    #ifndef PR_SET_PTRACER
    #define PR_SET_PTRACER 0x59616d61
    #endif
    #ifndef PR_SET_PTRACER_ANY
    #define PR_SET_PTRACER_ANY ((unsigned long)-1)
    #endif
    static inline uint64_t shm_load(volatile uint64_t *p) { return __atomic_load_n(p, __ATOMIC_ACQUIRE); }
    static inline void shm_store(volatile uint64_t *p, uint64_t v) { __atomic_store_n(p, v, __ATOMIC_RELEASE); }
    static inline void shm_pause(void) {
    #if defined(__x86_64__) || defined(__i386__)
        __builtin_ia32_pause();
    #elif defined(__aarch64__)
        __asm__ __volatile__("yield" ::: "memory");
    #else
        __asm__ __volatile__("" ::: "memory");
    #endif
    }
    /* LL: nbytes as 8-byte words, data in the low half, the step's flag in the high half, one store each. */
    static inline void shm_ll_write(volatile uint64_t *slot, const char *src, int64_t nbytes, uint32_t flag) {
        const uint64_t hi = ((uint64_t)flag) << 32;
        int64_t words = nbytes / 4, i;
        uint32_t d;
        for (i = 0; i < words; i++) {
            memcpy(&d, src + 4 * i, 4);
            __atomic_store_n(&slot[i], hi | d, __ATOMIC_RELAXED);
        }
        if (nbytes % 4) {
            d = 0;
            memcpy(&d, src + 4 * words, nbytes % 4);
            __atomic_store_n(&slot[words], hi | d, __ATOMIC_RELAXED);
        }
    }
    /* LL: unpack words [start, ...) whose flag is this step's; returns the first word not there yet. */
    static inline int64_t shm_ll_read(volatile uint64_t *slot, char *dst, int64_t nbytes, uint32_t flag,
                                      int64_t start) {
        int64_t words = (nbytes + 3) / 4, i;
        uint64_t v;
        uint32_t d;
        for (i = start; i < words; i++) {
            v = __atomic_load_n(&slot[i], __ATOMIC_RELAXED);
            if ((uint32_t)(v >> 32) != flag) return i;
            d = (uint32_t)v;
            if (4 * i + 4 <= nbytes) memcpy(dst + 4 * i, &d, 4);
            else memcpy(dst + 4 * i, &d, nbytes - 4 * i);
        }
        return words;
    }
    static int shm_allow_ptrace(void) { return prctl(PR_SET_PTRACER, PR_SET_PTRACER_ANY, 0, 0, 0); }
    /* process_vm_readv until all nbytes arrived; 0, or the errno. */
    static int shm_cma_read(pid_t pid, char *dst, uintptr_t src, int64_t nbytes) {
        struct iovec local, remote;
        ssize_t got;
        while (nbytes > 0) {
            local.iov_base = dst; local.iov_len = (size_t)nbytes;
            remote.iov_base = (void *)src; remote.iov_len = (size_t)nbytes;
            got = process_vm_readv(pid, &local, 1, &remote, 1, 0);
            if (got < 0) { if (errno == EINTR) continue; return errno; }
            if (got == 0) return EFAULT;
            dst += got; src += (uintptr_t)got; nbytes -= got;
        }
        return 0;
    }
    """
    uint64_t shm_load(volatile uint64_t *p) noexcept nogil
    void shm_store(volatile uint64_t *p, uint64_t v) noexcept nogil
    void shm_pause() noexcept nogil
    void shm_ll_write(volatile uint64_t *slot, const char *src, int64_t nbytes, uint32_t flag) noexcept nogil
    int64_t shm_ll_read(volatile uint64_t *slot, char *dst, int64_t nbytes, uint32_t flag,
                        int64_t start) noexcept nogil
    int shm_allow_ptrace() noexcept nogil
    int shm_cma_read(pid_t pid, char *dst, uintptr_t src, int64_t nbytes) noexcept nogil
    int sched_yield() noexcept nogil

cdef enum:
    LINE = 64
    HEADER = 4 * LINE      # ready | pid | probe | ping-pong
    OFF_PID = LINE
    OFF_PROBE = 2 * LINE
    OFF_PING = 3 * LINE

cdef enum:
    BUSY_POLLS = 64        # polls without a pause (a pause is ~100 cycles; the data may be there sooner)

cdef enum:
    K_ALLGATHER = 0
    K_REDUCE_SCATTER = 1
    K_ALLREDUCE = 2

cdef enum:
    P_LL = 0
    P_COPY = 1
    P_CMA = 2
    P_ONESHOT = 3

KINDS = {"allgather": K_ALLGATHER, "reduce_scatter": K_REDUCE_SCATTER, "allreduce": K_ALLREDUCE}
PATHS = {"ll": P_LL, "oneshot": P_ONESHOT, "copy": P_COPY, "cma": P_CMA}


class ShmError(RuntimeError):
    """A shared-memory collective failed (a peer's memory could not be read)."""


class ShmTimeout(ShmError, TimeoutError):
    """A peer did not publish what this rank waited for within the timeout."""


def region_bytes(int64_t ll_bytes, int nranks, int64_t chunk_bytes) -> int:
    """Bytes of one rank's region for LL slots carrying ``ll_bytes`` and copy buffers of ``chunk_bytes``."""
    return HEADER + 2 * ll_slot_bytes(ll_bytes, nranks) + 2 * chunk_bytes


cdef inline int64_t ll_slot_bytes(int64_t ll_bytes, int nranks) noexcept nogil:
    # twice the payload (half of each word is flag), one spare word per segment (reduce-scatter
    # segments start on a word), rounded to a cache line
    return ((2 * ll_bytes + 8 * (nranks + 1)) + LINE - 1) // LINE * LINE


cdef inline double now() noexcept nogil:
    cdef timespec t
    clock_gettime(CLOCK_MONOTONIC, &t)
    return t.tv_sec + 1e-9 * t.tv_nsec


cdef struct Waiter:
    uint64_t polls
    double start


cdef class Segment:
    """Every rank's region of one communicator's shared window, and the step counter they share."""
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
        cdef uint64_t base = shm_load(mine), i
        cdef double start
        cdef bint first = self.rank < peer
        with nogil:
            start = now()
            for i in range(base + 1, base + 1 + <uint64_t>iters):
                if first:
                    shm_store(mine, i)
                    while shm_load(theirs) < i:
                        pass
                else:
                    while shm_load(theirs) < i:
                        pass
                    shm_store(mine, i)
            start = now() - start
        return start

    # -- in a call (nogil) ----------------------------------------------------------------------

    cdef inline uint64_t next_step(self) noexcept nogil:
        self.step += 1
        return self.step

    cdef inline volatile uint64_t *ready(self, int q) noexcept nogil:
        return <volatile uint64_t *>self.bases[q]

    cdef inline volatile uint64_t *ll(self, int q, uint64_t step) noexcept nogil:
        return <volatile uint64_t *>(self.bases[q] + HEADER + (step & 1) * self.ll_slot)

    cdef inline char *buf(self, int q, uint64_t step) noexcept nogil:
        return self.bases[q] + HEADER + 2 * self.ll_slot + (step & 1) * self.chunk_bytes

    cdef int waited(self, Waiter *w, int peer, const char *what, uint64_t step) except -1 nogil:
        """One failed poll: poll again at once (the first BUSY_POLLS), then pause, and yield past the
        spin limit; ShmTimeout past timeout_s."""
        w.polls += 1
        if w.polls == 1:
            w.start = now()
        if w.polls >= self.spin_limit:
            sched_yield()
        elif w.polls > BUSY_POLLS:
            shm_pause()
        if (w.polls & 1023) == 0 and now() - w.start > self.timeout_s:
            with gil:
                raise ShmTimeout(f"no {what.decode()} from rank {peer} within {self.timeout_s:g} s (step {step}, "
                                 f"its ready word {self.ready(peer)[0]}): the peer is gone or stalled "
                                 f"(PCCL_SHM_TIMEOUT_S sets the bound)")
        return 0

    cdef int publish(self, uint64_t step) noexcept nogil:
        shm_store(self.ready(self.rank), step)
        return 0

    cdef int wait_all(self, uint64_t step, const char *what) except -1 nogil:
        cdef int i, q
        cdef Waiter w
        for i in range(1, self.size):
            q = (self.rank + i) % self.size
            w.polls = 0
            while shm_load(self.ready(q)) < step:
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
        cdef Waiter w
        w.polls = 0
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


cdef inline int64_t clamp(int64_t left, int64_t most) noexcept nogil:
    return 0 if left <= 0 else (most if left > most else left)


cdef class ShmCollective(CollOp):
    """One all-gather, reduce-scatter or all-reduce on fixed buffers through a Segment."""
    cdef Segment seg
    cdef int kind, path, dtype, reduction
    cdef const char *src         # the own input (send, or recv in place)
    cdef char *dst               # recv
    cdef bint in_place
    cdef int64_t count, itemsize
    cdef int64_t *offsets        # all-reduce: element offset and count of each rank's segment
    cdef int64_t *counts
    cdef uintptr_t *peer_src     # cma: every rank's input and receive buffer addresses
    cdef uintptr_t *peer_dst
    cdef char *tmp               # a chunk for a peer's data (LL unpack, cma reads)
    cdef char *tmp0              # the same for the first contribution (kept until the second comes)
    cdef char *tmp_own           # a chunk of the own input when the result overwrites it
    cdef char *tmp_result        # cma reduce-scatter in place: the result until peers are done
    cdef public str path_name

    def __cinit__(self, *args, **kwargs):
        self.offsets = self.counts = NULL
        self.peer_src = self.peer_dst = NULL
        self.tmp = self.tmp0 = self.tmp_own = self.tmp_result = NULL

    def __init__(self, comm, Segment seg, str kind, str path, uintptr_t send_addr, uintptr_t recv_addr,
                 int64_t count, int64_t itemsize, int dtype, int reduction, segments=(), peer_src=(),
                 peer_dst=(), keepalive=None):
        """``send_addr`` 0: in place (MPI semantics). ``segments``: all-reduce's per-rank element counts
        (they tile the buffer in rank order). ``peer_src``/``peer_dst``: every rank's input and receive
        address (cma only)."""
        cdef int q, p = seg.size
        cdef int64_t offset = 0, scratch
        self.bind(comm, keepalive)
        self.seg, self.kind, self.path, self.path_name = seg, KINDS[kind], PATHS[path], path
        self.dtype, self.reduction = dtype, reduction
        self.in_place = send_addr == 0
        self.dst = <char *>recv_addr
        self.src = <const char *>(recv_addr if self.in_place else send_addr)
        self.count, self.itemsize = count, itemsize
        self.offsets = <int64_t *>calloc(p, sizeof(int64_t))
        self.counts = <int64_t *>calloc(p, sizeof(int64_t))
        self.peer_src = <uintptr_t *>calloc(p, sizeof(uintptr_t))
        self.peer_dst = <uintptr_t *>calloc(p, sizeof(uintptr_t))
        scratch = max(seg.chunk_bytes, seg.ll_bytes) + 64
        if self.kind == K_REDUCE_SCATTER and self.in_place:
            self.tmp_result = <char *>calloc(count * itemsize + 64, 1)
        self.tmp = <char *>calloc(scratch, 1)
        self.tmp_own = <char *>calloc(scratch, 1)
        self.tmp0 = <char *>calloc(scratch, 1)
        if (self.offsets == NULL or self.counts == NULL or self.peer_src == NULL or self.peer_dst == NULL
                or self.tmp == NULL or self.tmp_own == NULL or self.tmp0 == NULL):
            raise MemoryError()
        if self.kind == K_REDUCE_SCATTER and self.in_place and self.tmp_result == NULL:
            raise MemoryError()
        for q in range(len(segments)):
            self.offsets[q], self.counts[q] = offset, segments[q]
            offset += segments[q]
        for q in range(len(peer_src)):
            self.peer_src[q], self.peer_dst[q] = peer_src[q], peer_dst[q]

    def __dealloc__(self):
        free(self.offsets)
        free(self.counts)
        free(self.peer_src)
        free(self.peer_dst)
        free(self.tmp)
        free(self.tmp_own)
        free(self.tmp0)
        free(self.tmp_result)

    @property
    def steps(self) -> int:
        """Steps the segment has counted so far (every op on it together)."""
        return self.seg.step

    cdef int run(self) except -1 nogil:
        if self.count == 0:
            return 0  # nothing moves, and no step is counted (every rank agrees on the count)
        if self.seg.size == 1:
            return self.alone()
        if self.kind == K_ALLGATHER:
            if self.path == P_LL:
                return self.allgather_ll()
            return self.allgather_cma() if self.path == P_CMA else self.allgather_copy()
        if self.kind == K_REDUCE_SCATTER:
            if self.path == P_LL:
                return self.reduce_scatter_ll()
            return self.reduce_scatter_cma() if self.path == P_CMA else self.reduce_scatter_copy()
        if self.path == P_LL:
            return self.allreduce_ll()
        if self.path == P_ONESHOT:
            return self.allreduce_oneshot()
        return self.allreduce_cma() if self.path == P_CMA else self.allreduce_copy()

    cdef int alone(self) except -1 nogil:
        cdef int64_t nbytes = self.count * self.itemsize
        if self.kind == K_ALLGATHER and not self.in_place:
            memcpy(self.dst, self.src, nbytes)
        elif self.kind != K_ALLGATHER and self.dst != self.src:
            memcpy(self.dst, self.src, nbytes)
        return 0

    cdef inline int fold(self, char *acc, const char *piece, int64_t n, int index,
                         const char **first) except -1 nogil:
        """The index-th contribution, in rank order: the first is kept (``*first``), the second
        reduced with it into acc, the others into acc. One pass each, the first never copied;
        ``piece`` may be ``acc`` itself (element i only reads element i)."""
        if n <= 0:
            return 0
        if index == 0:
            first[0] = piece
            return 0
        if index == 1:
            return reduce_into(acc, first[0], piece, n, self.dtype, self.reduction)
        return reduce_into(acc, acc, piece, n, self.dtype, self.reduction)

    cdef inline char *scratch_for(self, int q) noexcept nogil:
        """Where a peer's piece is unpacked or read: rank 0's is kept while rank 1's arrives."""
        return self.tmp0 if q == 0 else self.tmp

    # -- all-gather -----------------------------------------------------------------------------

    cdef int allgather_ll(self) except -1 nogil:
        cdef int p = self.seg.size, r = self.seg.rank, i, q
        cdef int64_t n = self.count * self.itemsize
        cdef const char *own = self.dst + r * n if self.in_place else self.src
        cdef uint64_t s = self.seg.next_step()
        shm_ll_write(self.seg.ll(r, s), own, n, <uint32_t>s)
        if not self.in_place:
            memcpy(self.dst + r * n, own, n)
        for i in range(1, p):
            q = (r + i) % p
            self.seg.ll_read(q, s, 0, self.dst + q * n, n)
        return 0

    cdef int allgather_copy(self) except -1 nogil:
        cdef int p = self.seg.size, r = self.seg.rank, i, q
        cdef int64_t n = self.count * self.itemsize, at, piece
        cdef const char *own = self.dst + r * n if self.in_place else self.src
        cdef uint64_t s
        if not self.in_place:
            memcpy(self.dst + r * n, own, n)
        at = 0
        while at < n:
            piece = clamp(n - at, self.seg.chunk_bytes)
            s = self.seg.next_step()
            memcpy(self.seg.buf(r, s), own + at, piece)
            self.seg.publish(s)
            self.seg.wait_all(s, b"all-gather chunk")
            for i in range(1, p):
                q = (r + i) % p
                memcpy(self.dst + q * n + at, self.seg.buf(q, s), piece)
            at += piece
        return 0

    cdef int allgather_cma(self) except -1 nogil:
        cdef int p = self.seg.size, r = self.seg.rank, i, q
        cdef int64_t n = self.count * self.itemsize
        if not self.in_place:
            memcpy(self.dst + r * n, self.src, n)
        self.seg.sync(b"entry into the call")
        for i in range(1, p):
            q = (r + i) % p
            self.seg.cma_read(q, self.dst + q * n, self.peer_src[q], n)
        return self.seg.sync(b"end of the peers' reads")

    # -- reduce-scatter -------------------------------------------------------------------------

    cdef int reduce_scatter_ll(self) except -1 nogil:
        cdef int p = self.seg.size, r = self.seg.rank, q
        cdef int64_t n = self.count, nb = n * self.itemsize
        cdef int64_t words = (nb + 3) // 4
        cdef uint64_t s = self.seg.next_step()
        cdef volatile uint64_t *slot = self.seg.ll(r, s)
        cdef const char *own = self.src + r * nb
        cdef const char *first = NULL
        for q in range(p):
            if q != r:
                shm_ll_write(slot + q * words, self.src + q * nb, nb, <uint32_t>s)
        # the result lands in dst[0:n]: in place that is the own segment 0, already in the slot
        for q in range(p):
            if q == r:
                self.fold(self.dst, own, n, q, &first)
            else:
                self.seg.ll_read(q, s, r * words, self.scratch_for(q), nb)
                self.fold(self.dst, self.scratch_for(q), n, q, &first)
        return 0

    cdef int reduce_scatter_copy(self) except -1 nogil:
        cdef int p = self.seg.size, r = self.seg.rank, q
        cdef int64_t n = self.count, per = max(self.seg.chunk_bytes // (p * self.itemsize), 1)
        cdef int64_t nb = n * self.itemsize, pb = per * self.itemsize, at = 0, piece
        cdef uint64_t s
        cdef char *buf
        cdef const char *first = NULL
        while at < n:
            piece = clamp(n - at, per)
            s = self.seg.next_step()
            buf = self.seg.buf(r, s)
            for q in range(p):
                if q != r:
                    memcpy(buf + q * pb, self.src + q * nb + at * self.itemsize, piece * self.itemsize)
            self.seg.publish(s)
            self.seg.wait_all(s, b"reduce-scatter chunk")
            for q in range(p):  # rank order; in place dst is segment 0, read into the buffer already
                if q == r:
                    self.fold(self.dst + at * self.itemsize, self.src + r * nb + at * self.itemsize, piece, q, &first)
                else:
                    self.fold(self.dst + at * self.itemsize, self.seg.buf(q, s) + r * pb, piece, q, &first)
            at += piece
        return 0

    cdef int reduce_scatter_cma(self) except -1 nogil:
        # peers read segment q of this rank's input; in place the result (dst[0:n], which is
        # segment 0, read by rank 0) waits in tmp_result until every peer is done
        cdef int p = self.seg.size, r = self.seg.rank, q
        cdef int64_t n = self.count, per = max(self.seg.chunk_bytes // self.itemsize, 1)
        cdef int64_t nb = n * self.itemsize, at = 0, piece
        cdef char *out = self.tmp_result if (self.in_place and r != 0) else self.dst
        cdef const char *own = self.src + r * nb
        cdef const char *first = NULL
        self.seg.sync(b"entry into the call")
        while at < n:
            piece = clamp(n - at, per)
            for q in range(p):
                if q == r:
                    self.fold(out + at * self.itemsize, own + at * self.itemsize, piece, q, &first)
                else:
                    self.seg.cma_read(q, self.scratch_for(q), self.peer_src[q] + r * nb + at * self.itemsize,
                                      piece * self.itemsize)
                    self.fold(out + at * self.itemsize, self.scratch_for(q), piece, q, &first)
            at += piece
        self.seg.sync(b"end of the peers' reads")
        if out != self.dst:
            memcpy(self.dst, out, nb)
        return 0

    # -- all-reduce -----------------------------------------------------------------------------

    cdef int allreduce_ll(self) except -1 nogil:
        """One shot: every rank reads every peer's whole buffer and reduces, in rank order."""
        cdef int p = self.seg.size, r = self.seg.rank, q
        cdef int64_t n = self.count, nb = n * self.itemsize
        cdef uint64_t s = self.seg.next_step()
        cdef const char *own = self.src
        cdef const char *first = NULL
        shm_ll_write(self.seg.ll(r, s), self.src, nb, <uint32_t>s)
        own = self.own_piece(own, self.dst, n)
        for q in range(p):
            if q == r:
                self.fold(self.dst, own, n, q, &first)
            else:
                self.seg.ll_read(q, s, 0, self.scratch_for(q), nb)
                self.fold(self.dst, self.scratch_for(q), n, q, &first)
        return 0

    cdef int allreduce_oneshot(self) except -1 nogil:
        """One shot through a copy buffer: one step, every rank reduces every peer's whole buffer
        (the buffer fits one chunk); for the sizes where two steps cost more than reading it all."""
        cdef int p = self.seg.size, r = self.seg.rank, q
        cdef int64_t n = self.count
        cdef uint64_t s = self.seg.next_step()
        cdef const char *own
        cdef const char *first = NULL
        memcpy(self.seg.buf(r, s), self.src, n * self.itemsize)
        self.seg.publish(s)
        own = self.own_piece(self.src, self.dst, n)
        self.seg.wait_all(s, b"all-reduce buffer")
        for q in range(p):
            self.fold(self.dst, own if q == r else self.seg.buf(q, s), n, q, &first)
        return 0

    cdef const char *own_piece(self, const char *own, char *acc, int64_t piece) noexcept nogil:
        """The own contribution of a chunk, safe from the accumulation when both are one place:
        from rank 2 on, acc is written (ranks 0 and 1 reduced) before the own turn comes."""
        if own == acc and self.seg.rank >= 2:
            memcpy(self.tmp_own, own, piece * self.itemsize)
            return self.tmp_own
        return own

    cdef int allreduce_copy(self) except -1 nogil:
        """Two shot: reduce-scatter steps (segment r of every peer reduced here), then all-gather steps."""
        cdef int p = self.seg.size, r = self.seg.rank, q
        cdef int64_t per = max(self.seg.chunk_bytes // (p * self.itemsize), 1), pb = per * self.itemsize
        cdef int64_t most = 0, at = 0, piece
        cdef int64_t size = self.itemsize
        cdef uint64_t s
        cdef char *buf
        cdef char *acc
        cdef const char *own
        cdef const char *first = NULL
        for q in range(p):
            most = max(most, self.counts[q])
        while at < most:
            s = self.seg.next_step()
            buf = self.seg.buf(r, s)
            for q in range(p):
                if q != r:
                    memcpy(buf + q * pb, self.src + (self.offsets[q] + at) * size,
                           clamp(self.counts[q] - at, per) * size)
            self.seg.publish(s)
            self.seg.wait_all(s, b"all-reduce chunk")
            piece = clamp(self.counts[r] - at, per)
            acc = self.dst + (self.offsets[r] + at) * size
            own = self.own_piece(self.src + (self.offsets[r] + at) * size, acc, piece)
            for q in range(p):
                self.fold(acc, own if q == r else self.seg.buf(q, s) + r * pb, piece, q, &first)
            at += per
        per = max(self.seg.chunk_bytes // size, 1)
        at = 0
        while at < most:
            s = self.seg.next_step()
            memcpy(self.seg.buf(r, s), self.dst + (self.offsets[r] + at) * size, clamp(self.counts[r] - at, per) * size)
            self.seg.publish(s)
            self.seg.wait_all(s, b"all-reduce result chunk")
            for q in range(p):
                if q != r:
                    memcpy(self.dst + (self.offsets[q] + at) * size, self.seg.buf(q, s),
                           clamp(self.counts[q] - at, per) * size)
            at += per
        return 0

    cdef int allreduce_cma(self) except -1 nogil:
        """Reduce-scatter reading segment r from every peer, a middle step, then all-gather reading
        every peer's reduced segment; peers only overwrite a segment after its owner passed the middle."""
        cdef int p = self.seg.size, r = self.seg.rank, q, i
        cdef int64_t size = self.itemsize, per = max(self.seg.chunk_bytes // size, 1), at = 0, piece
        cdef char *acc
        cdef const char *own
        cdef const char *first = NULL
        self.seg.sync(b"entry into the call")
        while at < self.counts[r]:
            piece = clamp(self.counts[r] - at, per)
            acc = self.dst + (self.offsets[r] + at) * size
            own = self.own_piece(self.src + (self.offsets[r] + at) * size, acc, piece)
            for q in range(p):
                if q == r:
                    self.fold(acc, own, piece, q, &first)
                else:
                    self.seg.cma_read(q, self.scratch_for(q), self.peer_src[q] + (self.offsets[r] + at) * size,
                                      piece * size)
                    self.fold(acc, self.scratch_for(q), piece, q, &first)
            at += piece
        self.seg.sync(b"reduced segment")
        for i in range(1, p):
            q = (r + i) % p
            self.seg.cma_read(q, self.dst + self.offsets[q] * size, self.peer_dst[q] + self.offsets[q] * size,
                         self.counts[q] * size)
        return self.seg.sync(b"end of the peers' reads")
