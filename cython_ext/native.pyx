"""The MPI library's own collectives, called straight from C."""
from libc.limits cimport INT_MAX
from libc.stdint cimport int64_t, uintptr_t
from mpi4py.libmpi cimport *
from mpi4py.MPI cimport Comm

from cython_ext.core cimport CollOp, check_mpi
from cython_ext.kinds cimport K_ALLGATHER, K_REDUCE_SCATTER, Kind, kind_code
from cython_ext.reduce cimport DT_INT32, DT_INT64, DT_FLOAT32, DT_FLOAT64, OP_SUM, OP_PROD, OP_MIN, OP_MAX


cdef int mpi_datatype(int dtype, MPI_Datatype *out) noexcept nogil:
    if dtype == DT_INT32:
        out[0] = MPI_INT32_T
    elif dtype == DT_INT64:
        out[0] = MPI_INT64_T
    elif dtype == DT_FLOAT32:
        out[0] = MPI_FLOAT
    elif dtype == DT_FLOAT64:
        out[0] = MPI_DOUBLE
    else:
        return -1
    return 0


cdef int mpi_op(int op, MPI_Op *out) noexcept nogil:
    if op == OP_SUM:
        out[0] = MPI_SUM
    elif op == OP_PROD:
        out[0] = MPI_PROD
    elif op == OP_MIN:
        out[0] = MPI_MIN
    elif op == OP_MAX:
        out[0] = MPI_MAX
    else:
        return -1
    return 0


def unsupported_reason(int dtype, int op, int64_t count):
    """Why the native call cannot run this cell, or None."""
    cdef MPI_Datatype dt
    cdef MPI_Op mop
    if mpi_datatype(dtype, &dt) != 0:
        return "the MPI standard has no datatype for this dtype (float16 is an MPICH/Open MPI extension)"
    if mpi_op(op, &mop) != 0:
        return f"no MPI reduction for op code {op}"
    if count > INT_MAX:
        return f"count {count} exceeds the int count of MPI-3 collectives"
    return None


cdef class NativeCollective(CollOp):
    """MPI_Allgather / MPI_Reduce_scatter_block / MPI_Allreduce on raw addresses."""
    cdef Kind kind
    cdef void *send
    cdef void *recv
    cdef int count
    cdef MPI_Datatype datatype
    cdef MPI_Op mpiop

    def __init__(self, Comm comm, str kind, uintptr_t send_addr, uintptr_t recv_addr, int64_t count,
                 int dtype, int op, bint in_place, keepalive=None):
        reason = unsupported_reason(dtype, op, count)
        if reason is not None:
            raise ValueError(reason)
        self.bind(comm, keepalive)
        self.kind = kind_code(kind)
        self.send = MPI_IN_PLACE if in_place else <void *>send_addr
        self.recv = <void *>recv_addr
        self.count = <int>count
        mpi_datatype(dtype, &self.datatype)
        mpi_op(op, &self.mpiop)

    cdef int run(self) except -1 nogil:
        if self.kind == K_ALLGATHER:
            return check_mpi(MPI_Allgather(self.send, self.count, self.datatype,
                                           self.recv, self.count, self.datatype, self.comm))
        if self.kind == K_REDUCE_SCATTER:
            return check_mpi(MPI_Reduce_scatter_block(self.send, self.recv, self.count,
                                                      self.datatype, self.mpiop, self.comm))
        return check_mpi(MPI_Allreduce(self.send, self.recv, self.count, self.datatype,
                                       self.mpiop, self.comm))
