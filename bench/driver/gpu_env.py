"""The GPU rows of ``pccl-bench env``: GPUs, binding, NCCL/RCCL, GPU-aware MPI, each with how it was found."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from collectives.libraries import xccl_communicators as xccl
from collectives.memory import backends as devices
from collectives.memory import binding, gpu_aware

Row = tuple[str, str, str]
PROBE_TIMEOUT_S = 60


def _which_device() -> str:
    """rocm for a ROCm build of CuPy, else cuda (also when CuPy is missing)."""
    try:
        import cupy

        return "rocm" if cupy.cuda.runtime.is_hip else "cuda"
    except Exception:
        return "cuda"


def _names(count: int) -> str:
    import cupy

    names = []
    for index in range(count):
        try:
            name = cupy.cuda.runtime.getDeviceProperties(index)["name"]
            names.append(name.decode() if isinstance(name, bytes) else str(name))
        except Exception:
            names.append("?")
    return ", ".join(f"{index}: {name}" for index, name in enumerate(names))


def gpu_aware_row(device: str) -> Row:
    """Asked in a subprocess that initialises MPI (the extension query needs it)."""
    command = [sys.executable, "-m", "collectives.memory.gpu_aware", device]
    how = f"{' '.join(command[1:])} (override, MPI extension query, library switches)"
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=PROBE_TIMEOUT_S,
                              stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        return "GPU-aware MPI", f"unknown: the probe did not finish in {PROBE_TIMEOUT_S} s", how
    except OSError as error:
        return "GPU-aware MPI", f"unknown: the probe did not start: {error}", how
    try:
        answer = json.loads(done.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        tail = " ".join(done.stderr.split())[-300:]
        return "GPU-aware MPI", f"unknown: the probe failed (exit {done.returncode}) {tail}".strip(), how
    if answer["error"]:
        return "GPU-aware MPI", f"unknown: {answer['error']}", how
    verdict = ("yes: device buffers go to MPI (transport mpi-gpu-aware)" if answer["aware"]
               else "no: device buffers are staged through pinned host memory (transport mpi-staged)")
    return "GPU-aware MPI", f"{verdict}; {answer['library']}, {device}", f"{answer['how']} [{how}]"


def local_rank_row(device: str, env: dict[str, str] | None = None) -> Row:
    """Where a rank of a job started here would take its local rank from (before MPI_Init), and the
    GPUs it would see."""
    env = dict(os.environ) if env is None else env
    local, source = binding.launcher_local_rank(env)
    visible = binding.visible_devices(device, env)
    seen = f"; {visible}" if visible else ""
    if local is not None:
        text = f"{source}={local}: the GPU is bound before MPI_Init{seen}"
    else:
        text = ("none set here (outside a job): a job's ranks take it from their launcher before MPI_Init; "
                f"without one, from the shared-memory split after it{seen}")
    return "GPU local rank", text, ", ".join(binding.LOCAL_RANK_VARIABLES)


def gtl_row(libraries: set[str] | None = None, library_text: str | None = None) -> Row | None:
    """Cray MPICH only: whether its GPU transport layer is in the process, which
    MPICH_GPU_SUPPORT_ENABLED=1 needs (or MPI_Init aborts); None for other libraries."""
    from bench.rank.preflight_probe import GTL_PREFIX, gtl_problem, loaded_libraries

    if library_text is None:
        import mpi4py

        if "mpi4py.MPI" not in sys.modules:  # load the library (and what it links) without MPI_Init
            mpi4py.rc.initialize = False
            mpi4py.rc.finalize = False
        from mpi4py import MPI

        library_text = MPI.Get_library_version()
    libraries = loaded_libraries() if libraries is None else libraries
    how = "/proc/self/maps after loading mpi4py's MPI library (docs/PREFLIGHT.md)"
    problem = gtl_problem({"MPICH_GPU_SUPPORT_ENABLED": "1"}, libraries, library_text)
    gtl = sorted(path for path in libraries if os.path.basename(path).startswith(GTL_PREFIX))
    if gtl:
        return "Cray GTL", f"linked: {gtl[0]} (MPICH_GPU_SUPPORT_ENABLED=1 works)", how
    if not problem:
        return None  # not Cray MPICH
    return "Cray GTL", f"not linked: with MPICH_GPU_SUPPORT_ENABLED=1 the pre-flight stops the sweep. {problem}", how


def gpu_rows() -> list[Row]:
    device = _which_device()
    found = devices.probe(device)
    override = os.environ.get(devices.ENV_GPU)
    rows: list[Row] = []
    if found.reason:
        rows.append(("GPU", f"unavailable: {found.reason}; every {device} cell is reported unsupported", found.how))
    else:
        rows.append(("GPU", f"{found.count} {device} device(s) [{_names(found.count)}], {found.runtime}, "
                            f"CuPy {found.cupy_version}", found.how))
    rows.append(("GPU binding", devices.binding_text(override, os.environ.get(devices.ENV_GPU_MAP)),
                 f"${devices.ENV_GPU} or the suite's gpu_bind; ${devices.ENV_GPU_MAP} or the site's gpu_map"))
    rows.append(local_rank_row(device))
    library = xccl.info(device)
    if library.reason:
        rows.append((library.library, f"unavailable: {library.reason}", "cupy.cuda.nccl.available"))
    else:
        usable = "" if not found.reason else " (loaded by CuPy, but there is no usable GPU)"
        rows.append((library.library, f"{library.library} {library.version}{usable}", "cupy.cuda.nccl.get_version()"))
    rows.append(gpu_aware_row(device))
    if (gtl := gtl_row()) is not None:
        rows.append(gtl)
    override = os.environ.get(gpu_aware.ENV_OVERRIDE)
    if override:
        rows.append(("GPU-aware override", f"{gpu_aware.ENV_OVERRIDE}={override}", "environment"))
    return rows
