"""In-tree build backend: setuptools', plus the PyPI MPICH wheel as a build requirement when
this machine has no MPI compiler wrapper.

``pip install ".[mpich]"`` (pip's default isolated build, pipx, uv) builds in a fresh
environment with only the declared build requirements, where setup.py finds no ``mpicc``.
Adding ``mpich`` only then keeps a cluster build on the system MPI ($MPICC, or an ``mpicc``
on PATH), which the extensions must be linked against there. The wheel's ``mpicc`` links
libmpi.so.12, the ABI that the ``mpich`` extra gives mpi4py at run time.
"""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

from setuptools import build_meta as _setuptools
from setuptools.build_meta import *  # noqa: F403  (every hook this module does not override)

#: the same floor as the ``mpich`` extra in pyproject.toml
MPICH_WHEEL = "mpich>=4.2"


def mpi_wrapper() -> str | None:
    """The wrapper setup.py would use, in its order: $MPICC, mpicc beside Python, mpicc on PATH."""
    if os.environ.get("MPICC"):
        return os.environ["MPICC"]
    beside_python = Path(sys.prefix) / "bin" / "mpicc"
    if beside_python.exists():
        return str(beside_python)
    return shutil.which("mpicc")


#: tells setup.py that this run only lists requirements: no wrapper is no error yet
REQUIRES_QUERY = "PCCL_BENCH_BUILD_REQUIRES_QUERY"


def _query(hook, config_settings) -> list[str]:
    os.environ[REQUIRES_QUERY] = "1"
    try:
        return hook(config_settings)
    finally:
        del os.environ[REQUIRES_QUERY]


def _with_mpich(requires: list[str]) -> list[str]:
    if mpi_wrapper() is not None:
        return requires
    print(f"pccl-bench: no MPI compiler wrapper ($MPICC, mpicc): building with the {MPICH_WHEEL} wheel's mpicc",
          file=sys.stderr)
    return [*requires, MPICH_WHEEL]


def get_requires_for_build_wheel(config_settings=None) -> list[str]:
    return _with_mpich(_query(_setuptools.get_requires_for_build_wheel, config_settings))


def get_requires_for_build_editable(config_settings=None) -> list[str]:
    return _with_mpich(_query(_setuptools.get_requires_for_build_editable, config_settings))
