"""The ranks' half of the pre-flight (bench/driver/preflight.py): ``python -m bench.rank.preflight_probe
DEVICE XCCL`` on every rank of one tiny launch, with the suite's environment, through the sweep's
launcher. Rank 0 prints one line, ``PCCL_PREFLIGHT {json}``, that the driver judges.

In order, on each rank:
1. the MPI library is loaded without MPI_Init; Cray MPICH asked for GPU support
   (``MPICH_GPU_SUPPORT_ENABLED=1``) without its GTL library loaded would abort in MPI_Init, so
   that is checked first and reported (by every rank: no MPI to gather with) instead;
2. the GPU is bound as the worker binds it (bench/rank/mpi_start.py), then MPI_Init;
3. the MPI library the ranks loaded (rank 0's ``MPI_Get_library_version``, as ``mpi_library``); a
   CPU suite's rank: its local rank, CPUs and their NUMA nodes; a GPU suite's rank: its GPU facts
   (index, PCI bus id, NUMA node, its CPUs against it, the launcher's variables) and, where ``XCCL``
   is 1 and every rank has a GPU, one NCCL/RCCL all-reduce of one element over all ranks with
   NCCL_DEBUG=INFO captured: the network and version it chose.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Mapping

from bench.rank.mpi_start import defer_mpi_init, start_mpi

MARKER = "PCCL_PREFLIGHT "
#: the GTL libraries Cray MPICH loads for device buffers (ROCm, CUDA, Level Zero)
GTL_PREFIX = "libmpi_gtl_"


def loaded_libraries(maps_path: str = "/proc/self/maps") -> set[str]:
    """The shared libraries mapped into this process (their paths)."""
    try:
        with open(maps_path) as maps:
            return {line.split()[-1] for line in maps if ".so" in line and "/" in line}
    except OSError:
        return set()


def gtl_problem(env: Mapping[str, str], libraries: set[str], library_text: str) -> str:
    """Why every rank would abort in MPI_Init: Cray MPICH with MPICH_GPU_SUPPORT_ENABLED=1 and no GTL
    library loaded ("" where that is not so). ``libraries``: the loaded ones' paths; ``library_text``:
    MPI_Get_library_version's text (readable before MPI_Init)."""
    if env.get("MPICH_GPU_SUPPORT_ENABLED", "") != "1":
        return ""
    cray = "CRAY MPICH" in library_text.upper() or any("/cray/" in path and "/libmpi" in path for path in libraries)
    if not cray or any(os.path.basename(path).startswith(GTL_PREFIX) for path in libraries):
        return ""
    return ("Cray MPICH with MPICH_GPU_SUPPORT_ENABLED=1 needs its GPU transport layer (libmpi_gtl_hsa on ROCm, "
            "libmpi_gtl_cuda on CUDA) linked into mpi4py, and this mpi4py does not load it: every rank would abort "
            "in MPI_Init. Rebuild mpi4py with the Cray compiler wrapper under the accelerator module (as the PCCL "
            "reproducer's scripts/*/create_python_env.sh do): module load craype-accel-amd-gfx90a (Frontier) or "
            "craype-accel-nvidia80 (Perlmutter), then MPICC=\"cc -shared\" pip install --force-reinstall "
            "--no-cache-dir --no-binary=mpi4py mpi4py; or leave MPICH_GPU_SUPPORT_ENABLED unset (gpu_aware: no "
            "stages device buffers through host memory)")


def _net(comm, device: str, backend, index: int) -> dict:
    """One all-reduce of one element over NCCL/RCCL with its debug lines captured (collective)."""
    import numpy as np

    from collectives.libraries import xccl_communicators as xccl

    nccl, reason = xccl.load(device)
    if nccl is None:
        return {"reason": reason}
    communicators = xccl.Communicators(nccl, index)
    try:
        world = communicators.get(comm)
        buffer = backend.from_host(np.ones(1, dtype=np.float32))
        world.allReduce(backend.ptr(buffer), backend.ptr(buffer), 1, nccl.NCCL_FLOAT32, nccl.NCCL_SUM,
                        backend.stream.ptr)
        backend.synchronize()
        net = communicators.net
    except Exception as error:  # NCCL's error (a forced NCCL_NET whose plugin is missing fails here)
        seen = communicators.capture.read() if communicators.capture is not None else None
        return {"error": f"{type(error).__name__}: {error}", "forced_net": os.environ.get("NCCL_NET", ""),
                "missing_plugin": seen.missing_plugin if seen else "", "plugin_failed": seen.plugin_failed if seen
                else ""}
    finally:
        communicators.close()
    return {"network": net.network, "version": net.version, "plugin": net.plugin,
            "missing_plugin": net.missing_plugin, "interfaces": net.interfaces, "plugin_failed": net.plugin_failed,
            "summary": net.summary}


def host_facts(comm, host: str) -> dict:
    """A CPU suite's rank: its local rank (and where it came from), its CPUs and their NUMA nodes."""
    from bench.rank.hostfacts import rank_env
    from collectives.memory import backends, binding

    split = backends.local_rank(comm)  # a collective: every rank splits
    local, source = binding.launcher_local_rank(os.environ)
    if local is None:
        local, source = split, f"shared-memory split after MPI_Init ({source})"
    cpus = binding.own_cpus()
    return {"rank": comm.rank, "host": host, "reason": "", "local_rank": local, "local_rank_from": source,
            "cpus": binding.cpulist_text(cpus), "numa_nodes": binding.cpus_numa_nodes(cpus), "env": rank_env()}


def probe(device: str, with_xccl: bool) -> dict | None:
    """Every rank's facts, gathered to rank 0 (None on the others). MPI is initialised by then."""
    from types import SimpleNamespace

    from mpi4py import MPI

    from bench.rank.hostfacts import rank_env
    from collectives.memory import device_kinds
    from collectives.memory.device_context import local_facts

    comm = MPI.COMM_WORLD
    host = MPI.Get_processor_name()
    if device in device_kinds():
        facts = local_facts(device, SimpleNamespace(comm=comm), host, os.environ, None)
        backend = facts.pop("backend")
        mine = {"rank": comm.rank, "host": host, "reason": facts["reason"], "local_rank": facts["local_rank"],
                "local_rank_from": facts["local_rank_from"], **facts["placement"], "env": rank_env()}
        # NCCL/RCCL communicators are collective: made only where every rank has its GPU
        if with_xccl and comm.allreduce(int(backend is not None and not facts["reason"]), op=MPI.MIN):
            mine["xccl"] = _net(comm, device, backend, facts["index"])
    else:
        mine = host_facts(comm, host)
    everyone = comm.gather(mine, root=0)
    if comm.rank:
        return None
    from collectives.libraries.mpi_library import mpi_library

    # the MPI the ranks loaded (the site profile's mpi_library is compared with it)
    return {"ranks": everyone, "mpi_library": " ".join(mpi_library())}


def main(argv: list[str]) -> int:
    device = argv[0] if argv else "cuda"
    with_xccl = len(argv) > 1 and argv[1] == "1"
    defer_mpi_init()
    from mpi4py import MPI  # loads the library (and what it links, GTL among them); no MPI_Init

    problem = gtl_problem(os.environ, loaded_libraries(), MPI.Get_library_version())
    if problem:  # before MPI_Init, which would abort: every rank says it, the driver reads the first
        print(MARKER + json.dumps({"fatal": {"check": "gtl", "message": problem}}), flush=True)
        return 0
    start_mpi(device)
    report = probe(device, with_xccl)
    if report is not None:
        print(MARKER + json.dumps(report), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
