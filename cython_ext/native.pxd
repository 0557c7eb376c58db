from mpi4py.libmpi cimport MPI_Datatype, MPI_Op

cdef int mpi_datatype(int dtype, MPI_Datatype *out) noexcept nogil
cdef int mpi_op(int op, MPI_Op *out) noexcept nogil
