"""Build the Cython hot paths against the MPI that mpi4py will load.

The compiler wrapper is, in order: $MPICC; the ``mpicc`` beside this Python
(the PyPI MPICH wheel in a virtual environment); ``mpicc`` on PATH. Where there is none,
the in-tree build backend (buildsys/pccl_backend.py) makes the MPICH wheel a build
requirement, so pip's isolated build finds that wheel's ``mpicc`` on PATH.

The UCX binding (cython_ext/ucx, cython_ext/rdma) is built only where UCX is found:
$UCX_HOME, else ``pkg-config ucx``, else the PyPI UCX wheel (the ``rdma`` extra,
package ``libucx``); each needs include/ucp/api/ucp.h and lib/libucp.so.
"""

import importlib.util
import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import mpi4py
from Cython.Build import cythonize
from setuptools import Extension, setup

# The in-tree build backend (buildsys/pccl_backend.py) knows the wrapper order ($MPICC, mpicc beside
# Python, mpicc on PATH) and sets REQUIRES_QUERY while setuptools runs this file only to list build
# requirements; one definition serves both.
sys.path.insert(0, str(Path(__file__).resolve().parent / "buildsys"))
from pccl_backend import REQUIRES_QUERY  # noqa: E402
from pccl_backend import mpi_wrapper as find_mpicc  # noqa: E402


def mpi_library_dirs(mpicc: str) -> list[str]:
    """The folders the wrapper links libmpi from, as it reports them (MPICH ``-show``, Open MPI
    ``--showme:link``); empty where it reports none (Cray ``cc``).

    They go before every other ``-L``: setuptools adds a shared-library Python's LIBDIR (Debian's
    and Ubuntu's /usr/lib/x86_64-linux-gnu) ahead of the wrapper's own flags, and where a system
    Open MPI sits there ``-lmpi`` would bind the extensions to it while mpi4py loads the wheel's
    MPICH: MPI_Init in one library, every call in the other.
    """
    for flag in ("-show", "--showme:link"):
        try:
            shown = subprocess.run([*shlex.split(mpicc), flag], capture_output=True, text=True, timeout=60)
        except (OSError, subprocess.TimeoutExpired):
            continue
        if shown.returncode == 0:
            folders = [arg[2:] for arg in shlex.split(shown.stdout) if arg.startswith("-L") and len(arg) > 2]
            if folders:
                return folders
    return []


def find_ucx() -> tuple[Path | None, str]:
    """(UCX prefix, how it was found), or (None, why not)."""
    tried = []
    candidates = []
    if os.environ.get("UCX_HOME"):
        candidates.append((Path(os.environ["UCX_HOME"]), "$UCX_HOME"))
    if shutil.which("pkg-config"):
        found = subprocess.run(["pkg-config", "--variable=prefix", "ucx"], capture_output=True, text=True)
        if found.returncode == 0 and found.stdout.strip():
            candidates.append((Path(found.stdout.strip()), "pkg-config ucx"))
    wheel = importlib.util.find_spec("libucx")
    if wheel is not None and wheel.submodule_search_locations:
        candidates.append((Path(next(iter(wheel.submodule_search_locations))), "the libucx wheel"))
    for prefix, how in candidates:
        if (prefix / "include/ucp/api/ucp.h").exists() and (prefix / "lib/libucp.so").exists():
            return prefix, how
        tried.append(f"{how} ({prefix})")
    return None, ("no include/ucp/api/ucp.h with lib/libucp.so in " + ", ".join(tried) if tried
                  else "no $UCX_HOME, no pkg-config ucx, no libucx wheel (pip install -e '.[rdma]')")


def mpi_extensions(mpicc: str) -> list[Extension]:
    # setuptools uses CC for both compiling and linking the shared object.
    os.environ["CC"] = mpicc
    os.environ["LDSHARED"] = f"{mpicc} -shared"
    mpi_dirs = mpi_library_dirs(mpicc)
    print(f"pccl-bench: compiling with {mpicc}, libmpi from {', '.join(mpi_dirs) or 'its default'}",
          file=sys.stderr)
    extensions = [
        Extension(
            f"cython_ext.{name}",
            [f"cython_ext/{name}.pyx"],
            include_dirs=[mpi4py.get_include(), "cython_ext"],
            library_dirs=mpi_dirs,
            extra_compile_args=["-O3", "-fno-strict-aliasing"],
        )
        for name in MODULES
    ]
    ucx_prefix, ucx_how = find_ucx()
    if ucx_prefix is None:
        print(f"pccl-bench: not building the UCX binding (cython_ext/ucx, rdma): {ucx_how}", file=sys.stderr)
        return extensions
    print(f"pccl-bench: building the UCX binding against {ucx_prefix} ({ucx_how})", file=sys.stderr)
    return extensions + [
        Extension(
            f"cython_ext.{name}",
            [f"cython_ext/{name}.pyx"],
            include_dirs=[mpi4py.get_include(), "cython_ext", str(ucx_prefix / "include")],
            library_dirs=[*mpi_dirs, str(ucx_prefix / "lib")],
            runtime_library_dirs=[str(ucx_prefix / "lib")],
            libraries=["ucp", "ucs"],
            extra_compile_args=["-O3", "-fno-strict-aliasing"],
        )
        for name in ("ucx", "rdma")
    ]


MODULES = ["core", "reduce", "native", "executor", "clock", "timing", "shm"]
mpicc = find_mpicc()
if mpicc is None and os.environ.get(REQUIRES_QUERY):
    # buildsys/pccl_backend.py only asks for the build requirements, and adds the MPICH wheel
    # because there is no wrapper: the build proper then finds the wheel's mpicc.
    setup()
elif mpicc is None:
    sys.exit(
        "pccl-bench: no MPI compiler wrapper found. Set MPICC (for example MPICC=cc on Cray), "
        "or install the embedded MPICH with `pip install mpich` first."
    )
else:
    setup(
        ext_modules=cythonize(
            mpi_extensions(mpicc),
            compiler_directives={"language_level": "3", "boundscheck": False, "wraparound": False},
        )
    )
