"""One-sided collectives over UCX: puts into pre-registered peer buffers, a flag word per step.

Everything is set up before the first call (collectives/transports/rdma/ops.py): endpoints, the mapped
buffers and every peer's rkey. A call does puts, and after each put a fence (or a flush)
and an 8-byte put of the call's sequence number into a flag word of the receiver; the
receiver progresses the worker until the flag reaches that number. Flags only grow, so
they are never reset. No registration and no handshakes inside a call.

* RingAllgather: p-1 steps, each block put straight into its final place in the right
  neighbour's receive buffer. One "ready" flag per call tells the left neighbour that
  this rank has entered the call (its receive buffer may be overwritten).
* RingReduceScatter: p-1 steps, partial sums put into the right neighbour's landing slots
  (one per step), reduced locally; same "ready" flag.
* GdraaAllreduce (GDRAA-style): each rank puts segment j of its input into the landing
  slot of owner j (sync 1: the owner waits for all p-1 flags), the owner reduces, then puts
  the reduced segment into every peer's result buffer (sync 2). Two synchronisations per
  call and nothing else: a rank only writes a peer's landing slot after it got that peer's
  reduced segment of the previous call, and an owner only writes a peer's result after it
  got that peer's data of this call, so buffers are never overwritten while in use.

Each call ends once its puts completed locally (``end_call``); over transports whose puts
need the target's progress (tcp, emulated RMA) it then also waits in an MPI_Ibarrier while
progressing UCX, so no rank leaves while a peer still needs it (``quiesce``).

Host buffers are copied and reduced in C; device buffers through ``kernels`` (an object
with ``copy(dst, src, nbytes)`` and ``reduce(dst, a, b, count)`` on raw addresses that
returns once the device work is done), called with the GIL.
"""
from libc.stdint cimport int64_t, uint64_t, uintptr_t
from libc.stdlib cimport calloc, free
from libc.string cimport memcpy, memset

from mpi4py.libmpi cimport MPI_Ibarrier, MPI_Request, MPI_STATUS_IGNORE, MPI_Test

from cython_ext.core cimport CollOp, check_mpi
from cython_ext.reduce cimport reduce_into
from cython_ext.ucx_region cimport Region
from cython_ext.wait cimport Patience, out_of_patience, patience_begin, sched_yield
from cython_ext.ucx cimport (
    UCP_OP_ATTR_FIELD_MEMORY_TYPE,
    Endpoints,
    Worker,
    check,
    ucp_ep_flush_nbx,
    ucp_request_param_t,
    ucp_worker_fence,
    ucp_worker_progress,
    ucs_memory_type_t,
)

cdef enum:
    MAX_PENDING = 64
    FLAG_BYTES = 8

ORDERINGS = ("fence", "flush")


def flag_words(str collective, int nranks) -> int:
    """How many flag words an op of ``collective`` needs on ``nranks`` ranks."""
    if collective == "allreduce":
        return 2 * nranks          # scatter flags from each writer, gather flags from each owner
    return 1 + max(nranks - 1, 0)  # ready, then one per ring step


cdef class OneSidedOp(CollOp):
    """Shared machinery: tracked puts, the flag after the data, waits, local copy/reduce."""
    cdef Endpoints endpoints
    cdef Worker worker
    cdef Region flags_region
    cdef volatile uint64_t *flags
    cdef uint64_t current          # this call's sequence number: the value every flag put carries
    cdef void *pending[MAX_PENDING]
    cdef int npending
    cdef int rank, size
    cdef bint flush_before_signal
    cdef public bint quiesce        # end every call with a progressing barrier (software transports)
    cdef bint on_device
    cdef object kernels
    cdef ucp_request_param_t data_param
    cdef ucp_request_param_t flag_param
    cdef int dtype, reduction
    #: setup facts (collectives/transports/rdma/ops.py): registrations, rkey unpacks, transport, memory type
    cdef public dict facts

    def __init__(self, comm, Endpoints endpoints, Region flags, uintptr_t flags_addr, int dtype, int reduction,
                 str ordering="fence", str memory_type="host", kernels=None, keepalive=None):
        if ordering not in ORDERINGS:
            raise ValueError(f"ordering must be one of {ORDERINGS}, got {ordering!r}")
        self.bind(comm, keepalive)
        self.endpoints, self.worker, self.flags_region = endpoints, endpoints.worker, flags
        self.flags = <volatile uint64_t *>flags_addr
        self.rank, self.size = endpoints.rank, endpoints.size
        self.current = 0
        self.npending = 0
        self.flush_before_signal = ordering == "flush"
        self.quiesce = False
        self.dtype, self.reduction = dtype, reduction
        self.on_device = kernels is not None
        self.kernels = kernels
        self.facts = {}
        memset(&self.data_param, 0, sizeof(ucp_request_param_t))
        memset(&self.flag_param, 0, sizeof(ucp_request_param_t))
        if memory_type != "host":
            from cython_ext.ucx import MEMORY_TYPE_CODES

            self.data_param.op_attr_mask = UCP_OP_ATTR_FIELD_MEMORY_TYPE
            self.data_param.memory_type = <ucs_memory_type_t>MEMORY_TYPE_CODES[memory_type]

    @property
    def calls(self) -> int:
        """Calls run so far (the value of the last flags written)."""
        return self.current

    cdef inline int begin(self) noexcept nogil:
        self.current += 1
        return 0

    cdef int track(self, void *request) except -1 nogil:
        if request == NULL:
            return 0
        if self.npending == MAX_PENDING:
            self.complete()
        self.pending[self.npending] = request
        self.npending += 1
        return 0

    cdef int put(self, Region region, int peer, const char *source, size_t nbytes, size_t offset) except -1 nogil:
        cdef void *request = NULL
        region.put(peer, source, nbytes, offset, &self.data_param, &request)
        return self.track(request)

    cdef int signal(self, int peer, int slot) except -1 nogil:
        """Write this call's number into the peer's flag ``slot``, ordered after every earlier put to it."""
        cdef void *request = NULL
        if self.flush_before_signal:
            self.worker.wait_request(ucp_ep_flush_nbx(self.endpoints.eps[peer], &self.flag_param),
                                     b"ucp_ep_flush_nbx")
        else:
            check(ucp_worker_fence(self.worker.handle), b"ucp_worker_fence")
        self.flags_region.put(peer, &self.current, FLAG_BYTES, slot * FLAG_BYTES, &self.flag_param, &request)
        return self.track(request)

    cdef inline int wait(self, int slot, int peer, const char *what) except -1 nogil:
        return self.worker.wait_word(&self.flags[slot], self.current, what, peer)

    cdef int complete(self) except -1 nogil:
        """Completion of every put started (their sources may change afterwards)."""
        cdef int i
        cdef void *request
        for i in range(self.npending):
            request, self.pending[i] = self.pending[i], NULL
            self.worker.wait_request(request, b"ucp_put_nbx")
        self.npending = 0
        return 0

    cdef int end_call(self) except -1 nogil:
        """Complete this rank's puts; with a software transport, also wait until every rank has.

        Over RDMA hardware and shared memory a put completes without the target's help. Over
        tcp (and RMA that UCX emulates with active messages) the target's progress delivers
        the data and sends the acknowledgement that completes the put, so a rank that left
        the call (into an MPI barrier, say) would strand a peer still waiting. There every
        call ends with MPI_Ibarrier while this rank keeps progressing UCX: when it completes,
        every put of the call is acknowledged and no rank needs another's progress."""
        cdef MPI_Request barrier
        cdef int done = 0
        cdef Patience w
        self.complete()
        if not self.quiesce:
            return 0
        patience_begin(&w)
        check_mpi(MPI_Ibarrier(self.comm, &barrier))
        while not done:
            if ucp_worker_progress(self.worker.handle) == 0 and self.worker.yield_when_idle:
                sched_yield()
            check_mpi(MPI_Test(&barrier, &done, MPI_STATUS_IGNORE))
            if not done and out_of_patience(&w, self.worker.timeout_s):
                with gil:
                    from cython_ext.ucx import UcxTimeout

                    raise UcxTimeout(f"not every rank finished the call within {self.worker.timeout_s:g} s "
                                     f"(PCCL_RDMA_TIMEOUT_S sets the bound)")
        return 0

    cdef int local_copy(self, char *dst, const char *src, size_t nbytes) except -1 nogil:
        if nbytes == 0 or dst == src:
            return 0
        if not self.on_device:
            memcpy(dst, src, nbytes)
            return 0
        with gil:
            self.kernels.copy(<uintptr_t>dst, <uintptr_t>src, nbytes)
        return 0

    cdef int local_reduce(self, char *dst, const char *a, const char *b, int64_t count) except -1 nogil:
        if count == 0:
            return 0
        if not self.on_device:
            return reduce_into(dst, a, b, count, self.dtype, self.reduction)
        with gil:
            self.kernels.reduce(<uintptr_t>dst, <uintptr_t>a, <uintptr_t>b, count)
        return 0


cdef enum:
    READY = 0      # ring ops: the right neighbour has entered this call
    STEP = 1       # ring ops: STEP + k = the left neighbour's block of step k has landed


cdef class RingAllgather(OneSidedOp):
    """Ring all-gather; ``recv`` is the mapped receive buffer (p blocks of ``block_bytes``)."""
    cdef Region recv
    cdef char *recv_base
    cdef const char *send
    cdef size_t block

    def __init__(self, comm, Endpoints endpoints, Region flags, uintptr_t flags_addr, Region recv,
                 uintptr_t recv_addr, uintptr_t send_addr, size_t block_bytes, **options):
        """``send_addr`` 0: in place (this rank's block is already in ``recv``)."""
        super().__init__(comm, endpoints, flags, flags_addr, 0, 0, **options)
        self.recv, self.recv_base, self.send, self.block = recv, <char *>recv_addr, <const char *>send_addr, block_bytes

    cdef int run(self) except -1 nogil:
        cdef int p = self.size, r = self.rank, k, b
        cdef int right = (r + 1) % p, left = (r - 1 + p) % p
        self.begin()
        if self.send != NULL:
            self.local_copy(self.recv_base + r * self.block, self.send, self.block)
        if p == 1:
            return 0
        self.signal(left, READY)
        self.wait(READY, right, b"ready flag")
        for k in range(p - 1):
            b = (r - k + p) % p
            if k > 0:
                self.wait(STEP + k - 1, left, b"all-gather block")
            self.put(self.recv, right, self.recv_base + b * self.block, self.block, b * self.block)
            self.signal(right, STEP + k)
        self.wait(STEP + p - 2, left, b"all-gather block")
        return self.end_call()


cdef class RingReduceScatter(OneSidedOp):
    """Ring reduce-scatter of ``source`` (p blocks) into ``result`` (one block) through landing slots."""
    cdef Region landing
    cdef char *land
    cdef const char *source
    cdef char *result
    cdef size_t block
    cdef int64_t count

    def __init__(self, comm, Endpoints endpoints, Region flags, uintptr_t flags_addr, Region landing,
                 uintptr_t landing_addr, uintptr_t source_addr, uintptr_t result_addr, int64_t count,
                 int64_t itemsize, int dtype, int reduction, **options):
        super().__init__(comm, endpoints, flags, flags_addr, dtype, reduction, **options)
        self.landing, self.land = landing, <char *>landing_addr
        self.source, self.result = <const char *>source_addr, <char *>result_addr
        self.count, self.block = count, count * itemsize

    cdef int run(self) except -1 nogil:
        cdef int p = self.size, r = self.rank, k, sent, received
        cdef int right = (r + 1) % p, left = (r - 1 + p) % p
        cdef const char *outgoing
        cdef char *slot
        self.begin()
        if p == 1:
            return self.local_copy(self.result, self.source, self.block)
        self.signal(left, READY)
        self.wait(READY, right, b"ready flag")
        for k in range(p - 1):
            sent, received = (r - k - 1 + 2 * p) % p, (r - k - 2 + 2 * p) % p
            outgoing = self.source + sent * self.block if k == 0 else self.land + (k - 1) * self.block
            self.put(self.landing, right, outgoing, self.block, k * self.block)
            self.signal(right, STEP + k)
            self.wait(STEP + k, left, b"reduce-scatter partial")
            slot = self.land + k * self.block
            if k == p - 2:
                self.complete()  # in place the result overlaps a block that a put may still read
                self.local_reduce(self.result, slot, self.source + received * self.block, self.count)
            else:
                self.local_reduce(slot, slot, self.source + received * self.block, self.count)
        return self.end_call()


cdef class GdraaAllreduce(OneSidedOp):
    """GDRAA-style all-reduce: scatter segments to their owners, reduce, put the result to every peer."""
    cdef Region landing
    cdef Region recv
    cdef char *land
    cdef const char *source
    cdef char *result
    cdef int64_t *offsets        # element offset of each rank's segment
    cdef int64_t *counts         # element count of each rank's segment
    cdef int64_t itemsize
    cdef size_t slot_bytes

    def __cinit__(self, *args, **kwargs):
        self.offsets = NULL
        self.counts = NULL

    def __init__(self, comm, Endpoints endpoints, Region flags, uintptr_t flags_addr, Region landing,
                 uintptr_t landing_addr, Region recv, uintptr_t recv_addr, uintptr_t source_addr, segments,
                 int64_t itemsize, int dtype, int reduction, **options):
        """``segments``: element count of each rank's segment (they tile the buffer in rank order);
        ``landing`` holds p-1 slots of the largest segment; ``source_addr`` 0: in place."""
        super().__init__(comm, endpoints, flags, flags_addr, dtype, reduction, **options)
        cdef int i
        cdef int64_t offset = 0
        self.landing, self.land, self.recv, self.result = landing, <char *>landing_addr, recv, <char *>recv_addr
        self.source = <const char *>(source_addr or recv_addr)
        self.itemsize = itemsize
        self.slot_bytes = max(segments) * itemsize
        self.offsets = <int64_t *>calloc(self.size, sizeof(int64_t))
        self.counts = <int64_t *>calloc(self.size, sizeof(int64_t))
        if self.offsets == NULL or self.counts == NULL:
            raise MemoryError()
        for i in range(self.size):
            self.offsets[i], self.counts[i] = offset, segments[i]
            offset += segments[i]

    def __dealloc__(self):
        free(self.offsets)
        free(self.counts)

    cdef inline size_t slot(self, int writer, int owner) noexcept nogil:
        """Where ``writer``'s segment lands at ``owner``: p-1 slots, the owner's own left out."""
        return <size_t>((writer - owner - 1 + self.size) % self.size) * self.slot_bytes

    cdef int run(self) except -1 nogil:
        cdef int p = self.size, r = self.rank, i, peer
        cdef size_t own = self.offsets[r] * self.itemsize
        cdef const char *partial = self.source + own
        self.begin()
        if p == 1:
            return self.local_copy(self.result, self.source, self.counts[0] * self.itemsize)
        for i in range(1, p):  # scatter: segment j to its owner j
            peer = (r + i) % p
            self.put(self.landing, peer, self.source + self.offsets[peer] * self.itemsize,
                     self.counts[peer] * self.itemsize, self.slot(r, peer))
            self.signal(peer, r)
        for i in range(1, p):  # synchronisation 1: reduce each writer's segment as it lands
            peer = (r - i + p) % p
            self.wait(peer, peer, b"segment to reduce")
            self.local_reduce(self.result + own, partial, self.land + self.slot(peer, r), self.counts[r])
            partial = self.result + own
        for i in range(1, p):  # gather: the reduced segment into every peer's result
            peer = (r + i) % p
            self.put(self.recv, peer, self.result + own, self.counts[r] * self.itemsize, own)
            self.signal(peer, p + r)
        for i in range(1, p):  # synchronisation 2: every owner's reduced segment has landed
            peer = (r - i + p) % p
            self.wait(p + peer, peer, b"reduced segment")
        return self.end_call()
