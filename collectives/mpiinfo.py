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


@lru_cache(maxsize=1)
def extension_mpi_mismatch() -> str | None:
    """Why the compiled extensions call a different MPI library than mpi4py loaded, or None.

    Two libraries in one process (a system Open MPI found before the wheel's MPICH at build time,
    say) abort at the first compiled call with "called before MPI_INIT"; this names the cause.
    """
    try:
        from cython_ext.core import linked_mpi_library_version
    except ImportError as error:
        return f"the compiled extensions (cython_ext) do not load ({error}): pip install --no-build-isolation -e ."
    loaded = _normalised(mpi_library_text())
    linked = _normalised(linked_mpi_library_version())
    if linked == loaded:
        return None
    return (f"the compiled extensions (cython_ext) call {_first_line(linked)} but mpi4py loaded "
            f"{_first_line(loaded)}: rebuild them against mpi4py's MPI "
            "(pip install --no-build-isolation -e . with that MPI's mpicc first, or MPICC=...)")


def _normalised(text: str) -> str:
    # Open MPI counts the terminating NUL in the length; MPICH pads its fields with spaces.
    return "\n".join(" ".join(line.split()) for line in text.replace("\0", "").strip().splitlines())


def _first_line(text: str) -> str:
    return text.splitlines()[0] if text else "(empty version text)"
