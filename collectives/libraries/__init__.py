"""The vendor libraries the transports call, as found at run time: which MPI library mpi4py and the
extensions load (mpi_library.py), NCCL/RCCL through CuPy and a job's communicators
(xccl_communicators.py), NCCL/RCCL's own debug lines (xccl_debug_log.py). Below memory/ (a GPU
context holds the communicators; GPU-aware MPI depends on the library) and transports/, importing no
other floor of the library."""
