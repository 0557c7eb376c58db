"""Where a job's buffers live and what runs on them: the one thing host and device cells differ in.

A context gives the implementations everything that depends on the memory: the buffer
backend (allocate / from_host / to_host / synchronize), the executor that runs schedule
rows there, how parts of a call are chained, how the timing loop waits for a call, and
why a library cannot be used. ``HOST`` is the context of numpy buffers; a GPU job's
``DeviceContext`` (collectives/memory/device_context.py) has the same members.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from collectives.addresses import host_address
from collectives.dtypes import dtype_code, itemsize, op_code
from collectives.memory import register
from collectives.memory.backends import GPU_DEVICES, HostBackend
from collectives.schedules.rows import COMM_WORLD

XCCL_HOST_REASON = "NCCL/RCCL run on GPU buffers only (device: cuda or rocm)"


@dataclass
class HostContext:
    device: str = "host"
    reason: str = ""  # why this job cannot run its cells; empty when it can
    backend: HostBackend = field(default_factory=HostBackend)
    on_device = False

    @property
    def mpi_transport(self) -> str:
        return "mpi"

    def xccl_reason(self, comm_index: int = COMM_WORLD) -> str:
        return XCCL_HOST_REASON

    def executor(self, comms: list, steps: np.ndarray, buffers: tuple, dtype: str, op: str):
        """The Cython executor (MPI point-to-point, no GIL) on (send, recv, scratch) numpy arrays."""
        from cython_ext.executor import ScheduleOp

        send, recv, scratch = buffers
        return ScheduleOp(list(comms), steps, host_address(send), host_address(recv), host_address(scratch),
                          itemsize(dtype), dtype_code(dtype), op_code(op), keepalive=(buffers, steps))

    def sequence(self, comm, parts: list, keepalive=None, keys: list | None = None):
        """``parts`` run in order; ``keys``: per part, the (communicator, action) a transport ran it for."""
        from cython_ext.core import Sequence

        return Sequence(comm, parts, keepalive, keys)

    def timed(self, comm, op):
        """``op`` as the timing loop runs it: host ops are CollOps already, run without the GIL."""
        return op

    def overlapped(self, comm, op, compute_s: float, test_calls: int):
        """OSU's overlapped call of the non-blocking ``op`` (a cython_ext.nonblocking.NonblockingCollective):
        post, ``compute_s`` of compute on this CPU with ``test_calls`` MPI_Test calls spread through it,
        wait. An op for the timing loop that keeps each call's compute and test time (``times``)."""
        from cython_ext.nonblocking import OverlapOp

        return OverlapOp(op, compute_s, test_calls)

    def columns(self) -> dict[str, str]:
        """The row's columns this job's memory fills (a GPU job: how GPU-awareness was decided, the binding)."""
        return {}

    def close(self) -> None:
        pass


HOST = HostContext()


@register("host")
def open_host(topo, device: str) -> HostContext:
    """Host buffers need nothing opened: every job shares ``HOST``."""
    return HOST


@register(*GPU_DEVICES, on_device=True)
def open_gpu(topo, device: str):
    """A GPU job's DeviceContext (device_context.py), imported when one opens: the ranks of a host job
    never import it (tests/bench/rank/test_worker_imports.py)."""
    from collectives.memory.device_context import open_device

    return open_device(topo, device)
