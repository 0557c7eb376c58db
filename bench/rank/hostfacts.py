"""What each host is before the launches start: its name, the machine it is part of, cores, memory.

``python -m bench.rank.hostfacts`` prints one JSON line; the sweep runs it once per host through
the launcher (one rank per host, no MPI initialised) when launches go to named hosts. Hosts with
the same ``boot_id`` are one machine (namespace hosts, containers): they share its cores, so
oversubscription is judged per machine, with the same remedies as on one host.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from bench.errors import BadInput
from bench.plan.hosts import Placement, hosts_digest  # noqa: F401  (the row's hosts_digest, defined with the plan's)

if TYPE_CHECKING:
    from bench.plan.cells import LaunchPlan
    from collectives.schedules.topology import Topology

PREFIX = '{"hostfacts": '
#: the rank a launcher gives a process (hydra/PMI, Slurm, Open MPI, PMIx, Cray PALS)
RANK_VARIABLES = ("PMI_RANK", "SLURM_PROCID", "OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PALS_RANKID")
PROBE_TIMEOUT_S = 60
#: what a launcher sets per rank (srun: the task's ids, its CPU and GPU binding; Hydra, Open MPI, PMI,
#: Cray PALS: the local rank), recorded per rank in meta.json (``launches.<id>.ranks``)
RANK_ENV_PREFIXES = ("SLURM_PROCID", "SLURM_LOCALID", "SLURM_NODEID", "SLURM_CPU_BIND", "SLURM_STEP_GPUS",
                     "SLURM_GPUS", "SLURM_STEP_ID", "CUDA_VISIBLE_DEVICES", "ROCR_VISIBLE_DEVICES",
                     "HIP_VISIBLE_DEVICES", "GPU_DEVICE_ORDINAL", "OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID",
                     "PMI_LOCAL_RANK", "PALS_")


def rank_env(env: dict[str, str] | None = None) -> dict[str, str]:
    """This rank's launcher-set variables (RANK_ENV_PREFIXES), sorted."""
    env = os.environ if env is None else env
    return {name: value for name, value in sorted(env.items()) if name.startswith(RANK_ENV_PREFIXES)}


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
    """Physical cores this process may use: what Open MPI counts as slots (SMT threads once)."""
    from collectives.envsettings import physical_cores  # the probe runs before MPI; stdlib only

    return physical_cores()


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
    import socket  # not at import: every rank imports this module, only the driver asks

    hostname = socket.gethostname()
    memory = available_memory()
    return HostFacts(name or hostname, hostname, boot_id(), _cores(), memory[0] if memory else None,
                     memory[1] if memory else "")


def probe(argv: list[str], env: dict[str, str], names: list[str], cwd: str) -> list[HostFacts]:
    """Run ``argv`` (the launcher's command for one rank on each of ``names``, ending in
    ``python -m bench.rank.hostfacts``) and read each rank's facts; a host that does not answer is
    BadInput naming it and the launcher's last words."""
    import subprocess  # the driver's alone (see local)

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
    """One machine of a launch: the ranks it holds, its cores and memory."""

    name: str
    ranks: int
    cores: int
    #: (bytes available, where that is read), None where unknown
    memory: tuple[int, str] | None
    #: this machine (the sweep's own), or judged by its figures: whose process limits can be read
    here: bool = False


def _memory(host: HostFacts, where: str = "") -> tuple[int, str] | None:
    """(bytes available, where the figure is read and on which host) for a room."""
    return (host.mem_available, f"{host.mem_source} {where}".strip()) if host.mem_available is not None else None


def machine_rooms(placement: Placement, facts: dict[str, HostFacts]) -> list[MachineRoom]:
    """Every machine of a launch. Hosts with one boot id add up their ranks and share one machine's
    cores and memory. No names: this machine, holding the one host's ranks.

    A named host without facts (a dry run, which probes nothing) is a machine of its own judged by
    this host's figures: the sweep runs on a node of the same job (PBS and LSF start the job script
    on the first host of the allocation, which their host file lists too) or of the same cluster,
    the nearest figures there are. Each such host holds its own share of the ranks, never all of them."""
    here = local()
    if not placement.named:
        return [MachineRoom("this host", placement.ranks_per_host, here.cores, _memory(here), True)]
    known = [facts[name] for name in placement.names if name in facts]
    rooms = []
    for hosts in machines(known).values():
        least = min((host for host in hosts if host.mem_available is not None),
                    key=lambda host: host.mem_available, default=None)
        name = hosts[0].name if len(hosts) == 1 else f"the machine of {','.join(host.name for host in hosts)}"
        rooms.append(MachineRoom(name, placement.ranks_per_host * len(hosts), min(host.cores for host in hosts),
                                 _memory(least, f"on {least.name}") if least else None,
                                 bool(here.boot_id) and hosts[0].boot_id == here.boot_id))
    for name in (name for name in placement.names if name not in facts):
        rooms.append(MachineRoom(name, placement.ranks_per_host, here.cores,
                                 _memory(here, f"here, standing in for {name} (not probed)"), True))
    return rooms


def busiest_machine(placement: Placement, facts: dict[str, HostFacts]) -> MachineRoom:
    """The machine of a launch that holds the most ranks per core (machine_rooms says which there are)."""
    return max(machine_rooms(placement, facts), key=lambda room: room.ranks / max(room.cores, 1))


def tightest_memory(placement: Placement, facts: dict[str, HostFacts]) -> MachineRoom:
    """The machine of a launch with the least memory a rank; the busiest where no memory is known."""
    rooms = machine_rooms(placement, facts)
    known = [room for room in rooms if room.memory is not None]
    if not known:
        return max(rooms, key=lambda room: room.ranks / max(room.cores, 1))
    return min(known, key=lambda room: room.memory[0] / max(room.ranks, 1))


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


#: a row names at most this many hosts; a longer list is its first and last name and its length,
#: the digest says which list it is and parts/<launch>.placement.json has every name (every name
#: on every row was 42 MB of part rows and CSV at 8192 nodes)
MAX_HOSTS_ON_ROW = 16


def hosts_on_row(hosts: tuple[str, ...] | list[str]) -> str:
    """The ``hosts`` column: the names, or ``first,...,last (N hosts)`` past MAX_HOSTS_ON_ROW."""
    if len(hosts) <= MAX_HOSTS_ON_ROW:
        return ",".join(hosts)
    return f"{hosts[0]},...,{hosts[-1]} ({len(hosts)} hosts)"


