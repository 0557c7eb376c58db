"""One job's GPU facts, agreed by every rank: usable or why not, the bound GPU, GPU-aware MPI, NCCL/RCCL.

``open_device`` is collective over the topology's communicator. Each rank probes on its
own, then all ranks exchange what they found, so every rank reaches the same verdict
(a cell is unsupported everywhere or nowhere, and no rank waits in a collective the
others skipped).
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Mapping
from dataclasses import dataclass, field

from collectives.libraries import xccl_communicators as xccl
from collectives.memory import backends as devices
from collectives.memory import binding, gpu_aware
from collectives.schedules.rows import COMM_INTER, COMM_INTRA, COMM_WORLD

#: "yes": ranks of a node may share a GPU (the suite's gpu_sharing); else their GPU cells are refused
ENV_SHARING = "PCCL_BENCH_GPU_SHARING"


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
    #: every rank's GPU (rank order): host, local rank and its source, index, PCI bus id, NUMA node,
    #: its CPUs against the GPU (binding.placement_facts); meta.json's ``launches.<id>.gpus``
    placements: list[dict] = field(default_factory=list)
    #: how rank 0 found its local rank (a launcher variable before MPI_Init, or the split after it)
    local_rank_from: str = ""
    #: the dummy compute of non-blocking cells (device_compute.GpuSpin), made by the first that overlaps
    spin: object = None

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

    def overlapped(self, comm, op, compute_s: float, test_calls: int):
        """OSU's overlapped call of the non-blocking device ``op`` (collectives/executors/device_ops.py
        DeviceNonblocking): post, a GPU kernel of ``compute_s`` on a stream of its own (``test_calls`` test
        calls while it runs), wait; the spinning kernel is calibrated once per job."""
        from collectives.memory.device_compute import DeviceOverlapCall, GpuSpin, overlapped_op

        if self.spin is None:
            self.spin = GpuSpin(self.backend.xp)
        return overlapped_op(comm, DeviceOverlapCall(op, self.spin, compute_s, test_calls))

    def columns(self) -> dict[str, str]:
        columns = {"gpu_aware_how": self.gpu_aware.how, "gpu_binding": self.binding}
        if self.placements:
            columns["gpu_local_rank_from"] = self.local_rank_from
            columns["gpu_devices_digest"] = devices_digest(self.placements)
        return columns

    def xccl_columns(self) -> dict[str, str]:
        """What NCCL/RCCL said at run time (rank 0's view), once it made a communicator: its network
        and version (bench/rank/cell.py puts them on the rows of cells that ran on it)."""
        net = getattr(self.communicators, "net", None)  # stand-in communicators (tests) say nothing
        if net is None or not (net.network or net.version):
            return {}
        return {"xccl_net": net.summary, "xccl_runtime_version": net.version}

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


def local_facts(device: str, topo, host: str, env: Mapping[str, str], backend) -> dict:
    """This rank's GPU: bound before MPI_Init where the launcher gave the local rank (binding.py),
    else now from the shared-memory split; ``backend`` given: taken as it is (tests)."""
    facts = {"reason": "", "index": -1, "identity": None, "aware": False, "how": "", "xccl": "", "host": host}
    # every rank splits (a collective), whether or not its launcher gave the local rank
    split = devices.local_rank(topo.comm)
    early = binding.early_binding(device) if backend is None else None
    if early is not None and early.local_rank is not None:
        local, facts["local_rank_from"] = early.local_rank, early.source
        facts["reason"], facts["index"], backend = early.reason, early.index, early.backend
    else:
        why = early.local_rank_from if early is not None else "not bound before MPI_Init"
        local = split
        facts["local_rank_from"] = f"shared-memory split after MPI_Init ({why})"
    facts["local_rank"] = local
    if backend is None and not facts["reason"]:
        found = devices.probe(device)
        facts["reason"] = found.reason
        if not found.reason:
            try:
                facts["index"] = devices.device_choice(local, found.count, env)
                backend = devices.CupyBackend(device, facts["index"])
            except Exception as error:  # a bad override, a device that refuses a context
                facts["reason"] = f"cannot use GPU: {type(error).__name__}: {error}"
    elif backend is not None:
        facts["index"] = backend.index
    bus_id = None
    if backend is not None and not facts["reason"]:
        bus_id = backend.identity()
        facts["identity"] = f"{bus_id}@{host}" if bus_id else None
    facts["placement"] = binding.placement_facts(device, facts["index"], bus_id, env)
    try:
        decided = gpu_aware.detect(device, env)
        facts["aware"], facts["how"] = decided.aware, decided.how
    except ValueError as error:
        facts["reason"] = facts["reason"] or str(error)
    return {**facts, "backend": backend}


def shared_gpu_reason(facts: list[dict]) -> str:
    """Why GPU cells cannot run where ranks of one host share a GPU ("" where none does): fewer
    visible GPUs than ranks on a node measures contention, not the collective."""
    owners: dict[str, int] = {}
    for rank, one in enumerate(facts):
        identity = one["identity"]  # PCI bus id @ host; None where it is unknown (no GPU, emulation)
        if identity is None:
            continue
        if identity in owners:
            gpu, host = identity.split("@", 1)
            ranks = sum(1 for other in facts if other["host"] == host)
            gpus = len({other["identity"] for other in facts if other["host"] == host and other["identity"]})
            return (f"ranks {owners[identity]} and {rank} share GPU {gpu} on {host} ({ranks} ranks, {gpus} "
                    f"distinct GPUs there): one GPU per rank, or the suite's gpu_sharing: yes to measure "
                    "them sharing")
        owners[identity] = rank
    return ""


def devices_digest(placements: list[dict]) -> str:
    """A short digest of every rank's (host, index, PCI bus id, NUMA node): rows of the same
    binding have the same digest (the full list is meta.json's ``launches.<id>.gpus``)."""
    text = json.dumps([[one["host"], one["index"], one["pci_bus_id"], one["numa_node"]] for one in placements])
    return hashlib.sha256(text.encode()).hexdigest()[:12]


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
    facts = local_facts(device, topo, MPI.Get_processor_name(), env, backend)
    backend = facts.pop("backend")
    info = xccl_info or xccl.info(device)
    facts["xccl"] = info.reason
    everyone = comm.allgather(facts)
    reason = _agreed([f["reason"] for f in everyone])
    if not reason and env.get(ENV_SHARING, "no") != "yes":
        reason = shared_gpu_reason(everyone)
    aware = all(f["aware"] for f in everyone)
    doubters = [f"rank {r}: {f['how']}" for r, f in enumerate(everyone) if not f["aware"]]
    how = everyone[0]["how"] if aware or len(doubters) == len(everyone) else doubters[0]
    placements = [{"rank": rank, "host": f["host"], "local_rank": f["local_rank"],
                   "local_rank_from": f["local_rank_from"], **f["placement"]} for rank, f in enumerate(everyone)]
    context = DeviceContext(
        device, reason, gpu_aware.GpuAwareness(aware, how),
        xccl.XcclInfo(info.library, info.version, _agreed([f["xccl"] for f in everyone])),
        None if reason else backend, facts["index"],
        devices.binding_text(env.get(devices.ENV_GPU), env.get(devices.ENV_GPU_MAP)),
        _shared_gpu_reasons(topo, [f["identity"] for f in everyone], info.library),
        placements=placements, local_rank_from=everyone[0]["local_rank_from"],
    )
    if not context.reason and not context.xccl.reason:
        if communicators is None:
            nccl, _ = xccl.load(device)
            communicators = xccl.Communicators(nccl, context.gpu_index)
        context.communicators = communicators
    return context
