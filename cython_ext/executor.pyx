"""Run a schedule (collectives/schedule.py) with MPI point-to-point, no GIL.

A schedule is an int64 array, one row per step, in element units. Per row:
optionally send a block to one peer and receive a block from another
(MPI_Sendrecv), then optionally copy or reduce one block locally.
"""
from libc.stdint cimport int64_t, uintptr_t
from libc.string cimport memmove
from mpi4py.libmpi cimport *
from mpi4py.MPI cimport Comm

from cython_ext.core cimport CollOp, check_mpi
from cython_ext.reduce cimport reduce_into

# Keep in the order of collectives.schedule.COLUMNS (a test checks it).
COLUMNS = (
    "send_peer", "send_buf", "send_off", "send_count",
    "recv_peer", "recv_buf", "recv_off", "recv_count",
    "action", "src_buf", "src_off", "src2_buf", "src2_off", "dst_buf", "dst_off", "action_count",
)
cdef enum:
    SEND_PEER, SEND_BUF, SEND_OFF, SEND_COUNT
    RECV_PEER, RECV_BUF, RECV_OFF, RECV_COUNT
    ACTION, SRC_BUF, SRC_OFF, SRC2_BUF, SRC2_OFF, DST_BUF, DST_OFF, ACTION_COUNT
    NCOLS

cdef enum:
    ACT_NONE = 0
    ACT_COPY = 1
    ACT_REDUCE = 2

cdef enum:
    NBUFS = 3          # send, recv, scratch
    TAG = 0x5cc1

# Byte counts above this are sent in pieces so the int count of MPI-3 never overflows.
cdef int64_t MAX_MESSAGE_BYTES = 1 << 30


cdef int exchange(void *sendp, int64_t send_bytes, int send_peer,
                  void *recvp, int64_t recv_bytes, int recv_peer, MPI_Comm comm) except -1 nogil:
    cdef int64_t done_send = 0, done_recv = 0, piece_send, piece_recv
    cdef char *s = <char *>sendp
    cdef char *r = <char *>recvp
    while True:
        piece_send = min(send_bytes - done_send, MAX_MESSAGE_BYTES)
        piece_recv = min(recv_bytes - done_recv, MAX_MESSAGE_BYTES)
        if send_peer >= 0 and recv_peer >= 0:
            check_mpi(MPI_Sendrecv(s + done_send, <int>piece_send, MPI_BYTE, send_peer, TAG,
                                   r + done_recv, <int>piece_recv, MPI_BYTE, recv_peer, TAG,
                                   comm, MPI_STATUS_IGNORE))
        elif send_peer >= 0:
            check_mpi(MPI_Send(s + done_send, <int>piece_send, MPI_BYTE, send_peer, TAG, comm))
        elif recv_peer >= 0:
            check_mpi(MPI_Recv(r + done_recv, <int>piece_recv, MPI_BYTE, recv_peer, TAG,
                               comm, MPI_STATUS_IGNORE))
        done_send += piece_send
        done_recv += piece_recv
        if done_send >= send_bytes and done_recv >= recv_bytes:
            return 0


cdef class ScheduleOp(CollOp):
    """Executes one rank's schedule on a send, a receive and a scratch buffer."""
    cdef const int64_t[:, ::1] steps
    cdef char *bufs[NBUFS]
    cdef int64_t itemsize
    cdef int dtype
    cdef int op

    def __init__(self, Comm comm, steps, uintptr_t send_addr, uintptr_t recv_addr,
                 uintptr_t scratch_addr, int64_t itemsize, int dtype, int op, keepalive=None):
        if steps.ndim != 2 or steps.shape[1] != NCOLS:
            raise ValueError(f"schedule must have {NCOLS} columns, got shape {steps.shape}")
        self.bind(comm, keepalive)
        self.steps = steps
        self.bufs[0] = <char *>send_addr
        self.bufs[1] = <char *>recv_addr
        self.bufs[2] = <char *>scratch_addr
        self.itemsize = itemsize
        self.dtype = dtype
        self.op = op

    cdef inline char *at(self, int64_t buf, int64_t offset) noexcept nogil:
        return self.bufs[buf] + offset * self.itemsize

    cdef int run(self) except -1 nogil:
        cdef Py_ssize_t k
        cdef const int64_t *row
        cdef int64_t isz = self.itemsize
        for k in range(self.steps.shape[0]):
            row = &self.steps[k, 0]
            if row[SEND_PEER] >= 0 or row[RECV_PEER] >= 0:
                exchange(self.at(row[SEND_BUF], row[SEND_OFF]), row[SEND_COUNT] * isz, <int>row[SEND_PEER],
                         self.at(row[RECV_BUF], row[RECV_OFF]), row[RECV_COUNT] * isz, <int>row[RECV_PEER],
                         self.comm)
            if row[ACTION] == ACT_COPY:
                memmove(self.at(row[DST_BUF], row[DST_OFF]), self.at(row[SRC_BUF], row[SRC_OFF]),
                        row[ACTION_COUNT] * isz)
            elif row[ACTION] == ACT_REDUCE:
                reduce_into(self.at(row[DST_BUF], row[DST_OFF]), self.at(row[SRC_BUF], row[SRC_OFF]),
                            self.at(row[SRC2_BUF], row[SRC2_OFF]), row[ACTION_COUNT], self.dtype, self.op)
        return 0

