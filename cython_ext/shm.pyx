"""Shared-memory collectives for ranks on one node: one segment, lock-free flags, no MPI in a call.

The segment (collectives/transports/shm/ops.py makes it once per communicator with MPI_Win_allocate_shared)
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

One class per collective and path (the base, cython_ext/shm_op.pyx, holds the buffers and the
fold; the segment and its waits are cython_ext/shm_segment.pyx); collectives/transports/shm/ops.py picks the
path per op from the size (``collective``), and the ``transport`` column says which ran:

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
from libc.stdint cimport int64_t, uint32_t, uint64_t
from libc.string cimport memcpy

from cython_ext.shm_op cimport ShmCollective
from cython_ext.shm_segment cimport clamp, shm_ll_write

from cython_ext.shm_segment import Segment, ShmError, ShmTimeout, region_bytes  # noqa: F401  (the module's API)


cdef class AllgatherLL(ShmCollective):
    KIND = "allgather"
    PATH = "ll"

    cdef int body(self) except -1 nogil:
        """One step: the own block into the LL slot, every peer's block read from its slot."""
        cdef int i, q
        cdef int64_t n = self.count * self.itemsize
        cdef const char *own = self.dst + self.seg.rank * n if self.in_place else self.src
        cdef uint64_t s = self.seg.next_step()
        if self.in_place and self.pieces > 1:
            self.own_bytes(self.tmp_own, 0, n)
            own = self.tmp_own
        shm_ll_write(self.seg.ll(self.seg.rank, s), own, n, <uint32_t>s)  # first: the peers wait for it
        self.own_block()
        for i in range(1, self.seg.size):
            q = self.peer(i)
            if self.pieces > 1:
                self.seg.ll_read(q, s, 0, self.tmp, n)
                self.scatter(self.dst, self.tmp, q * n, n)
            else:
                self.seg.ll_read(q, s, 0, self.dst + q * n, n)
        return 0


cdef class AllgatherCopy(ShmCollective):
    KIND = "allgather"
    PATH = "copy"

    cdef int body(self) except -1 nogil:
        """Chunks of the own block through the copy buffer, every peer's chunk copied out, step by step."""
        cdef int i, q
        cdef int64_t n = self.count * self.itemsize, at = 0, piece
        cdef const char *own = self.own_block()
        cdef uint64_t s
        while at < n:
            piece = clamp(n - at, self.seg.chunk_bytes)
            s = self.seg.next_step()
            if own != NULL:
                memcpy(self.seg.buf(self.seg.rank, s), own + at, piece)
            else:
                self.own_bytes(self.seg.buf(self.seg.rank, s), at, piece)
            self.seg.publish(s)
            self.seg.wait_all(s, b"all-gather chunk")
            for i in range(1, self.seg.size):
                q = self.peer(i)
                self.scatter(self.dst, self.seg.buf(q, s), q * n + at, piece)
            at += piece
        return 0


cdef class AllgatherCma(ShmCollective):
    KIND = "allgather"
    PATH = "cma"

    cdef int body(self) except -1 nogil:
        """Single copy: every peer's block read straight from its input, between two synchronisations
        (interleaved: piece by piece, from the peer's place of it in its recv in place, else its send)."""
        cdef int i, q
        cdef int64_t n = self.count * self.itemsize
        self.own_block()
        self.seg.sync(b"entry into the call")
        for i in range(1, self.seg.size):
            q = self.peer(i)
            if self.pieces <= 1:
                self.seg.cma_read(q, self.dst + q * n, self.peer_src[q], n)
            elif self.in_place:  # the peer's block lies in its recv where it lies here
                self.seg.cma_read_pieces(q, self.dst + self.placed(q * n), self.stride_bytes,
                                         self.peer_src[q] + self.placed(q * n), self.stride_bytes,
                                         self.piece_bytes, self.pieces)
            else:
                self.seg.cma_read_pieces(q, self.dst + self.placed(q * n), self.stride_bytes, self.peer_src[q],
                                         self.piece_bytes, self.piece_bytes, self.pieces)
        return self.seg.sync(b"end of the peers' reads")


cdef class ReduceScatterLL(ShmCollective):
    KIND = "reduce_scatter"
    PATH = "ll"

    cdef int body(self) except -1 nogil:
        """One step: the p segments into the LL slot, segment r of every peer read and reduced in rank order."""
        cdef int p = self.seg.size, r = self.seg.rank, q
        cdef int64_t n = self.count, nb = n * self.itemsize
        cdef int64_t words = (nb + 3) // 4
        cdef uint64_t s = self.seg.next_step()
        cdef volatile uint64_t *slot = self.seg.ll(r, s)
        cdef const char *own = self.packed(self.src, r * nb, nb, self.tmp_own)
        cdef const char *first = NULL
        for q in range(p):
            if q != r:
                shm_ll_write(slot + q * words, self.packed(self.src, q * nb, nb, self.tmp), nb, <uint32_t>s)
        # the result lands in dst[0:n]: in place that is the own segment 0, already in the slot
        return self.fold_peers(self.dst, own, n, s, r * words, False, &first)


cdef class ReduceScatterCopy(ShmCollective):
    KIND = "reduce_scatter"
    PATH = "copy"

    cdef int body(self) except -1 nogil:
        """Chunks of the p segments through the copy buffer, segment r of every peer's reduced, step by step."""
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
                    self.gather(buf + q * pb, self.src, q * nb + at * self.itemsize, piece * self.itemsize)
            self.seg.publish(s)
            self.seg.wait_all(s, b"reduce-scatter chunk")
            for q in range(p):  # rank order; in place dst is segment 0, read into the buffer already
                if q == r:
                    self.fold(self.dst + at * self.itemsize,
                              self.packed(self.src, r * nb + at * self.itemsize, piece * self.itemsize, self.tmp_own),
                              piece, q, &first)
                else:
                    self.fold(self.dst + at * self.itemsize, self.seg.buf(q, s) + r * pb, piece, q, &first)
            at += piece
        return 0


cdef class ReduceScatterCma(ShmCollective):
    KIND = "reduce_scatter"
    PATH = "cma"

    cdef int body(self) except -1 nogil:
        # peers read segment q of this rank's input; in place the result (dst[0:n], which is
        # segment 0, read by rank 0) waits in tmp_result until every peer is done
        cdef int r = self.seg.rank
        cdef int64_t n = self.count, per = max(self.seg.chunk_bytes // self.itemsize, 1)
        cdef int64_t nb = n * self.itemsize, at = 0, piece
        cdef char *out = self.tmp_result if (self.in_place and r != 0) else self.dst
        cdef const char *first = NULL
        self.seg.sync(b"entry into the call")
        while at < n:
            piece = clamp(n - at, per)
            self.fold_peers(out + at * self.itemsize,
                            self.packed(self.src, r * nb + at * self.itemsize, piece * self.itemsize, self.tmp_own),
                            piece, 0, r * nb + at * self.itemsize, True, &first)
            at += piece
        self.seg.sync(b"end of the peers' reads")
        if out != self.dst:
            memcpy(self.dst, out, nb)
        return 0


cdef class AllreduceLL(ShmCollective):
    KIND = "allreduce"
    PATH = "ll"

    cdef int body(self) except -1 nogil:
        """One shot: every rank reads every peer's whole buffer and reduces, in rank order."""
        cdef int64_t n = self.count
        cdef uint64_t s = self.seg.next_step()
        cdef const char *first = NULL
        shm_ll_write(self.seg.ll(self.seg.rank, s), self.src, n * self.itemsize, <uint32_t>s)
        return self.fold_peers(self.dst, self.own_piece(self.src, self.dst, n), n, s, 0, False, &first)


cdef class AllreduceOneshot(ShmCollective):
    KIND = "allreduce"
    PATH = "oneshot"

    cdef int body(self) except -1 nogil:
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


cdef class AllreduceCopy(ShmCollective):
    KIND = "allreduce"
    PATH = "copy"

    cdef int body(self) except -1 nogil:
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


cdef class AllreduceCma(ShmCollective):
    KIND = "allreduce"
    PATH = "cma"

    cdef int body(self) except -1 nogil:
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
            self.fold_peers(acc, own, piece, 0, (self.offsets[r] + at) * size, True, &first)
            at += piece
        self.seg.sync(b"reduced segment")
        for i in range(1, p):
            q = self.peer(i)
            self.seg.cma_read(q, self.dst + self.offsets[q] * size, self.peer_dst[q] + self.offsets[q] * size,
                              self.counts[q] * size)
        return self.seg.sync(b"end of the peers' reads")


#: (collective, path) -> the class that runs it
CLASSES = {(cls.KIND, cls.PATH): cls for cls in (
    AllgatherLL, AllgatherCopy, AllgatherCma, ReduceScatterLL, ReduceScatterCopy, ReduceScatterCma,
    AllreduceLL, AllreduceOneshot, AllreduceCopy, AllreduceCma)}
PATHS = tuple(dict.fromkeys(path for _, path in CLASSES))


def collective(comm, seg, str kind, str path, *args, **kwargs) -> ShmCollective:
    """The op of ``kind`` by ``path`` (arguments as ShmCollective's after the segment)."""
    if (kind, path) not in CLASSES:
        raise ValueError(f"no shared-memory {kind} by path {path!r} (paths: {', '.join(PATHS)})")
    return CLASSES[kind, path](comm, seg, *args, **kwargs)
