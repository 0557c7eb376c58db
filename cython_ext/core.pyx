from mpi4py.libmpi cimport (MPI_SUCCESS, MPI_MAX_ERROR_STRING, MPI_Error_string, MPI_COMM_NULL,
                            MPI_MAX_LIBRARY_VERSION_STRING, MPI_Get_library_version)
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


def linked_mpi_library_version() -> str:
    """MPI_Get_library_version through this extension's own link (legal before MPI_Init): the
    library every compiled MPI call lands in, whichever one mpi4py chose to load."""
    cdef char text[MPI_MAX_LIBRARY_VERSION_STRING + 1]
    cdef int length = 0
    check_mpi(MPI_Get_library_version(text, &length))
    return text[:length].decode(errors="replace")


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
