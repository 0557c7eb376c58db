from mpi4py.libmpi cimport MPI_SUCCESS, MPI_MAX_ERROR_STRING, MPI_Error_string, MPI_COMM_NULL
from mpi4py.MPI cimport Comm


class MPICallError(RuntimeError):
    """An MPI call returned an error code."""


cdef int check_mpi(int ierr) except -1 nogil:
    cdef char text[MPI_MAX_ERROR_STRING + 1]
    cdef int length = 0
    if ierr == MPI_SUCCESS:
        return 0
    MPI_Error_string(ierr, text, &length)
    with gil:
        raise MPICallError(f"MPI error {ierr}: {text[:length].decode(errors='replace')}")


cdef class CollOp:
    """One collective call on fixed buffers; subclasses implement ``run``."""

    def __cinit__(self, *args, **kwargs):
        self.comm = MPI_COMM_NULL
        self.keepalive = None

    cdef int run(self) except -1 nogil:
        with gil:
            raise NotImplementedError(type(self).__name__)

    def __call__(self):
        """Run the call once (for checks and the library API)."""
        with nogil:
            self.run()

    def bind(self, Comm comm, keepalive=None):
        self.comm = comm.ob_mpi
        self.keepalive = keepalive
        return self
