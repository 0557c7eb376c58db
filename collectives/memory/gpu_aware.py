"""Is the MPI library GPU-aware (may it be handed device pointers)? Decided once per job, with how.

In this order:
1. the override ``$PCCL_BENCH_GPU_AWARE`` (``auto`` | ``yes`` | ``no``; a suite's ``gpu_aware`` sets it);
2. the library's own answer, where the loaded libmpi has the extension query:
   MPICH family ``MPIX_GPU_query_support(MPIX_GPU_SUPPORT_CUDA|HIP, &flag)``,
   Open MPI ``MPIX_Query_cuda_support()`` / ``MPIX_Query_rocm_support()`` (MPI must be initialised);
3. the library's environment switches: Cray MPICH accepts device pointers only with
   ``MPICH_GPU_SUPPORT_ENABLED=1``; MPICH turns GPU support off with ``MPIR_CVAR_ENABLE_GPU=0``;
4. otherwise not GPU-aware: buffers are staged through pinned host memory.

Run as ``python -m collectives.memory.gpu_aware [cuda|rocm]`` it initialises MPI and prints the decision
as JSON (``pccl-bench env`` does that in a subprocess).
"""

from __future__ import annotations

import ctypes
import json
import os
import sys
from collections.abc import Mapping
from dataclasses import asdict, dataclass

ENV_OVERRIDE = "PCCL_BENCH_GPU_AWARE"
CHOICES = ("auto", "yes", "no")
#: MPICH's mpi.h: MPIX_GPU_SUPPORT_CUDA (0), _ZE (1), _HIP (2)
MPIX_GPU_SUPPORT = {"cuda": 0, "rocm": 2}
OMPI_QUERY = {"cuda": "MPIX_Query_cuda_support", "rocm": "MPIX_Query_rocm_support"}
#: libraries beside libmpi that are not it (language bindings, Cray's GPU transport layer)
NOT_LIBMPI = ("libmpi_cxx", "libmpifort", "libmpi_mpifh", "libmpi_usempi", "libmpi_gtl")


@dataclass(frozen=True)
class GpuAwareness:
    aware: bool
    how: str

    @property
    def transport(self) -> str:
        return "mpi-gpu-aware" if self.aware else "mpi-staged"


def loaded_libmpi() -> str | None:
    """Path of the libmpi this process has loaded (after ``from mpi4py import MPI``), from /proc/self/maps."""
    try:
        with open("/proc/self/maps") as maps:
            paths = {line.split()[-1] for line in maps if "/libmpi" in line}
    except OSError:
        return None
    names = sorted(path for path in paths if os.path.basename(path).startswith(("libmpi.", "libmpi_")))
    core = [path for path in names if not os.path.basename(path).startswith(NOT_LIBMPI)]
    return (core or names or [None])[0]


def query_library(device: str, library=None) -> tuple[bool | None, str]:
    """The library's own answer (None: it has no query, or MPI is not initialised), and how it was asked."""
    if library is None:
        from mpi4py import MPI

        if not MPI.Is_initialized():
            return None, "extension query skipped: MPI is not initialised"
        path = loaded_libmpi()
        try:
            library = ctypes.CDLL(path) if path else ctypes.CDLL(None)
        except OSError as error:
            return None, f"extension query skipped: cannot open {path}: {error}"
    query = getattr(library, "MPIX_GPU_query_support", None)
    if query is not None:
        query.argtypes, query.restype = [ctypes.c_int, ctypes.POINTER(ctypes.c_int)], ctypes.c_int
        flag = ctypes.c_int(0)
        code = MPIX_GPU_SUPPORT[device]
        if query(code, ctypes.byref(flag)) == 0:
            name = {0: "CUDA", 2: "HIP"}[code]
            return bool(flag.value), f"MPIX_GPU_query_support(MPIX_GPU_SUPPORT_{name}) = {flag.value}"
    name = OMPI_QUERY[device]
    query = getattr(library, name, None)
    if query is not None:
        query.argtypes, query.restype = [], ctypes.c_int
        value = query()
        return bool(value), f"{name}() = {value}"
    return None, "the MPI library has no GPU-support query (MPIX_GPU_query_support, MPIX_Query_*_support)"


def env_switch(library_name: str, env: Mapping[str, str]) -> tuple[bool | None, str]:
    """What the library's own environment switches say (None: nothing)."""
    if "CRAY" in library_name.upper():
        value = env.get("MPICH_GPU_SUPPORT_ENABLED", "")
        if value == "1":
            return True, "Cray MPICH with MPICH_GPU_SUPPORT_ENABLED=1"
        return False, f"Cray MPICH without MPICH_GPU_SUPPORT_ENABLED=1 (it is {value or 'unset'})"
    if env.get("MPIR_CVAR_ENABLE_GPU", "") == "0":
        return False, "MPIR_CVAR_ENABLE_GPU=0 turns the library's GPU support off"
    return None, ""


def decide(override: str, library_answer: tuple[bool | None, str], switch: tuple[bool | None, str]) -> GpuAwareness:
    """Combine the three sources in order (module docstring). ValueError for a bad override."""
    choice = (override or "auto").strip().lower()
    if choice not in CHOICES:
        raise ValueError(f"{ENV_OVERRIDE}={override!r}: expected one of {CHOICES}")
    if choice != "auto":
        return GpuAwareness(choice == "yes", f"override {ENV_OVERRIDE}={choice} (suite gpu_aware)")
    for answer, how in (library_answer, switch):
        if answer is not None:
            return GpuAwareness(answer, how)
    detail = f" ({library_answer[1]})" if library_answer[1] else ""
    return GpuAwareness(False, f"no query answered and no switch set{detail}: staging through pinned host memory")


def detect(device: str, env: Mapping[str, str] | None = None, library=None) -> GpuAwareness:
    """The decision for this process (MPI initialised for the library query)."""
    from collectives.libraries.mpi_library import mpi_library

    env = os.environ if env is None else env
    override = env.get(ENV_OVERRIDE, "auto")
    if (override or "auto").strip().lower() != "auto":
        return decide(override, (None, ""), (None, ""))
    return decide(override, query_library(device, library), env_switch(mpi_library()[0], env))


def main(argv: list[str]) -> int:
    import mpi4py

    mpi4py.rc.thread_level = "single"
    from mpi4py import MPI  # noqa: F401  (initialises MPI for the query)

    from collectives.libraries.mpi_library import mpi_library

    device = argv[0] if argv else "cuda"
    try:
        result = {**asdict(detect(device)), "error": ""}
    except ValueError as error:
        result = {"aware": False, "how": "", "error": str(error)}
    print(json.dumps({**result, "device": device, "library": " ".join(mpi_library()),
                      "libmpi": loaded_libmpi() or ""}))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
