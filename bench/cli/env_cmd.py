"""``pccl-bench env``: what is here, and how each fact was found."""

from __future__ import annotations

import os
import socket

from rich.console import Console
from rich.markup import escape
from rich.table import Table


def _mpi_rows() -> list[tuple[str, str, str]]:
    from bench.run.launch import find_mpiexec, mpi_flavour
    from collectives.mpiinfo import extension_mpi_mismatch, mpi_library, mpi_library_text

    flavour = mpi_flavour()  # imports mpi4py without initialising MPI
    name, version = mpi_library()
    first = mpi_library_text().splitlines()
    abi = next((line.split(":", 1)[1].strip() for line in first if line.upper().startswith("MPICH ABI")), "")
    abi_text = f"{flavour} ABI" + (f" (libtool version {abi})" if abi else "")
    import mpi4py

    mismatch = extension_mpi_mismatch()
    return [
        ("MPI library", f"{name} {version}", "MPI_Get_library_version via mpi4py"),
        ("MPI ABI", abi_text, "mpi4py.MPI.get_vendor() and the library version text"),
        ("mpi4py", f"{mpi4py.__version__}", f"import mpi4py ({mpi4py.__file__})"),
        ("mpiexec", find_mpiexec() or "not found", "beside this Python, then $MPIEXEC, then PATH"),
        ("compiled MPI calls", f"MISMATCH: {mismatch}" if mismatch else "the same library as mpi4py",
         "MPI_Get_library_version through cython_ext's own link"),
    ]


def _gpu_rows() -> list[tuple[str, str, str]]:
    from bench.run.gpu_env import gpu_rows

    return gpu_rows()


def _ucx_rows() -> list[tuple[str, str, str]]:
    from collectives.rdma_env import env_rows

    return env_rows()


def env() -> None:
    """Report the MPI library, version and ABI, launcher, cores, GPUs, NCCL/RCCL, GPU-aware MPI, and how each
    was found."""
    table = Table("what", "value", "found by")
    table.add_row("hostname", socket.gethostname(), "socket.gethostname()")
    table.add_row("cores", str(os.cpu_count()), "os.cpu_count()")
    for row in _mpi_rows() + _gpu_rows() + _ucx_rows():
        table.add_row(*(escape(text) for text in row))
    Console().print(table)
