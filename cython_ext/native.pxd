from mpi4py.libmpi cimport MPI_Datatype, MPI_Op

from cython_ext.core cimport CollOp
from cython_ext.kinds cimport Kind

cdef int mpi_types(int dtype, int op, MPI_Datatype *datatype, MPI_Op *reduction) except -1


cdef class NativeCollective(CollOp):
    # the call's arguments as MPI takes them (cython_ext/nonblocking.pyx posts the same call)
    cdef Kind kind
    cdef void *send
    cdef void *recv
    cdef int count
    cdef MPI_Datatype datatype
    cdef MPI_Op mpiop
