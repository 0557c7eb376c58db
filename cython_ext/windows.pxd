# Window mode's windows (cython_ext/windows.pyx), on the Starts of cython_ext/timing.pxd.
from mpi4py.libmpi cimport MPI_Comm

from cython_ext.timing cimport Starts

cdef void size_windows(Starts *s, double call_s) noexcept nogil
cdef void resize_windows(Starts *s, int kept, int missed) noexcept nogil
cdef int open_windows(MPI_Comm c, Starts *s) except -1 nogil
cdef int drop_missed(double **t, double **skew, int nops, int start, int count) noexcept nogil
