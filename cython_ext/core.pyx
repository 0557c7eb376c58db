from mpi4py.libmpi cimport (MPI_SUCCESS, MPI_MAX_ERROR_STRING, MPI_Error_string, MPI_COMM_NULL,
                            MPI_MAX_LIBRARY_VERSION_STRING, MPI_Get_library_version)
from mpi4py.MPI cimport Comm
from cpython.ref cimport PyObject
from libc.stdlib cimport free, malloc


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
        self.moved_by = ""

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


cdef class Sequence(CollOp):
    """CollOps run one after another (a schedule cut where some rows run by another transport,
    collectives/executors/compose.py). Takes the GIL between parts to walk the list (about 0.1 us per part).
    ``keys``: per part, the (communicator index, library action) a transport ran it for, or None
    for the executor's parts (how a composition says which transport op moved which phase)."""
    cdef public list parts
    cdef public list keys

    def __init__(self, Comm comm, parts, keepalive=None, keys=None):
        self.bind(comm, keepalive)
        self.parts = list(parts)
        self.keys = list(keys) if keys is not None else [None] * len(self.parts)
        if len(self.keys) != len(self.parts):
            raise ValueError(f"Sequence: {len(self.keys)} keys for {len(self.parts)} parts")
        if not all(isinstance(part, CollOp) for part in self.parts):
            raise TypeError("Sequence parts must be cython_ext CollOps")

    cdef int run(self) except -1 nogil:
        with gil:
            return self.run_parts()

    cdef int run_parts(self) except -1:
        cdef CollOp part
        for part in self.parts:
            with nogil:
                part.run()
        return 0


cdef class Rotating(CollOp):
    """One call of the same collective on buffers that move: each run calls the next of ``parts``
    (one op built per buffer position, bench/rank/buffers.py), round and round. The part is picked
    without the GIL: a borrowed pointer into ``parts``, which holds the references, and a counter."""
    cdef public list parts
    cdef PyObject **ops
    cdef Py_ssize_t count
    #: the part the next run calls
    cdef public Py_ssize_t position

    def __init__(self, Comm comm, parts, keepalive=None):
        self.bind(comm, keepalive)
        self.parts = list(parts)
        if not self.parts:
            raise ValueError("Rotating: no parts")
        if not all(isinstance(part, CollOp) for part in self.parts):
            raise TypeError("Rotating parts must be cython_ext CollOps")
        self.ops = <PyObject **> malloc(len(self.parts) * sizeof(PyObject *))
        if self.ops == NULL:
            raise MemoryError()
        for index, part in enumerate(self.parts):
            self.ops[index] = <PyObject *> part
        self.count = len(self.parts)
        self.position = 0

    def __dealloc__(self):
        free(self.ops)

    cdef int run(self) except -1 nogil:
        cdef Py_ssize_t at = self.position
        self.position = at + 1 if at + 1 < self.count else 0
        return (<CollOp> self.ops[at]).run()


cdef class PyCallOp(CollOp):
    """A Python callable as a CollOp, followed by the call that waits for its work (a device op:
    CuPy launches kernels from Python, and the stream's synchronize ends the call). The timing
    loop times both; host ops never go through here and keep the loop free of the GIL."""
    cdef public object call
    cdef public object wait

    def __init__(self, Comm comm, call, wait=None, keepalive=None):
        self.bind(comm, keepalive)
        self.call, self.wait = call, wait

    cdef int run(self) except -1 nogil:
        with gil:
            self.call()
            if self.wait is not None:
                self.wait()
        return 0
