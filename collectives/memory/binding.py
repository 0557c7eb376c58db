"""Which GPU a rank uses, chosen before MPI_Init, and where that GPU sits (PCI bus id, NUMA node).

Open MPI's smcuda and UCX's CUDA support, and Cray MPICH's GTL, set themselves up for the device
that is current when MPI_Init runs: a rank picks its GPU first. Before MPI_Init there is no
communicator to split, so the local rank comes from the variable the launcher sets
(``LOCAL_RANK_VARIABLES``, first one set wins). Where none is set the rank binds after MPI_Init,
from the shared-memory split (collectives.memory.backends.local_rank), and the row says why.

``bind_before_init`` is called once per process, before MPI_Init (bench/rank/mpi_start.py); the
job's DeviceContext (device_context.py) takes the binding it made.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from collectives.memory import backends as devices

#: the local rank as launchers give it: Slurm's srun, Open MPI's mpirun, MPICH's Hydra, PMI (Intel MPI,
#: MVAPICH, Cray PALS)
LOCAL_RANK_VARIABLES = ("SLURM_LOCALID", "OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID", "PMI_LOCAL_RANK")
#: the variables that restrict which GPUs a process sees, per device kind, in the order the runtime
#: applies them (ROCm: ROCR_VISIBLE_DEVICES, which Slurm on Frontier sets, filters before HIP's)
VISIBLE_VARIABLES = {"cuda": ("CUDA_VISIBLE_DEVICES",),
                     "rocm": ("ROCR_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES", "CUDA_VISIBLE_DEVICES")}
#: where Linux lists PCI devices and NUMA nodes (a parameter for tests)
SYSFS = Path("/sys")


def launcher_local_rank(env: Mapping[str, str]) -> tuple[int | None, str]:
    """(local rank, the variable it came from), or (None, why there is none)."""
    for name in LOCAL_RANK_VARIABLES:
        text = env.get(name, "").strip()
        if text.isdigit():
            return int(text), name
    return None, f"none of {', '.join(LOCAL_RANK_VARIABLES)} is set"


def visible_devices(device: str, env: Mapping[str, str]) -> str:
    """The visibility variables that are set for ``device``, as ``NAME=value; ...`` ("" when none)."""
    return "; ".join(f"{name}={env[name]}" for name in VISIBLE_VARIABLES.get(device, ()) if name in env)


@dataclass
class EarlyBinding:
    """What a rank chose before MPI_Init: its local rank (None: the launcher gave none), the GPU and
    its backend (None where no GPU could be bound, with ``reason``)."""

    device: str
    local_rank: int | None
    #: the launcher variable the local rank came from, or why there was none
    local_rank_from: str
    index: int = -1
    count: int = 0
    reason: str = ""
    backend: object = None

    @property
    def source(self) -> str:
        """How the local rank was found, for the rows."""
        if self.local_rank is not None:
            return f"{self.local_rank_from} (before MPI_Init)"
        return f"shared-memory split after MPI_Init ({self.local_rank_from})"


#: this process's binding per device kind, made before MPI_Init
_EARLY: dict[str, EarlyBinding] = {}


def bind_before_init(device: str, env: Mapping[str, str] | None = None,
                     probe: Callable[[str], devices.GpuProbe] = devices.probe,
                     make_backend: Callable[[str, int], object] = devices.CupyBackend) -> EarlyBinding:
    """Choose and bind this rank's GPU from the launcher's local rank (no MPI call). Without a local
    rank nothing is bound: the job binds after MPI_Init. Never raises; kept for ``early_binding``."""
    env = os.environ if env is None else env
    local, source = launcher_local_rank(env)
    binding = EarlyBinding(device, local, source)
    if local is not None:
        found = probe(device)
        binding.count, binding.reason = found.count, found.reason
        if not found.reason:
            try:
                binding.index = devices.device_choice(local, found.count, env)
                binding.backend = make_backend(device, binding.index)
            except Exception as error:  # a bad override, a device that refuses a context
                binding.reason = f"cannot use GPU: {type(error).__name__}: {error}"
    _EARLY[device] = binding
    return binding


def early_binding(device: str) -> EarlyBinding | None:
    """The binding ``bind_before_init`` made in this process for ``device`` (None: it was not called)."""
    return _EARLY.get(device)


def forget_early_bindings() -> None:
    """Tests: as if no rank had bound before MPI_Init."""
    _EARLY.clear()


# ---------------------------------------------------------------------------- where the GPU sits


def sysfs_bus_id(bus_id: str) -> str:
    """A PCI bus id as sysfs names it: lower case, a 4-digit domain (nvidia-smi prints 8)."""
    text = bus_id.strip().lower()
    domain, _, rest = text.partition(":")
    return f"{domain[-4:].rjust(4, '0')}:{rest}" if rest else text


def gpu_numa_node(bus_id: str | None, sysfs: Path = SYSFS) -> int | None:
    """The NUMA node of the PCI device ``bus_id`` (None: unknown, or the firmware says -1)."""
    if not bus_id:
        return None
    try:
        node = int((sysfs / "bus" / "pci" / "devices" / sysfs_bus_id(bus_id) / "numa_node").read_text())
    except (OSError, ValueError):
        return None
    return node if node >= 0 else None


def parse_cpulist(text: str) -> set[int]:
    """Linux's cpulist format, e.g. ``0-7,16-23``."""
    cpus: set[int] = set()
    for part in text.strip().split(","):
        if not part:
            continue
        first, _, last = part.partition("-")
        cpus.update(range(int(first), int(last or first) + 1))
    return cpus


def cpulist_text(cpus: set[int]) -> str:
    """The inverse of parse_cpulist, in ranges."""
    ranges: list[str] = []
    ordered = sorted(cpus)
    start = previous = None
    for cpu in ordered + [None]:
        if start is not None and (cpu is None or cpu != previous + 1):
            ranges.append(str(start) if start == previous else f"{start}-{previous}")
            start = None
        if cpu is not None and start is None:
            start = cpu
        previous = cpu
    return ",".join(ranges)


def numa_cpus(node: int, sysfs: Path = SYSFS) -> set[int]:
    """The CPUs of NUMA node ``node`` (empty: unknown)."""
    try:
        return parse_cpulist((sysfs / "devices" / "system" / "node" / f"node{node}" / "cpulist").read_text())
    except (OSError, ValueError):
        return set()


def cpus_numa_nodes(cpus: set[int], sysfs: Path = SYSFS) -> list[int]:
    """The NUMA nodes that hold any of ``cpus`` ([]: unknown)."""
    nodes = sorted(int(path.name[4:]) for path in (sysfs / "devices" / "system" / "node").glob("node[0-9]*"))
    return [node for node in nodes if numa_cpus(node, sysfs) & cpus]


def own_cpus() -> set[int]:
    """The CPUs this process may run on (its affinity mask, as the launcher's binding set it)."""
    try:
        return set(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return set()


def cpus_near_gpu(cpus: set[int], gpu_node: int | None, sysfs: Path = SYSFS) -> str:
    """Where a rank's CPUs are against its GPU's NUMA node: ``near`` (all on it), ``partly``, ``far``
    (none on it: every copy and kernel launch crosses the socket link), or ``unknown``."""
    near = numa_cpus(gpu_node, sysfs) if gpu_node is not None else set()
    if not cpus or not near:
        return "unknown"
    if cpus <= near:
        return "near"
    return "partly" if cpus & near else "far"


def placement_facts(device: str, index: int, bus_id: str | None, env: Mapping[str, str],
                    sysfs: Path = SYSFS) -> dict:
    """One rank's GPU as meta.json lists it: index, PCI bus id, NUMA node, its CPUs against it, and
    the visibility variables it ran under."""
    node = gpu_numa_node(bus_id, sysfs)
    cpus = own_cpus()
    return {"index": index, "pci_bus_id": bus_id, "numa_node": node, "cpus": cpulist_text(cpus),
            "cpus_near_gpu": cpus_near_gpu(cpus, node, sysfs), "visible": visible_devices(device, env)}


# ---------------------------------------------------------------------------- without a GPU


def visible_ids(device: str, env: Mapping[str, str]) -> list[str]:
    """The device ids the first set visibility variable lists (``CUDA_VISIBLE_DEVICES=0,1,2,3``), in
    its order: what the runtime numbers 0, 1, ... ([] where none is set)."""
    for name in VISIBLE_VARIABLES.get(device, ()):
        if name in env:
            return [word.strip() for word in env[name].split(",") if word.strip()]
    return []


def planned_choice(device: str, env: Mapping[str, str]) -> dict:
    """Which GPU this rank would take, from its environment alone (no GPU, no MPI): the local rank
    and its variable, the visible ids, the index ``bind_before_init`` would choose among them and
    the id it names, and the CPUs the launcher left the process. ``python -m
    collectives.memory.binding {cuda|rocm}`` prints it as one JSON line (tests under srun)."""
    local, source = launcher_local_rank(env)
    ids = visible_ids(device, env)
    facts = {"device": device, "local_rank": local, "local_rank_from": source, "visible": visible_devices(device, env),
             "visible_ids": ids, "cpus": cpulist_text(own_cpus()), "index": None, "gpu": None, "reason": ""}
    if local is None:
        facts["reason"] = source
        return facts
    try:
        facts["index"] = devices.device_choice(local, len(ids), env)
    except ValueError as error:
        facts["reason"] = str(error)
        return facts
    facts["gpu"] = ids[facts["index"]]
    return facts


if __name__ == "__main__":
    import json
    import sys

    print(json.dumps(planned_choice(sys.argv[1] if len(sys.argv) > 1 else "cuda", os.environ)), flush=True)
