"""The base of every shared-memory collective (one subclass per collective and path, cython_ext/shm.pyx).

It owns what every path needs: the buffers (``send_addr`` 0 is in place, MPI semantics), the
scratch chunks, all-reduce's per-rank segments, the peers' addresses for cma, the call on one
rank, and the fold of contributions in rank order. A subclass names its collective (``KIND``)
and path (``PATH``) and implements ``body``: the call on two or more ranks.
"""
from libc.stdint cimport int64_t, uint64_t, uintptr_t
from libc.stdlib cimport calloc, free
from libc.string cimport memcpy

from cython_ext.kinds cimport K_ALLGATHER, K_REDUCE_SCATTER, kind_code
from cython_ext.shm_segment cimport Segment


cdef class ShmCollective(CollOp):
    """One all-gather, reduce-scatter or all-reduce on fixed buffers through a Segment."""
    KIND = ""
    PATH = ""

    def __cinit__(self, *args, **kwargs):
        self.offsets = self.counts = NULL
        self.peer_src = self.peer_dst = NULL
        self.tmp = self.tmp0 = self.tmp_own = self.tmp_result = NULL

    def __init__(self, comm, Segment seg, uintptr_t send_addr, uintptr_t recv_addr,
                 int64_t count, int64_t itemsize, int dtype, int reduction, segments=(), peer_src=(),
                 peer_dst=(), keepalive=None, int64_t pieces=1, int64_t stride=0):
        """``send_addr`` 0: in place (MPI semantics). ``segments``: all-reduce's per-rank element counts
        (they tile the buffer in rank order). ``peer_src``/``peer_dst``: every rank's input and receive
        address (cma only; an interleaved all-gather in place: the receive buffer's start).
        ``pieces`` > 1: the ranks' blocks of the all-gather's result or the reduce-scatter's input
        interleaved, rank q's k-th piece of count / pieces elements at q * count / pieces + k * ``stride``."""
        cdef int q, p = seg.size
        cdef str kind = type(self).KIND, path = type(self).PATH
        cdef int64_t offset = 0, scratch
        self.bind(comm, keepalive)
        self.seg, self.kind, self.moved_by = seg, kind_code(kind), f"shm:{path}"
        self.dtype, self.reduction = dtype, reduction
        self.in_place = send_addr == 0
        self.dst = <char *>recv_addr
        self.src = <const char *>(recv_addr if self.in_place else send_addr)
        self.count, self.itemsize = count, itemsize
        if pieces > 1:
            if kind == "allreduce" or count % pieces or stride < count // pieces:
                raise ValueError(f"no interleaved {kind} of {count} elements per rank in {pieces} pieces "
                                 f"{stride} apart")
            if kind == "reduce_scatter" and self.in_place:
                raise ValueError("an interleaved reduce-scatter runs out of place")
        self.block_bytes = count * itemsize
        self.pieces = max(pieces, 1)
        self.piece_bytes = count // self.pieces * itemsize if pieces > 1 else self.block_bytes
        self.stride_bytes = stride * itemsize if pieces > 1 else self.block_bytes
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
        return self.body()

    cdef int body(self) except -1 nogil:
        with gil:
            raise NotImplementedError(f"{type(self).__name__}: a shared-memory path implements body()")

    cdef int alone(self) except -1 nogil:
        cdef int64_t nbytes = self.count * self.itemsize
        if self.kind == K_ALLGATHER and not self.in_place:
            self.scatter(self.dst, self.src, 0, nbytes)
        elif self.kind == K_REDUCE_SCATTER and self.pieces > 1:
            self.gather(self.dst, self.src, 0, nbytes)
        elif self.kind != K_ALLGATHER and self.dst != self.src:
            memcpy(self.dst, self.src, nbytes)
        return 0

    cdef int fold_peers(self, char *acc, const char *own, int64_t n, uint64_t step, int64_t at, bint by_cma,
                        const char **first) except -1 nogil:
        """Every rank's ``n`` elements folded into ``acc`` in rank order: this rank's ``own``, each peer's
        read into its scratch first, by cma from its input at packed byte ``at`` (``by_cma``) or from
        its LL slot of ``step`` at word ``at``."""
        cdef int q
        cdef int64_t nbytes = n * self.itemsize
        for q in range(self.seg.size):
            if q == self.seg.rank:
                self.fold(acc, own, n, q, first)
                continue
            if by_cma:
                self.cma_gather(q, self.scratch_for(q), self.peer_src[q], at, nbytes)
            else:
                self.seg.ll_read(q, step, at, self.scratch_for(q), nbytes)
            self.fold(acc, self.scratch_for(q), n, q, first)
        return 0

    cdef int cma_gather(self, int q, char *out, uintptr_t base, int64_t at, int64_t nbytes) except -1 nogil:
        """Packed bytes [at, at + nbytes) of rank q's rank-blocked operand at ``base`` (its address) into
        ``out``: whole pieces of one block in one system call (cma_read_pieces), the ends on their own."""
        cdef int64_t run, whole
        while nbytes > 0:
            run = self.run_of(at, nbytes)
            whole = 0
            if self.pieces > 1 and run == self.piece_bytes:
                whole = min(nbytes // self.piece_bytes, self.pieces - (at % self.block_bytes) // self.piece_bytes)
            if whole > 1:
                self.seg.cma_read_pieces(q, out, self.piece_bytes, base + self.placed(at), self.stride_bytes,
                                         self.piece_bytes, whole)
                run = whole * self.piece_bytes
            else:
                self.seg.cma_read(q, out, base + self.placed(at), run)
            out += run
            at += run
            nbytes -= run
        return 0

    cdef const char *own_piece(self, const char *own, char *acc, int64_t piece) noexcept nogil:
        """The own contribution of a chunk, safe from the accumulation when both are one place:
        from rank 2 on, acc is written (ranks 0 and 1 reduced) before the own turn comes."""
        if own == acc and self.seg.rank >= 2:
            memcpy(self.tmp_own, own, piece * self.itemsize)
            return self.tmp_own
        return own
