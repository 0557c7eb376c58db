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

    cdef int body(self) except -1 nogil
    cdef int alone(self) except -1 nogil
    cdef const char *own_piece(self, const char *own, char *acc, int64_t piece) noexcept nogil
    cdef int fold_peers(self, char *acc, const char *own, int64_t n, uint64_t step, int64_t at, bint by_cma,
                        const char **first) except -1 nogil

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
        """All-gather: this rank's block in its place in recv (out of place copied there from send)."""
        cdef int64_t n = self.count * self.itemsize
        cdef char *place = self.dst + self.seg.rank * n
        if not self.in_place:
            memcpy(place, self.src, n)
        return place

    cdef inline char *scratch_for(self, int q) noexcept nogil:
        """Where a peer's piece is unpacked or read: rank 0's is kept while rank 1's arrives."""
        return self.tmp0 if q == 0 else self.tmp
