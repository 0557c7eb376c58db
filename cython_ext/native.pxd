from mpi4py.libmpi cimport MPI_Datatype, MPI_Op

cdef int mpi_types(int dtype, int op, MPI_Datatype *datatype, MPI_Op *reduction) except -1
