"""``pccl-bench env``: what is here, and how each fact was found."""

from __future__ import annotations

import os
import socket

from rich.console import Console
from rich.markup import escape
from rich.table import Table

BUILD_RECORD = "cython_ext/_build_info.py (written by setup.py)"


def _mpi_rows() -> list[tuple[str, str, str]]:
    from bench.driver.launchers import mpi_flavour
    from bench.driver.launchers.mpiexec import find_mpiexec
    from bench.errors import BadInput
    from collectives.libraries.mpi_library import build_info, extension_mpi_mismatch, mpi_library, mpi_library_text

    flavour = mpi_flavour()  # imports mpi4py without initialising MPI
    # Before any extension is imported: one built for the other MPI does not import at all.
    mismatch = extension_mpi_mismatch()
    if mismatch:
        raise BadInput("", mismatch)
    name, version = mpi_library()
    first = mpi_library_text().splitlines()
    abi = next((line.split(":", 1)[1].strip() for line in first if line.upper().startswith("MPICH ABI")), "")
    abi_text = f"{flavour} ABI" + (f" (libtool version {abi})" if abi else "")
    import mpi4py

    info = build_info()
    wrapper = "an MPI wheel's mpicc in pip's build environment" if info and "pip-build-env" in info.MPICC else (
        info.MPICC if info else "")
    built = f"{info.MPI_LIBRARY} ({wrapper})" if info is not None else "not recorded (an older build)"
    if info is not None and getattr(info, "OPTIMISATION", "-O3") != "-O3":
        built += f"; compiled {info.OPTIMISATION}, not -O3: not for timing"
    return [
        ("MPI library", f"{name} {version}", "MPI_Get_library_version via mpi4py"),
        ("MPI ABI", abi_text, "mpi4py.MPI.get_vendor() and the library version text"),
        ("mpi4py", f"{mpi4py.__version__}", f"import mpi4py ({mpi4py.__file__})"),
        ("mpiexec", find_mpiexec() or "not found", "beside this Python, then $MPIEXEC, then PATH"),
        ("extensions built with", built, BUILD_RECORD),
        ("compiled MPI calls", "the same library as mpi4py", "MPI_Get_library_version through cython_ext's own link"),
    ]


def _gpu_rows() -> list[tuple[str, str, str]]:
    from bench.driver.gpu_env import gpu_rows

    return gpu_rows()


def ucx_build_row() -> tuple[str, str, str] | None:
    """The UCX the binding was built against, checked against the one loaded here."""
    from collectives.libraries.mpi_library import build_info
    from collectives.transports.rdma import ops as rdma

    info = build_info()
    if info is None:
        return None
    if info.UCX_SKIPPED:
        return ("UCX binding build", f"not built: {info.UCX_SKIPPED}", BUILD_RECORD)
    text = f"headers of UCX {info.UCX_VERSION} ({info.UCX_PREFIX})"
    if rdma.binding_reason() is None:
        loaded = rdma.ucx_library()[0]
        if _version(loaded)[:2] < _version(info.UCX_VERSION)[:2]:
            text += (f"; WARNING: the UCX loaded here ({loaded}) is older than those headers (UCX promises "
                     "only newer libraries to run older builds): rebuild against headers no newer than it "
                     "(UCX_HOME=<that UCX>, or pip's isolated build: the UCX wheel's 1.15)")
    return ("UCX binding build", text, BUILD_RECORD + ", ucp_get_version_string")


def _version(text: str) -> tuple[int, ...]:
    parts = []
    for part in text.split("."):
        digits = "".join(char for char in part if char.isdigit())
        if not digits:
            break
        parts.append(int(digits))
    return tuple(parts)


def _ucx_rows() -> list[tuple[str, str, str]]:
    from collectives.transports.rdma.env import env_rows

    build = ucx_build_row()
    return env_rows() + ([build] if build else [])


def env() -> None:
    """Report the MPI library, version and ABI, launcher, cores, GPUs, NCCL/RCCL, GPU-aware MPI, and how each
    was found. Exit 2 with one line where the compiled extensions were built for another MPI."""
    table = Table("what", "value", "found by")
    table.add_row("hostname", socket.gethostname(), "socket.gethostname()")
    table.add_row("cores", str(os.cpu_count()), "os.cpu_count()")
    for row in _mpi_rows() + _gpu_rows() + _ucx_rows():
        table.add_row(*(escape(text) for text in row))
    Console().print(table)
