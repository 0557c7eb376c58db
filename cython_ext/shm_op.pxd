# The base of the shared-memory collectives (cython_ext/shm.pyx): buffers, scratch, the fold.
from libc.stdint cimport int64_t, uint64_t, uintptr_t
from libc.string cimport memcpy

from cython_ext.core cimport CollOp
from cython_ext.kinds cimport Kind
from cython_ext.reduce cimport reduce_into
from cython_ext.shm_segment cimport Segment


cdef class ShmCollective(CollOp):
    cdef Segment seg
    cdef Kind kind
    cdef int dtype, reduction
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
    # The rank-blocked operand (all-gather: recv, reduce-scatter: input) in bytes: rank q's block of
    # block_bytes is ``pieces`` pieces of piece_bytes, the k-th at q * piece_bytes + k * stride_bytes
    # (pieces 1: the blocks back to back). "Packed" offsets count as if they were back to back.
    cdef int64_t pieces, piece_bytes, stride_bytes, block_bytes

    cdef int body(self) except -1 nogil
    cdef int alone(self) except -1 nogil
    cdef const char *own_piece(self, const char *own, char *acc, int64_t piece) noexcept nogil
    cdef int fold_peers(self, char *acc, const char *own, int64_t n, uint64_t step, int64_t at, bint by_cma,
                        const char **first) except -1 nogil
    cdef int cma_gather(self, int q, char *out, uintptr_t base, int64_t at, int64_t nbytes) except -1 nogil

    cdef inline int64_t placed(self, int64_t at) noexcept nogil:
        """Where packed byte ``at`` of the rank-blocked operand lies, from the operand's start."""
        cdef int64_t block, within, k
        if self.pieces <= 1:
            return at
        block = at // self.block_bytes
        within = at - block * self.block_bytes
        k = within // self.piece_bytes
        return block * self.piece_bytes + k * self.stride_bytes + (within - k * self.piece_bytes)

    cdef inline int64_t run_of(self, int64_t at, int64_t nbytes) noexcept nogil:
        """How many of the packed bytes from ``at`` lie back to back (up to the end of their piece)."""
        cdef int64_t left
        if self.pieces <= 1:
            return nbytes
        left = self.piece_bytes - at % self.piece_bytes
        return nbytes if nbytes < left else left

    cdef inline void gather(self, char *out, const char *base, int64_t at, int64_t nbytes) noexcept nogil:
        """Packed bytes [at, at + nbytes) of the rank-blocked operand at ``base`` into ``out``."""
        cdef int64_t run
        while nbytes > 0:
            run = self.run_of(at, nbytes)
            memcpy(out, base + self.placed(at), run)
            out += run
            at += run
            nbytes -= run

    cdef inline void scatter(self, char *base, const char *source, int64_t at, int64_t nbytes) noexcept nogil:
        """``nbytes`` from ``source`` to packed bytes [at, at + nbytes) of the rank-blocked operand at ``base``."""
        cdef int64_t run
        while nbytes > 0:
            run = self.run_of(at, nbytes)
            memcpy(base + self.placed(at), source, run)
            source += run
            at += run
            nbytes -= run

    cdef inline const char *packed(self, const char *base, int64_t at, int64_t nbytes, char *spare) noexcept nogil:
        """Packed bytes [at, at + nbytes) back to back: in place where they lie so, else gathered into ``spare``."""
        if self.run_of(at, nbytes) == nbytes:
            return base + self.placed(at)
        self.gather(spare, base, at, nbytes)
        return spare

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


    cdef inline int peer(self, int i) noexcept nogil:
        """The i-th rank after this one, round the communicator (every rank starts with a different peer)."""
        return (self.seg.rank + i) % self.seg.size

    cdef inline const char *own_block(self) noexcept nogil:
        """All-gather: this rank's block put in its place in recv (out of place, from send), and where
        its data lies back to back: send, or the place itself; NULL when it is interleaved in place
        (read it by packed offset: own_bytes)."""
        cdef int64_t n = self.count * self.itemsize
        if not self.in_place:
            self.scatter(self.dst, self.src, self.seg.rank * n, n)
            return self.src
        if self.pieces <= 1:
            return self.dst + self.seg.rank * n
        return NULL

    cdef inline void own_bytes(self, char *out, int64_t at, int64_t nbytes) noexcept nogil:
        """All-gather: bytes [at, at + nbytes) of this rank's own block into ``out``."""
        if self.in_place:
            self.gather(out, self.dst, self.seg.rank * self.block_bytes + at, nbytes)
        else:
            memcpy(out, self.src + at, nbytes)

    cdef inline char *scratch_for(self, int q) noexcept nogil:
        """Where a peer's piece is unpacked or read: rank 0's is kept while rank 1's arrives."""
        return self.tmp0 if q == 0 else self.tmp
