"""How every rank starts MPI: its GPU first (GPU jobs), then MPI_Init_thread; the worker and
``--launcher none`` (bench/sweep/inside.py) both start here.

Open MPI's smcuda, UCX's CUDA/ROCm support and Cray MPICH's GTL set themselves up for the device
that is current at MPI_Init: a rank that picks its GPU after it may register memory on GPU 0 from
every rank of the node. The local rank comes from the launcher's variables
(collectives.memory.binding.LOCAL_RANK_VARIABLES); with none set the job binds after MPI_Init from
the shared-memory split, and every GPU row says so (``gpu_local_rank_from``).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping

#: MPI_THREAD_MULTIPLE (mpi4py's default) makes MPICH drop its fast paths; the worker needs no threads
THREAD_VARIABLE = "PCCL_BENCH_THREAD_LEVEL"
THREAD_LEVELS = ("single", "funneled", "serialized", "multiple")
GPU_DEVICES = ("cuda", "rocm")


def thread_level(env: Mapping[str, str]) -> str:
    level = env.get(THREAD_VARIABLE, "single")
    return level if level in THREAD_LEVELS else "single"


def plan_file_device(path: str) -> str:
    """The memory kind of a plan file's cells, read with json alone (before the worker's imports);
    ``host`` where the file says none or cannot be read (the worker then reports why)."""
    import json

    try:
        with open(path) as handle:
            cells = json.load(handle).get("cells") or [{}]
        return str(cells[0].get("device") or "host")
    except (OSError, ValueError, AttributeError, IndexError, TypeError):
        return "host"


def defer_mpi_init() -> None:
    """Importing mpi4py.MPI after this loads the library without MPI_Init (start_mpi calls it); set
    before the first import of mpi4py.MPI in the process, else it changes nothing."""
    import mpi4py

    mpi4py.rc.initialize = False
    mpi4py.rc.finalize = True  # MPI_Finalize at exit, as when mpi4py initialises it itself
    mpi4py.rc.thread_level = thread_level(os.environ)


def start_mpi(device: str, env: Mapping[str, str] | None = None, mpi=None,
              bind: Callable | None = None):
    """Bind this rank's GPU (``device`` cuda or rocm) from the launcher's local rank, then
    MPI_Init_thread at the level ``$PCCL_BENCH_THREAD_LEVEL`` asks (single by default); MPI
    already initialised (a caller's own start): only the binding. Returns the MPI module.
    ``mpi``, ``bind``: stand-ins for tests (the order of the calls is the point)."""
    env = os.environ if env is None else env
    if device in GPU_DEVICES:
        if bind is None:
            from collectives.memory.binding import bind_before_init as bind
        bind(device, env)
    if mpi is None:
        defer_mpi_init()
        from mpi4py import MPI as mpi
    if not mpi.Is_initialized():
        mpi.Init_thread(getattr(mpi, f"THREAD_{thread_level(env).upper()}"))
    return mpi
