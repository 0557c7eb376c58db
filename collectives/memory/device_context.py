"""One job's GPU facts, agreed by every rank: usable or why not, the bound GPU, GPU-aware MPI, NCCL/RCCL.

``open_device`` is collective over the topology's communicator. Each rank probes on its
own, then all ranks exchange what they found, so every rank reaches the same verdict
(a cell is unsupported everywhere or nowhere, and no rank waits in a collective the
others skipped).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field

from collectives.memory import backends as devices
from collectives.memory import gpu_aware
from collectives.schedules.rows import COMM_INTER, COMM_INTRA, COMM_WORLD
from collectives.transports.xccl import communicators as xccl


@dataclass
class DeviceContext:
    device: str  # cuda | rocm
    reason: str  # why this job cannot run GPU cells; empty when it can
    gpu_aware: gpu_aware.GpuAwareness
    xccl: xccl.XcclInfo
    backend: devices.Backend | None = None
    gpu_index: int = -1
    binding: str = ""
    #: per schedule communicator index: why NCCL/RCCL cannot run there (ranks sharing a GPU)
    xccl_shared: dict[int, str] = field(default_factory=dict)
    communicators: xccl.Communicators | None = None

    @property
    def mpi_transport(self) -> str:
        return self.gpu_aware.transport

    @property
    def xccl_transport(self) -> str:
        return self.xccl.library.lower()

    def xccl_reason(self, comm_index: int = COMM_WORLD) -> str:
        return self.xccl.reason or self.xccl_shared.get(comm_index, "")

    def xccl_comm(self, comm):
        return self.communicators.get(comm)

    on_device = True

    def executor(self, comms: list, steps, buffers: tuple, dtype: str, op: str):
        """Schedule rows on device arrays: GPU-aware or staged MPI, CuPy kernels (collectives/executors/device.py)."""
        from collectives.executors.device import DeviceScheduleOp

        return DeviceScheduleOp(self, comms, steps, buffers, dtype, op)

    def sequence(self, comm, parts: list, keepalive=None, keys: list | None = None):
        from collectives.executors.device_ops import DeviceCall

        return DeviceCall(parts, keepalive, keys)

    def timed(self, comm, op):
        """A device op and the stream synchronisation that ends it, as one CollOp for the timing loop."""
        from cython_ext.core import PyCallOp

        return PyCallOp(comm, op, self.backend.synchronize, keepalive=op)

    def columns(self) -> dict[str, str]:
        return {"gpu_aware_how": self.gpu_aware.how, "gpu_binding": self.binding}

    def close(self) -> None:
        """The NCCL/RCCL communicators, destroyed while the process is whole (before MPI finalizes)."""
        if self.communicators is not None:
            self.communicators.close()


def _agreed(values: list[str]) -> str:
    """The first rank's complaint, naming the rank when ranks differ."""
    complaints = [(rank, text) for rank, text in enumerate(values) if text]
    if not complaints:
        return ""
    rank, text = complaints[0]
    return text if len(set(values)) == 1 else f"rank {rank}: {text}"


def _local_facts(device: str, local_rank: int, host: str, env: Mapping[str, str], backend) -> dict:
    facts = {"reason": "", "index": -1, "identity": None, "aware": False, "how": "", "xccl": ""}
    if backend is None:
        found = devices.probe(device)
        facts["reason"] = found.reason
        if not found.reason:
            try:
                facts["index"] = devices.choose_device(local_rank, found.count, env.get(devices.ENV_GPU))
                backend = devices.CupyBackend(device, facts["index"])
            except Exception as error:  # a bad override, a device that refuses a context
                facts["reason"] = f"cannot use GPU: {type(error).__name__}: {error}"
    else:
        facts["index"] = backend.index
    if backend is not None and not facts["reason"]:
        identity = backend.identity()
        facts["identity"] = f"{identity}@{host}" if identity else None
    try:
        decided = gpu_aware.detect(device, env)
        facts["aware"], facts["how"] = decided.aware, decided.how
    except ValueError as error:
        facts["reason"] = facts["reason"] or str(error)
    return {**facts, "backend": backend}


def _shared_gpu_reasons(topo, identities: list[str | None], library: str) -> dict[int, str]:
    """Per communicator index, the first group (node, rail) whose ranks share a GPU: the same on every rank."""
    grid = topo.grid
    groups = {COMM_WORLD: [0], COMM_INTRA: [node * grid.ranks_per_node for node in range(grid.nnodes)],
              COMM_INTER: list(range(grid.ranks_per_node))}
    reasons = {}
    for index, leaders in groups.items():
        found = (xccl.shared_gpu_reason(identities, grid.members(index, leader), library) for leader in leaders)
        reason = next((text for text in found if text), "")
        if reason:
            reasons[index] = reason
    return reasons


def open_device(topo, device: str, env: Mapping[str, str] | None = None, backend=None,
                xccl_info: xccl.XcclInfo | None = None, communicators=None) -> DeviceContext:
    """Probe, bind and agree (collective over ``topo.comm``).

    ``backend``, ``xccl_info``, ``communicators``: given instead of probed (tests)."""
    from mpi4py import MPI

    env = os.environ if env is None else env
    comm = topo.comm
    local = devices.local_rank(comm)
    facts = _local_facts(device, local, MPI.Get_processor_name(), env, backend)
    backend = facts.pop("backend")
    info = xccl_info or xccl.info(device)
    facts["xccl"] = info.reason
    everyone = comm.allgather(facts)
    reason = _agreed([f["reason"] for f in everyone])
    aware = all(f["aware"] for f in everyone)
    doubters = [f"rank {r}: {f['how']}" for r, f in enumerate(everyone) if not f["aware"]]
    how = everyone[0]["how"] if aware or len(doubters) == len(everyone) else doubters[0]
    context = DeviceContext(
        device, reason, gpu_aware.GpuAwareness(aware, how),
        xccl.XcclInfo(info.library, info.version, _agreed([f["xccl"] for f in everyone])),
        None if reason else backend, facts["index"], devices.binding_text(env.get(devices.ENV_GPU)),
        _shared_gpu_reasons(topo, [f["identity"] for f in everyone], info.library),
    )
    if not context.reason and not context.xccl.reason:
        if communicators is None:
            nccl, _ = xccl.load(device)
            communicators = xccl.Communicators(nccl, context.gpu_index)
        context.communicators = communicators
    return context
