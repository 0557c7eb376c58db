# C-level base of everything the timing loop can run: one collective call on
# fixed buffers, callable without the GIL.
from mpi4py.libmpi cimport MPI_Comm

cdef int check_mpi(int ierr) except -1 nogil

cdef class CollOp:
    cdef MPI_Comm comm
    # Python objects (arrays, other ops) that must outlive the raw pointers.
    cdef object keepalive
    # What moved the bytes as the op knows it once built (shm's path, UCX's lanes): the
    # ``transport`` column; '' where the transport's own name says it.
    cdef public str moved_by
    cdef int run(self) except -1 nogil
