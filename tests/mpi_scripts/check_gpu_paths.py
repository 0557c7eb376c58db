"""Run under mpiexec: the device code paths, checked bit for bit.

    mpiexec -n N python tests/mpi_scripts/check_gpu_paths.py RANKS_PER_NODE auto|yes|no [emulated|cuda|rocm] [quick]

``emulated`` (default; machines without a GPU): collectives.memory.backends.HostEmulation stands
in for device memory (numpy arrays), and FakeNccl below stands in for NCCL (MPI
underneath, NCCL's calling conventions on raw pointers: in place = pointer equality).
That checks the device executor, the staging, the library phases and the in-place
mappings, through the same Implementation.build calls the worker makes; nothing
of it is ever a GPU result. ``cuda``/``rocm``: the same on the real GPU with CuPy and
NCCL/RCCL (tests/collectives/memory/test_gpu_device.py, marked gpu). The second argument is the GPU-aware
override (PCCL_BENCH_GPU_AWARE); ``quick`` checks two (dtype, op) pairs and two counts
only. Rank 0 prints one JSON summary line last; exit 1 if
anything was wrong.
"""

from __future__ import annotations

import ctypes
import json
import os
import sys
import traceback

import mpi4py

mpi4py.rc.thread_level = "single"

import numpy as np  # noqa: E402
from cython_ext.timing import time_op  # noqa: E402
from mpi4py import MPI  # noqa: E402

from collectives.call import CallSpec  # noqa: E402
from collectives.executors import device as gpu_executor  # noqa: E402
from collectives.impls import get  # noqa: E402
from collectives.libraries.xccl_communicators import XcclInfo  # noqa: E402
from collectives.memory.backends import HostEmulation  # noqa: E402
from collectives.memory.device_context import open_device  # noqa: E402
from collectives.schedules.topology import topology  # noqa: E402
from collectives.spec import count_wrong, make_buffers  # noqa: E402

COLLECTIVES = ("allgather", "reduce_scatter", "allreduce")
DTYPE_OPS = (("float32", "sum"), ("int32", "max"), ("float16", "sum"), ("int64", "prod"))
COUNTS = (0, 1, 7, 100)
#: (impl, algorithm, intra, inter)
ENTRIES = (
    ("mpi", None, None, None),
    ("xccl", None, None, None),
    ("pccl-flat", "ring", None, None),
    ("pccl-flat", "rd", None, None),
    ("pccl-flat", "bruck+ring", None, None),
    ("pccl-hier", None, "ring", "rd"),
    ("pccl-hier", None, "xccl", "ring"),
    ("pccl-hier", None, "mpi", "xccl"),
    ("pccl-hier", None, "rd", "mpi"),
    ("pccl-hier", None, "xccl+ring", "rd+xccl"),
)


def _view(address: int, count: int, dtype: np.dtype) -> np.ndarray:
    if count == 0:
        return np.empty(0, dtype)
    raw = (ctypes.c_char * (count * dtype.itemsize)).from_address(address)
    return np.frombuffer(raw, dtype=dtype)


class FakeNccl:
    """NCCL's calls on host pointers, moved by MPI (a test double: never timed, never reported)."""

    def __init__(self, comm) -> None:
        self.comm = comm

    def _inputs(self, address: int, count: int, dtype: str) -> list[np.ndarray]:
        return self.comm.allgather(_view(address, count, np.dtype(dtype)).copy())

    def allGather(self, src, dst, count, dtype, stream):  # noqa: N802 - NCCL's names
        gathered = np.concatenate(self._inputs(src, count, dtype))
        _view(dst, count * self.comm.size, np.dtype(dtype))[:] = gathered

    def _reduce(self, arrays: list[np.ndarray], op: str) -> np.ndarray:
        ufunc = {"sum": np.add, "prod": np.multiply, "min": np.minimum, "max": np.maximum}[op]
        total = arrays[0]
        for other in arrays[1:]:
            total = ufunc(total, other)
        return total

    def reduceScatter(self, src, dst, count, dtype, op, stream):  # noqa: N802
        total = self._reduce(self._inputs(src, count * self.comm.size, dtype), op)
        rank = self.comm.rank
        _view(dst, count, np.dtype(dtype))[:] = total[rank * count : (rank + 1) * count]

    def allReduce(self, src, dst, count, dtype, op, stream):  # noqa: N802
        _view(dst, count, np.dtype(dtype))[:] = self._reduce(self._inputs(src, count, dtype), op)


class FakeCommunicators:
    """transports.xccl.communicators.Communicators' interface over FakeNccl; counts the communicators made."""

    def __init__(self) -> None:
        self.made: dict[int, FakeNccl] = {}

    def get(self, comm):
        key = MPI._handleof(comm)
        if key not in self.made:
            self.made[key] = FakeNccl(comm)
        return self.made[key]

    def dtype(self, name: str) -> str:
        return name

    def op(self, name: str) -> str:
        return name


def to_host(array) -> np.ndarray:
    return array.get() if hasattr(array, "get") else array  # cupy arrays have .get(), numpy's do not


def check(comm, context, failures: list[str], summary: dict, ranks_per_node: int, quick: bool) -> None:
    topo = topology(comm, ranks_per_node)
    backend = context.backend
    dtype_ops, counts = (DTYPE_OPS[:2], (1, 100)) if quick else (DTYPE_OPS, COUNTS)
    for impl, algorithm, intra, inter in ENTRIES:
        implementation = get(impl)
        for collective in COLLECTIVES:
            for in_place in (False, True):
                for dtype, op in dtype_ops:
                    for count in counts:
                        call = CallSpec(collective, comm.size, count, dtype, op, in_place, algorithm, intra, inter,
                                        topo.grid.nnodes)
                        label = (f"{impl}:{algorithm or ''}:{inter or ''}/{intra or ''} {collective} "
                                 f"{'in_place' if in_place else 'out_of_place'} {dtype} {op} count={count}")
                        reason = implementation.unsupported_reason(call, context)
                        if reason:
                            summary["unsupported"].append(f"{label}: {reason}")
                            continue
                        host_send, host_recv = make_buffers(call, comm.rank)
                        send = None if host_send is None else backend.from_host(host_send)
                        recv = backend.from_host(host_recv)
                        built = implementation.build(topo, call, send, recv, context)
                        run = context.timed(comm, built)
                        run()
                        wrong = count_wrong(call, comm.rank, recv, backend.xp)
                        if not in_place or collective == "allgather":  # a repeat gives the same result
                            time_op(run, comm, "sync", 1, 2, 1, 0.0)
                            wrong += count_wrong(call, comm.rank, recv, backend.xp)
                        if send is not None and not np.array_equal(host_send, to_host(send)):
                            failures.append(f"{label}: rank {comm.rank} changed its send buffer")
                        if comm.allreduce(wrong, op=MPI.SUM):
                            failures.append(f"{label}: {wrong} wrong on rank {comm.rank}" if wrong else label)
                        summary["checked"] += 1
                        summary["transports"].setdefault(impl, set()).add(
                            implementation.describe(call, context, built).transport)


def main(ranks_per_node: int, aware: str, mode: str, quick: bool) -> int:
    if os.environ.get("CHECK_GPU_PIECE_BYTES"):  # test aid: the >1 GiB message path with small messages
        gpu_executor.MAX_MESSAGE_BYTES = int(os.environ["CHECK_GPU_PIECE_BYTES"])
    comm = MPI.COMM_WORLD
    topo = topology(comm, ranks_per_node)
    # 1-4 ranks on one GPU on purpose: sharing allowed (NCCL still refuses a shared GPU)
    env = {"PCCL_BENCH_GPU_AWARE": aware, "PCCL_BENCH_GPU_SHARING": "yes"}
    fakes = FakeCommunicators()
    if mode == "emulated":
        context = open_device(topo, "cuda", env=env, backend=HostEmulation(),
                              xccl_info=XcclInfo("NCCL", "test-double"), communicators=fakes)
    else:
        context = open_device(topo, mode, env=env)
    failures: list[str] = [f"device {mode}: {context.reason}"] if context.reason else []
    summary = {"nranks": comm.size, "mode": mode, "checked": 0, "unsupported": [], "transports": {},
               "gpu_aware": context.gpu_aware.aware, "how": context.gpu_aware.how, "reason": context.reason,
               "xccl": [context.xccl.library, context.xccl.version, context.xccl.reason],
               "xccl_shared": context.xccl_shared}
    if not context.reason:
        check(comm, context, failures, summary, ranks_per_node, quick)
    summary["xccl_communicators"] = len(fakes.made)
    everything = comm.gather(failures, root=0)
    if comm.rank == 0:
        summary["failures"] = sorted({f for rank_failures in everything for f in rank_failures})[:50]
        summary["transports"] = {name: sorted(values) for name, values in summary["transports"].items()}
        for failure in summary["failures"]:
            print(f"FAIL {failure}", flush=True)
        print(json.dumps(summary), flush=True)
    return 1 if comm.allreduce(len(failures), op=MPI.SUM) else 0


if __name__ == "__main__":
    try:
        code = main(int(sys.argv[1]), sys.argv[2], sys.argv[3] if len(sys.argv) > 3 else "emulated",
                    sys.argv[4:5] == ["quick"])
    except BaseException:
        traceback.print_exc()
        sys.stderr.flush()
        MPI.COMM_WORLD.Abort(1)
    sys.exit(code)
