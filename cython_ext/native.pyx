"""The MPI library's own collectives, called straight from C."""
from libc.limits cimport INT_MAX
from libc.stdint cimport int64_t, uintptr_t
from mpi4py.libmpi cimport *
from mpi4py.MPI cimport Comm, Datatype, Op

from mpi4py import MPI

from cython_ext.core cimport CollOp, check_mpi
from cython_ext.kinds cimport K_ALLGATHER, K_REDUCE_SCATTER, Kind, kind_code
from cython_ext.reduce cimport DT_INT32, DT_INT64, DT_FLOAT32, DT_FLOAT64, OP_SUM, OP_PROD, OP_MIN, OP_MAX


#: the MPI datatype and reduction of each code of cython_ext/reduce.pxd (float16 has no standard MPI datatype)
DATATYPES = {DT_INT32: MPI.INT32_T, DT_INT64: MPI.INT64_T, DT_FLOAT32: MPI.FLOAT, DT_FLOAT64: MPI.DOUBLE}
REDUCTIONS = {OP_SUM: MPI.SUM, OP_PROD: MPI.PROD, OP_MIN: MPI.MIN, OP_MAX: MPI.MAX}


def unsupported_reason(int dtype, int op, int64_t count):
    """Why the native call cannot run this cell, or None."""
    if dtype not in DATATYPES:
        return "the MPI standard has no datatype for this dtype (float16 is an MPICH/Open MPI extension)"
    if op not in REDUCTIONS:
        return f"no MPI reduction for op code {op}"
    if count > INT_MAX:
        return f"count {count} exceeds the int count of MPI-3 collectives"
    return None


cdef int mpi_types(int dtype, int op, MPI_Datatype *datatype, MPI_Op *reduction) except -1:
    """The MPI datatype and reduction of these codes (mpi4py's handles); ValueError where MPI has none."""
    reason = unsupported_reason(dtype, op, 0)
    if reason is not None:
        raise ValueError(reason)
    datatype[0] = (<Datatype>DATATYPES[dtype]).ob_mpi
    reduction[0] = (<Op>REDUCTIONS[op]).ob_mpi
    return 0


#: the collectives NativeCollective calls (cython_ext/kinds.pxd); others run through their spec's mpi_call
KINDS = ("allgather", "reduce_scatter", "allreduce")


cdef class NativeCollective(CollOp):
    """MPI_Allgather / MPI_Reduce_scatter_block / MPI_Allreduce on raw addresses (its fields: native.pxd)."""

    def __init__(self, Comm comm, str kind, uintptr_t send_addr, uintptr_t recv_addr, int64_t count,
                 int dtype, int op, bint in_place, keepalive=None):
        if count > INT_MAX:
            raise ValueError(unsupported_reason(dtype, op, count))
        mpi_types(dtype, op, &self.datatype, &self.mpiop)
        self.bind(comm, keepalive)
        self.kind = kind_code(kind)
        self.send = MPI_IN_PLACE if in_place else <void *>send_addr
        self.recv = <void *>recv_addr
        self.count = <int>count

    cdef int run(self) except -1 nogil:
        if self.kind == K_ALLGATHER:
            return check_mpi(MPI_Allgather(self.send, self.count, self.datatype,
                                           self.recv, self.count, self.datatype, self.comm))
        if self.kind == K_REDUCE_SCATTER:
            return check_mpi(MPI_Reduce_scatter_block(self.send, self.recv, self.count,
                                                      self.datatype, self.mpiop, self.comm))
        return check_mpi(MPI_Allreduce(self.send, self.recv, self.count, self.datatype,
                                       self.mpiop, self.comm))
