"""What each host is before the launches start: its name, the machine it is part of, cores, memory.

``python -m bench.run.hostfacts`` prints one JSON line; the sweep runs it once per host through
the launcher (one rank per host, no MPI initialised) when launches go to named hosts. Hosts with
the same ``boot_id`` are one machine (namespace hosts, containers): they share its cores, so
oversubscription is judged per machine, with the same remedies as on one host.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from bench.errors import BadInput
from bench.plan.hosts import Placement

if TYPE_CHECKING:
    from bench.plan.cells import LaunchPlan
    from collectives.topology import Topology

PREFIX = '{"hostfacts": '
#: the rank a launcher gives a process (hydra/PMI, Slurm, Open MPI, PMIx, Cray PALS)
RANK_VARIABLES = ("PMI_RANK", "SLURM_PROCID", "OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PALS_RANKID")
PROBE_TIMEOUT_S = 60


@dataclass(frozen=True)
class HostFacts:
    #: the name the launcher was given (h1, an address), and what the host calls itself
    name: str
    hostname: str
    #: the running kernel's boot id: the same on every host of one machine
    boot_id: str
    cores: int
    #: bytes this host can still give (MemAvailable, or a lower cgroup limit) and where that is read
    mem_available: int | None
    mem_source: str = ""


def boot_id() -> str:
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        return ""


def _cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


#: cgroup limits that mean "none" (v1 reports the largest page-aligned int64)
_UNLIMITED = 1 << 60


def _read_int(path: Path) -> int | None:
    try:
        text = path.read_text().strip()
    except OSError:
        return None
    return int(text) if text.isdigit() else None


def _meminfo_available() -> int | None:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


def _cgroup_room() -> int | None:
    """What the memory cgroup still allows (a container's limit below the host's memory)."""
    for limit_file, usage_file in (("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory.current"),
                                   ("/sys/fs/cgroup/memory/memory.limit_in_bytes",
                                    "/sys/fs/cgroup/memory/memory.usage_in_bytes")):
        limit, usage = _read_int(Path(limit_file)), _read_int(Path(usage_file))
        if limit is not None and limit < _UNLIMITED:
            return max(limit - (usage or 0), 0)
    return None


def available_memory() -> tuple[int, str] | None:
    """(bytes this host can still give, where the figure comes from), or None where unknown."""
    figures = []
    available = _meminfo_available()
    if available is not None:
        figures.append((available, "MemAvailable"))
    elif hasattr(os, "sysconf") and "SC_AVPHYS_PAGES" in os.sysconf_names:
        figures.append((os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE"), "free pages"))
    room = _cgroup_room()
    if room is not None:
        figures.append((room, "the memory cgroup's limit"))
    return min(figures) if figures else None


def local(name: str = "") -> HostFacts:
    hostname = socket.gethostname()
    memory = available_memory()
    return HostFacts(name or hostname, hostname, boot_id(), _cores(), memory[0] if memory else None,
                     memory[1] if memory else "")


def probe(argv: list[str], env: dict[str, str], names: list[str], cwd: str) -> list[HostFacts]:
    """Run ``argv`` (the launcher's command for one rank on each of ``names``, ending in
    ``python -m bench.run.hostfacts``) and read each rank's facts; a host that does not answer is
    BadInput naming it and the launcher's last words."""
    try:
        result = subprocess.run(argv, env={**os.environ, **env}, capture_output=True, text=True, cwd=cwd,
                                timeout=PROBE_TIMEOUT_S, stdin=subprocess.DEVNULL, start_new_session=True)
    except subprocess.TimeoutExpired:
        raise BadInput("hosts", f"{','.join(names)}: no answer from the launcher within {PROBE_TIMEOUT_S} s") from None
    found = _records(result.stdout)
    missing = [name for rank, name in enumerate(names) if rank not in found]
    if missing or result.returncode != 0:
        words = " | ".join(line for line in (result.stderr + result.stdout).strip().splitlines()[-3:])
        raise BadInput("hosts", f"{','.join(missing or names)}: the launcher could not run there "
                                f"(exit {result.returncode}): {words[-400:]}")
    return [HostFacts(name=name, **{k: v for k, v in found[rank].items() if k != "name"})
            for rank, name in enumerate(names)]


def _records(output: str) -> dict[int, dict]:
    """Each rank's record, wherever it is in the output (a launcher may forward two ranks' lines
    into one)."""
    decoder = json.JSONDecoder()
    found: dict[int, dict] = {}
    start = output.find(PREFIX)
    while start >= 0:
        try:
            value, end = decoder.raw_decode(output, start)
            record = dict(value["hostfacts"])
            found[int(record.pop("rank"))] = record
        except (ValueError, KeyError, TypeError):
            end = start + len(PREFIX)
        start = output.find(PREFIX, end)
    return found


def machines(facts: list[HostFacts]) -> dict[str, list[HostFacts]]:
    """Hosts grouped by the machine they run on (boot id; a host without one is its own)."""
    groups: dict[str, list[HostFacts]] = {}
    for host in facts:
        groups.setdefault(host.boot_id or f"host:{host.name}", []).append(host)
    return groups


@dataclass(frozen=True)
class MachineRoom:
    """The machine of a launch that holds the most ranks per core."""

    name: str
    ranks: int
    cores: int
    #: (bytes available, where that is read), None where unknown
    memory: tuple[int, str] | None


def busiest_machine(placement: Placement, facts: dict[str, HostFacts]) -> MachineRoom:
    """Hosts with one boot id add up their ranks and share one machine's cores and memory.
    Without facts for the placement's hosts: this machine, holding one host's ranks."""
    if not placement.named or any(name not in facts for name in placement.names):
        here = local()
        memory = (here.mem_available, here.mem_source) if here.mem_available is not None else None
        return MachineRoom("this host", placement.ranks_per_host, here.cores, memory)
    rooms = []
    for hosts in machines([facts[name] for name in placement.names]).values():
        known = [host for host in hosts if host.mem_available is not None]
        least = min(known, key=lambda host: host.mem_available) if known else None
        name = hosts[0].name if len(hosts) == 1 else f"the machine of {','.join(host.name for host in hosts)}"
        rooms.append(MachineRoom(name, placement.ranks_per_host * len(hosts), min(host.cores for host in hosts),
                                 (least.mem_available, f"{least.mem_source} on {least.name}") if least else None))
    return max(rooms, key=lambda room: room.ranks / max(room.cores, 1))


def placement_problem(plan: LaunchPlan, topo: Topology) -> str | None:
    """Why the ranks are not where the plan put them (its cells and launch id say that placement)."""
    if not plan.ranks_per_host or topo.ranks_per_host == plan.ranks_per_host:
        return None
    planned = (f"{len(plan.hosts)} hosts ({','.join(plan.hosts)}) x {plan.ranks_per_host} ranks" if plan.hosts
               else f"all {plan.nranks} ranks on one host")
    found = f"{plan.nranks // topo.ranks_per_host} hosts x {topo.ranks_per_host} ({','.join(topo.hosts)})"
    hint = "" if plan.hosts else "; name the hosts (--hosts, --hostfile or the suite's hosts:) so the plan knows them"
    return f"the plan puts {planned}, the launcher placed {found}{hint}"


def as_record(facts: list[HostFacts]) -> list[dict]:
    return [asdict(host) for host in facts]


def main() -> None:
    rank = next((int(os.environ[name]) for name in RANK_VARIABLES if os.environ.get(name, "").isdigit()), 0)
    print(PREFIX + json.dumps({**asdict(local()), "rank": rank}) + "}", flush=True)


if __name__ == "__main__":
    main()
