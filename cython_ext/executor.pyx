"""Run a schedule (collectives/schedules/rows.py) with MPI point-to-point, no GIL.

A schedule is an int64 array, one row per step, in element units. Per row: on
one of up to three communicators, optionally send a block to one peer while
receiving a block from another (MPI_Sendrecv), then optionally copy or reduce
locally. Strided blocks travel as one message with an MPI vector datatype,
built once when the op is constructed, never inside the timed call. A posted row
(column ``post``) starts its messages (MPI_Isend/MPI_Irecv) and goes on; the next
row that is not posted completes them all with its own (MPI_Waitall).
"""
from libc.stdint cimport int64_t, uintptr_t
from libc.stdlib cimport calloc, free
from libc.string cimport memmove
from mpi4py.libmpi cimport *
from mpi4py.MPI cimport Comm

from cython_ext.core cimport CollOp, check_mpi
from cython_ext.native cimport mpi_types
from cython_ext.reduce cimport reduce_into

# The columns of collectives.schedules.rows.COLUMNS, in its order (column_indices: a test checks it).
cdef enum:
    COMM
    SEND_PEER, SEND_BUF, SEND_OFF, SEND_COUNT, SEND_NBLOCKS, SEND_STRIDE
    RECV_PEER, RECV_BUF, RECV_OFF, RECV_COUNT, RECV_NBLOCKS, RECV_STRIDE
    ACTION, ACTION_NBLOCKS, ACTION_COUNT
    SRC_BUF, SRC_OFF, SRC_STRIDE, SRC2_BUF, SRC2_OFF, SRC2_STRIDE, DST_BUF, DST_OFF, DST_STRIDE
    POST
    NCOLS

def column_indices():
    """The index this executor reads each schedule column at (tests compare it with the schedule's)."""
    return {"comm": COMM, "send_peer": SEND_PEER, "send_buf": SEND_BUF, "send_off": SEND_OFF,
            "send_count": SEND_COUNT, "send_nblocks": SEND_NBLOCKS, "send_stride": SEND_STRIDE,
            "recv_peer": RECV_PEER, "recv_buf": RECV_BUF, "recv_off": RECV_OFF, "recv_count": RECV_COUNT,
            "recv_nblocks": RECV_NBLOCKS, "recv_stride": RECV_STRIDE, "action": ACTION,
            "action_nblocks": ACTION_NBLOCKS, "action_count": ACTION_COUNT, "src_buf": SRC_BUF, "src_off": SRC_OFF,
            "src_stride": SRC_STRIDE, "src2_buf": SRC2_BUF, "src2_off": SRC2_OFF, "src2_stride": SRC2_STRIDE,
            "dst_buf": DST_BUF, "dst_off": DST_OFF, "dst_stride": DST_STRIDE, "post": POST,
            "ncols": NCOLS}


cdef enum:
    ACT_NONE = 0
    ACT_COPY = 1
    ACT_REDUCE = 2
    ACT_MPI_ALLGATHER = 3         # the MPI library's collective as one phase
    ACT_MPI_REDUCE_SCATTER = 4
    ACT_MPI_ALLREDUCE = 5

#: the library-row actions, collectives.schedules.rows.LIBRARY_ACTIONS (a test checks it)
LIBRARY_CODES = (ACT_MPI_ALLGATHER, ACT_MPI_REDUCE_SCATTER, ACT_MPI_ALLREDUCE)

cdef enum:
    NBUFS = 3          # send, recv, scratch
    NCOMMS = 3         # whole, intra-node, inter-node rail
    TAG = 0x5cc1

# Contiguous messages above this are sent in pieces so the int count of MPI-3 never overflows.
cdef int64_t MAX_MESSAGE_BYTES = 1 << 30


def set_max_message_bytes(int64_t nbytes):
    """Test aid: a small piece size exercises the >1 GiB path with small buffers. Returns the old one."""
    global MAX_MESSAGE_BYTES
    old, MAX_MESSAGE_BYTES = MAX_MESSAGE_BYTES, nbytes
    return old


cdef int exchange(char *s, int64_t send_bytes, MPI_Datatype send_type, int send_peer,
                  char *r, int64_t recv_bytes, MPI_Datatype recv_type, int recv_peer,
                  MPI_Comm comm) except -1 nogil:
    """One message each way. A strided side (datatype given) is at most 1 GiB and goes whole."""
    cdef MPI_Datatype st = send_type if send_type != MPI_DATATYPE_NULL else MPI_BYTE
    cdef MPI_Datatype rt = recv_type if recv_type != MPI_DATATYPE_NULL else MPI_BYTE
    cdef int send_count = 1 if send_type != MPI_DATATYPE_NULL else <int>min(send_bytes, MAX_MESSAGE_BYTES)
    cdef int recv_count = 1 if recv_type != MPI_DATATYPE_NULL else <int>min(recv_bytes, MAX_MESSAGE_BYTES)
    if send_bytes > MAX_MESSAGE_BYTES or recv_bytes > MAX_MESSAGE_BYTES:
        return exchange_in_pieces(s, send_bytes, send_peer, r, recv_bytes, recv_peer, comm)
    if send_peer >= 0 and recv_peer >= 0:
        return check_mpi(MPI_Sendrecv(s, send_count, st, send_peer, TAG, r, recv_count, rt, recv_peer, TAG,
                                      comm, MPI_STATUS_IGNORE))
    if send_peer >= 0:
        return check_mpi(MPI_Send(s, send_count, st, send_peer, TAG, comm))
    return check_mpi(MPI_Recv(r, recv_count, rt, recv_peer, TAG, comm, MPI_STATUS_IGNORE))


cdef int exchange_in_pieces(char *s, int64_t send_bytes, int send_peer, char *r, int64_t recv_bytes,
                            int recv_peer, MPI_Comm comm) except -1 nogil:
    """Contiguous messages over 1 GiB: 1 GiB pieces, all posted at once and awaited together, so
    each side's piece count depends on its own message only (MPI keeps pieces in order)."""
    cdef int n = 0
    cdef int npieces = <int>((send_bytes + MAX_MESSAGE_BYTES - 1) // MAX_MESSAGE_BYTES
                             + (recv_bytes + MAX_MESSAGE_BYTES - 1) // MAX_MESSAGE_BYTES)
    cdef MPI_Request *requests = <MPI_Request *>calloc(max(npieces, 1), sizeof(MPI_Request))
    if requests == NULL:
        with gil:
            raise MemoryError()
    try:
        if recv_peer >= 0:
            n = post_pieces(False, r, recv_bytes, recv_peer, comm, requests, n)
        if send_peer >= 0:
            n = post_pieces(True, s, send_bytes, send_peer, comm, requests, n)
        check_mpi(MPI_Waitall(n, requests, MPI_STATUSES_IGNORE))
    finally:
        free(requests)
    return 0


cdef int post_pieces(bint sending, char *buf, int64_t nbytes, int peer, MPI_Comm comm, MPI_Request *requests,
                     int n) except -1 nogil:
    """``nbytes`` at ``buf`` to or from ``peer`` as pieces of at most 1 GiB, their requests from
    ``requests[n]`` on; the requests then posted in all."""
    cdef int64_t offset = 0
    cdef int length
    while offset < nbytes or offset == 0:  # an empty message is still one (its peer expects it)
        length = <int>min(nbytes - offset, MAX_MESSAGE_BYTES)
        if sending:
            check_mpi(MPI_Isend(buf + offset, length, MPI_BYTE, peer, TAG, comm, &requests[n]))
        else:
            check_mpi(MPI_Irecv(buf + offset, length, MPI_BYTE, peer, TAG, comm, &requests[n]))
        n += 1
        offset += MAX_MESSAGE_BYTES
    return n


cdef int post_message(bint sending, char *buf, int64_t nbytes, MPI_Datatype datatype, int peer, MPI_Comm comm,
                      MPI_Request *requests, int n) except -1 nogil:
    """One side of a row's exchange started, not awaited: its requests from ``requests[n]`` on; the
    requests then posted in all (a contiguous message over 1 GiB goes in pieces, as in exchange)."""
    if peer < 0:
        return n
    if datatype == MPI_DATATYPE_NULL:
        return post_pieces(sending, buf, nbytes, peer, comm, requests, n)
    if sending:
        check_mpi(MPI_Isend(buf, 1, datatype, peer, TAG, comm, &requests[n]))
    else:
        check_mpi(MPI_Irecv(buf, 1, datatype, peer, TAG, comm, &requests[n]))
    return n + 1


cdef int64_t message_pieces(int64_t nbytes, int64_t peer) noexcept:
    return 0 if peer < 0 else max(1, (nbytes + MAX_MESSAGE_BYTES - 1) // MAX_MESSAGE_BYTES)


cdef int make_vector(int64_t nblocks, int64_t count, int64_t stride, int64_t itemsize,
                     MPI_Datatype *out) except -1:
    if nblocks <= 1:
        out[0] = MPI_DATATYPE_NULL
        return 0
    if nblocks * count * itemsize > MAX_MESSAGE_BYTES:
        raise ValueError("strided messages over 1 GiB are not supported; use fewer ranks per node or smaller sizes")
    check_mpi(MPI_Type_create_hvector(<int>nblocks, <int>(count * itemsize), <MPI_Aint>(stride * itemsize),
                                      MPI_BYTE, out))
    check_mpi(MPI_Type_commit(out))
    return 0


cdef class ScheduleOp(CollOp):
    """Executes one rank's schedule on a send, a receive and a scratch buffer."""
    cdef const int64_t[:, ::1] steps
    cdef char *bufs[NBUFS]
    cdef MPI_Comm comms[NCOMMS]
    cdef MPI_Datatype *send_types
    cdef MPI_Datatype *recv_types
    cdef Py_ssize_t ntypes
    cdef MPI_Request *requests  # the messages of posted rows in flight (and the row that completes them)
    cdef int nrequests
    cdef int64_t itemsize
    cdef int dtype
    cdef int op
    cdef MPI_Datatype mpi_type
    cdef MPI_Op mpi_reduction

    def __cinit__(self, *args, **kwargs):
        self.send_types = NULL
        self.recv_types = NULL
        self.ntypes = 0
        self.requests = NULL
        self.nrequests = 0

    def __init__(self, comms, steps, uintptr_t send_addr, uintptr_t recv_addr, uintptr_t scratch_addr,
                 int64_t itemsize, int dtype, int op, keepalive=None):
        """``comms``: the communicators that the schedule's comm column 0, 1, 2 name."""
        if steps.ndim != 2 or steps.shape[1] != NCOLS:
            raise ValueError(f"schedule must have {NCOLS} columns, got shape {steps.shape}")
        comms = list(comms)
        if not 1 <= len(comms) <= NCOMMS:
            raise ValueError(f"give 1 to {NCOMMS} communicators, got {len(comms)}")
        self.bind(comms[0], keepalive)
        cdef Py_ssize_t i
        for i in range(NCOMMS):
            self.comms[i] = (<Comm>comms[i]).ob_mpi if i < len(comms) else MPI_COMM_NULL
        self.steps = steps
        self.bufs[0] = <char *>send_addr
        self.bufs[1] = <char *>recv_addr
        self.bufs[2] = <char *>scratch_addr
        self.itemsize = itemsize
        self.dtype = dtype
        self.op = op
        n = steps.shape[0]
        native_rows = [i for i in range(n) if steps[i, ACTION] in LIBRARY_CODES]
        if native_rows:
            try:
                mpi_types(dtype, op, &self.mpi_type, &self.mpi_reduction)
            except ValueError as error:
                raise ValueError(f"an MPI-library phase needs an MPI datatype and op for this dtype/op: {error}")
            if any(steps[i, ACTION_COUNT] > 2**31 - 1 for i in native_rows):
                raise ValueError("an MPI-library phase count exceeds the int count of MPI-3")
            if any(steps[i, ACTION_NBLOCKS] > 1 for i in native_rows):
                raise ValueError("an MPI-library phase with the ranks' blocks interleaved: only a strided "
                                 "transport runs it (collectives/schedules/rows.py, StepList.mpi_collective)")
        self.send_types = <MPI_Datatype *>calloc(max(n, 1), sizeof(MPI_Datatype))
        self.recv_types = <MPI_Datatype *>calloc(max(n, 1), sizeof(MPI_Datatype))
        if self.send_types == NULL or self.recv_types == NULL:
            raise MemoryError()
        for i in range(n):
            self.send_types[i] = MPI_DATATYPE_NULL
            self.recv_types[i] = MPI_DATATYPE_NULL
        self.ntypes = n
        for i in range(n):
            if steps[i, COMM] >= len(comms) or steps[i, COMM] < 0:
                raise ValueError(f"step {i} names communicator {steps[i, COMM]}, only {len(comms)} given")
            make_vector(steps[i, SEND_NBLOCKS], steps[i, SEND_COUNT], steps[i, SEND_STRIDE], itemsize,
                        &self.send_types[i])
            make_vector(steps[i, RECV_NBLOCKS], steps[i, RECV_COUNT], steps[i, RECV_STRIDE], itemsize,
                        &self.recv_types[i])
        self.nrequests = self._most_in_flight(steps)
        self.requests = <MPI_Request *>calloc(max(self.nrequests, 1), sizeof(MPI_Request))
        if self.requests == NULL:
            raise MemoryError()

    def _most_in_flight(self, steps):
        """The most requests in flight at once: the posted rows before a row that completes them, with
        its own. A schedule ends, and reaches an MPI-library row, with nothing in flight."""
        cdef int64_t most = 0, group = 0, pieces
        cdef Py_ssize_t i
        for i in range(steps.shape[0]):
            if steps[i, ACTION] in LIBRARY_CODES and group:
                raise ValueError(f"step {i}: an MPI-library row while messages of posted rows are in flight")
            pieces = (message_pieces(steps[i, SEND_COUNT] * steps[i, SEND_NBLOCKS] * self.itemsize, steps[i, SEND_PEER])
                      + message_pieces(steps[i, RECV_COUNT] * steps[i, RECV_NBLOCKS] * self.itemsize,
                                       steps[i, RECV_PEER]))
            if steps[i, POST]:
                group += pieces
            elif group:
                most = max(most, group + pieces)
                group = 0
        if group:
            raise ValueError("the schedule's last row is posted: its messages would never complete")
        if most > 2**31 - 1:
            raise ValueError("too many messages in flight at once")
        return most

    def __dealloc__(self):
        cdef Py_ssize_t i
        cdef int finalized = 1
        MPI_Finalized(&finalized)
        for i in range(self.ntypes):
            if not finalized and self.send_types[i] != MPI_DATATYPE_NULL:
                MPI_Type_free(&self.send_types[i])
            if not finalized and self.recv_types[i] != MPI_DATATYPE_NULL:
                MPI_Type_free(&self.recv_types[i])
        free(self.send_types)
        free(self.recv_types)
        free(self.requests)

    cdef inline char *at(self, int64_t buf, int64_t offset) noexcept nogil:
        return self.bufs[buf] + offset * self.itemsize

    cdef int act(self, const int64_t *row) except -1 nogil:
        cdef int64_t b, isz = self.itemsize, count = row[ACTION_COUNT]
        cdef char *dst = self.at(row[DST_BUF], row[DST_OFF])
        cdef char *src = self.at(row[SRC_BUF], row[SRC_OFF]) if row[SRC_BUF] >= 0 else <char *>MPI_IN_PLACE
        cdef char *src2 = self.at(row[SRC2_BUF], row[SRC2_OFF])
        cdef MPI_Comm comm = self.comms[row[COMM]]
        if row[ACTION] == ACT_MPI_ALLGATHER:
            return check_mpi(MPI_Allgather(src, <int>count, self.mpi_type, dst, <int>count, self.mpi_type, comm))
        if row[ACTION] == ACT_MPI_REDUCE_SCATTER:
            return check_mpi(MPI_Reduce_scatter_block(src, dst, <int>count, self.mpi_type, self.mpi_reduction, comm))
        if row[ACTION] == ACT_MPI_ALLREDUCE:
            return check_mpi(MPI_Allreduce(src, dst, <int>count, self.mpi_type, self.mpi_reduction, comm))
        for b in range(row[ACTION_NBLOCKS]):
            if row[ACTION] == ACT_COPY:
                memmove(dst + b * row[DST_STRIDE] * isz, src + b * row[SRC_STRIDE] * isz, count * isz)
            else:
                reduce_into(dst + b * row[DST_STRIDE] * isz, src + b * row[SRC_STRIDE] * isz,
                            src2 + b * row[SRC2_STRIDE] * isz, count, self.dtype, self.op)
        return 0

    cdef int run(self) except -1 nogil:
        cdef Py_ssize_t k
        cdef const int64_t *row
        cdef int64_t isz = self.itemsize
        cdef int in_flight = 0
        cdef bint posting = False  # a posted row came before: this row's messages join its group
        for k in range(self.steps.shape[0]):
            row = &self.steps[k, 0]
            if row[POST] or posting:
                posting = row[POST] != 0
                # receives first, so a peer's message finds its buffer posted
                in_flight = post_message(False, self.at(row[RECV_BUF], row[RECV_OFF]),
                                         row[RECV_COUNT] * row[RECV_NBLOCKS] * isz, self.recv_types[k],
                                         <int>row[RECV_PEER], self.comms[row[COMM]], self.requests, in_flight)
                in_flight = post_message(True, self.at(row[SEND_BUF], row[SEND_OFF]),
                                         row[SEND_COUNT] * row[SEND_NBLOCKS] * isz, self.send_types[k],
                                         <int>row[SEND_PEER], self.comms[row[COMM]], self.requests, in_flight)
                if not posting:
                    check_mpi(MPI_Waitall(in_flight, self.requests, MPI_STATUSES_IGNORE))
                    in_flight = 0
            elif row[SEND_PEER] >= 0 or row[RECV_PEER] >= 0:
                exchange(self.at(row[SEND_BUF], row[SEND_OFF]), row[SEND_COUNT] * row[SEND_NBLOCKS] * isz,
                         self.send_types[k], <int>row[SEND_PEER],
                         self.at(row[RECV_BUF], row[RECV_OFF]), row[RECV_COUNT] * row[RECV_NBLOCKS] * isz,
                         self.recv_types[k], <int>row[RECV_PEER], self.comms[row[COMM]])
            if row[ACTION] != ACT_NONE:
                self.act(row)
        return 0
