"""Which MPI library mpi4py loaded, read from the library itself."""

from __future__ import annotations

from functools import lru_cache


@lru_cache(maxsize=1)
def mpi_library() -> tuple[str, str]:
    """(name, version), e.g. ("MPICH", "5.0.2"), ("Cray MPICH", "8.1.32"), ("Open MPI", "5.0.3")."""
    from mpi4py import MPI

    text = MPI.Get_library_version()
    vendor, version = MPI.get_vendor()
    name = "Cray MPICH" if "CRAY MPICH" in text.upper() else vendor
    return name, ".".join(str(part) for part in version)


def mpi_library_text() -> str:
    from mpi4py import MPI

    return MPI.Get_library_version().strip()
