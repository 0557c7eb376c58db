"""Settings from environment variables (PCCL_RDMA_*, PCCL_SHM_*): parsed once, wrong ones named."""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from pathlib import Path

#: what launchers say about the ranks on this host (hydra, Open MPI, Cray PALS)
LOCAL_SIZE_VARIABLES = ("MPI_LOCALNRANKS", "OMPI_COMM_WORLD_LOCAL_SIZE", "PALS_LOCAL_SIZE")
#: set by the sweep: the ranks of the job on the busiest physical machine (namespace hosts or
#: containers on one machine each see only their own ranks, yet share its cores)
MACHINE_RANKS_VARIABLE = "PCCL_BENCH_MACHINE_RANKS"


#: the kernel's CPU topology: cpuN/topology/thread_siblings_list names the hardware threads of N's core
SYS_CPU = Path("/sys/devices/system/cpu")


def usable_cpus() -> set[int]:
    """The hardware threads this process may run on (its affinity mask, else every one)."""
    try:
        return set(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return set(range(os.cpu_count() or 1))


def physical_cores(cpus: Iterable[int] | None = None, sys_cpu: Path | None = None) -> int:
    """The cores among ``cpus`` (default: usable_cpus()): SMT siblings count once.

    Open MPI gives a node one slot per core (hwloc, within the cgroup/affinity; hardware threads
    only with --use-hwthread-cpus) and refuses more ranks than slots without --oversubscribe;
    MPICH's hydra never refuses. Two ranks on the sibling threads of one core also share its
    execution units, so the sweep judges oversubscription by cores, not threads. Where the
    topology cannot be read (no sysfs), each thread counts as a core."""
    threads = sorted(usable_cpus() if cpus is None else set(cpus))
    sys_cpu = sys_cpu or SYS_CPU
    cores: set[frozenset[int] | int] = set()
    for cpu in threads:
        try:
            siblings = _cpu_list((sys_cpu / f"cpu{cpu}" / "topology" / "thread_siblings_list").read_text())
        except (OSError, ValueError):
            siblings = set()
        cores.add(frozenset(siblings) if cpu in siblings else cpu)
    return max(len(cores), 1)


def _cpu_list(text: str) -> set[int]:
    """The kernel's CPU list format: ``0-3,8,10-11``."""
    cpus: set[int] = set()
    for part in text.strip().split(","):
        if part:
            low, _, high = part.partition("-")
            cpus.update(range(int(low), int(high or low) + 1))
    return cpus


def machine_ranks(node_size: int, env: Mapping[str, str]) -> int:
    """The ranks that share this machine's cores: the node communicator's (a virtual node may be
    part of a host), the launcher's count of ranks on the host, the sweep's count per machine;
    the largest wins."""
    named = (*LOCAL_SIZE_VARIABLES, MACHINE_RANKS_VARIABLE)
    return max([node_size, *(int(env[name]) for name in named if env.get(name, "").isdigit())])


def env_number(env: Mapping[str, str], name: str, kind: type, default, error: type[Exception],
               allow_zero: bool = False):
    """``env[name]`` as ``kind`` (int, float), ``default`` when unset or empty; ``error`` naming the
    variable when it is not a number, or not positive (``allow_zero``: zero is allowed too)."""
    text = env.get(name, "")
    if not text:
        return default
    try:
        value = kind(text)
    except ValueError:
        raise error(f"{name}={text!r} is not a number") from None
    if value < 0 or (value == 0 and not allow_zero):
        raise error(f"{name}={text!r} must be positive")
    return value


def env_choice(env: Mapping[str, str], name: str, allowed: tuple[str, ...], error: type[Exception]) -> str:
    """``env[name]`` (``auto`` when unset or empty), one of ``allowed``, else ``error`` naming it."""
    value = env.get(name, "auto") or "auto"
    if value not in allowed:
        raise error(f"{name}={value!r}: expected {', '.join(allowed)}")
    return value
