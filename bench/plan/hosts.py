"""Named hosts and where each launch's ranks go on them.

Hosts come from the suite (``hosts:`` or ``hostfile:``), from ``--hosts``/``--hostfile``, from
the launcher's own hostfile variable (MPICH's ``HYDRA_HOST_FILE``, Open MPI's default hostfile),
from the batch job the sweep runs in (PBS/Torque ``PBS_NODEFILE``, LSF ``LSB_DJOB_HOSTFILE`` or
``LSB_MCPU_HOSTS``), or from the Slurm allocation (bench/sweep/where.py decides which). A launch
takes as many of them as it has nodes (at most all), the same number of ranks on each, in blocks
(rank = host * ranks_per_host + local rank), so the real placement is known before the job
starts and the launch id names it. ``ranks_per_node`` smaller than the ranks a host holds cuts
each host into virtual nodes, as on one host.
"""

from __future__ import annotations

import hashlib
import re
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from bench.errors import BadInput

#: a host name or address as launchers take it (no ':' or ',': those separate slots and hosts)
HOST_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,252}$")
#: hostfiles are a line per host; this is far beyond any machine and keeps a stray file out
MAX_HOSTFILE_BYTES = 4 << 20
MAX_HOSTS = 100_000
_OPEN_MPI_SLOTS = re.compile(r"^(slots|max_slots|max-slots)=(\d+)$")


@dataclass(frozen=True)
class Host:
    name: str
    #: how many ranks it may hold (None: as many as a launch puts there)
    slots: int | None = None

    def __str__(self) -> str:
        return self.name if self.slots is None else f"{self.name}:{self.slots}"


def parse_host(text: str) -> Host:
    """``h1`` or ``h1:4`` (MPICH's host:slots); ValueError saying what is wrong."""
    name, sep, slots = str(text).strip().partition(":")
    if not HOST_NAME.match(name):
        raise ValueError(f"{text!r} is not a host name (letters, digits, '.', '_', '-'; host:slots for slots)")
    if not sep:
        return Host(name)
    if not slots.isdigit() or int(slots) < 1:
        raise ValueError(f"{text!r}: slots after ':' are a positive number")
    return Host(name, int(slots))


def host_list(values: list[str], where: str) -> list[Host]:
    """Hosts from a list of ``name[:slots]``, each once."""
    return _distinct([(str(index), value) for index, value in enumerate(values)], where)


def _distinct(entries: list[tuple[str, str]], where: str) -> list[Host]:
    """Hosts from (label, ``name[:slots]``) pairs; an error names the label (index, file:line)."""
    hosts: list[Host] = []
    seen: set[str] = set()
    for label, text in entries:
        try:
            host = parse_host(text)
        except ValueError as error:
            raise BadInput(where, f"{label}: {error}") from None
        if host.name in seen:
            raise BadInput(where, f"{label}: {host.name!r} is listed twice")
        seen.add(host.name)
        hosts.append(host)
    return hosts


def split_flag(text: str) -> list[str]:
    """``--hosts h1,h2:2`` as a list."""
    return [part for part in (piece.strip() for piece in text.split(",")) if part]


def _read_text(path: Path, where: str) -> str:
    """A hostfile's text, read boundedly: a FIFO or device is refused, never waited on."""
    try:
        mode = path.stat().st_mode
    except FileNotFoundError:
        raise BadInput(where, f"{path}: hostfile not found") from None
    except OSError as error:
        raise BadInput(where, f"{path}: cannot read the hostfile: {error.strerror or error}") from None
    if not stat.S_ISREG(mode):
        raise BadInput(where, f"{path}: not a regular file")
    with open(path, "rb") as handle:
        data = handle.read(MAX_HOSTFILE_BYTES + 1)
    if len(data) > MAX_HOSTFILE_BYTES:
        raise BadInput(where, f"{path}: larger than the {MAX_HOSTFILE_BYTES} bytes a hostfile may be")
    try:
        return data.decode()
    except UnicodeDecodeError:
        raise BadInput(where, f"{path}: not UTF-8 text") from None


def read_hostfile(path: Path, where: str) -> list[Host]:
    """An MPICH (``host[:slots]``) or Open MPI (``host slots=N``) hostfile; ``#`` starts a comment.
    Read boundedly (a FIFO or device is refused, never waited on)."""
    text = _read_text(path, where)
    entries = []
    for number, line in enumerate(text.splitlines(), 1):
        words = line.split("#", 1)[0].split()
        if not words:
            continue
        entry = words[0]
        for word in words[1:]:
            found = _OPEN_MPI_SLOTS.match(word)
            if not found:
                raise BadInput(where, f"{path}:{number}: {word!r}: expected slots=N (Open MPI) or host:slots (MPICH)")
            if found.group(1) == "slots":
                if ":" in entry or int(found.group(2)) < 1:
                    raise BadInput(where, f"{path}:{number}: slots given twice or not positive")
                entry = f"{entry}:{found.group(2)}"
        entries.append((number, entry))
        if len(entries) > MAX_HOSTS:
            raise BadInput(where, f"{path}: more than {MAX_HOSTS} hosts")
    if not entries:
        raise BadInput(where, f"{path}: names no host")
    return _distinct([(f"{path}:{number}", entry) for number, entry in entries], where)


def read_slot_file(path: Path, where: str) -> list[Host]:
    """A batch system's host file of one line per slot (PBS_NODEFILE, LSB_DJOB_HOSTFILE): a host
    listed on k lines is ``Host(name, k)``, the hosts in the order they first appear. Read boundedly."""
    text = _read_text(path, where)
    slots: dict[str, int] = {}
    for number, line in enumerate(text.splitlines(), 1):
        words = line.split("#", 1)[0].split()
        if not words:
            continue
        if len(words) > 1 or not HOST_NAME.match(words[0]):
            raise BadInput(where, f"{path}:{number}: {line.strip()!r} is not a host name (one host name a line, "
                                  "a line per slot)")
        slots[words[0]] = slots.get(words[0], 0) + 1
        if len(slots) > MAX_HOSTS:
            raise BadInput(where, f"{path}: more than {MAX_HOSTS} hosts")
    if not slots:
        raise BadInput(where, f"{path}: names no host")
    return [Host(name, count) for name, count in slots.items()]


def parse_host_counts(text: str, where: str) -> list[Host]:
    """LSF's ``LSB_MCPU_HOSTS``: ``h1 4 h2 4``, each host and its slots, each host once."""
    words = text.split()
    if not words or len(words) % 2:
        raise BadInput(where, f"{len(words)} words: expected pairs of a host and its slots (h1 4 h2 4)")
    if len(words) > 2 * MAX_HOSTS:
        raise BadInput(where, f"more than {MAX_HOSTS} hosts")
    pairs = [(f"host {index + 1}", f"{words[2 * index]}:{words[2 * index + 1]}") for index in range(len(words) // 2)]
    return _distinct(pairs, where)


@dataclass(frozen=True)
class HostPlan:
    """The hosts a sweep's launches go to, and where that list came from."""

    hosts: tuple[Host, ...] = ()
    #: "this host", "suite hosts", "--hosts", "hostfile PATH", "HYDRA_HOST_FILE=PATH", "PBS_NODEFILE=PATH",
    #: "Slurm allocation N", ...; the launcher is told the names of every launch whatever the source
    #: (bench/sweep/where.py host_plan says why)
    source: str = "this host"
    #: no names, the launcher picks whole nodes (srun making a job of its own): ranks_per_node
    #: sets how many ranks each real node gets; without it Slurm chooses the nodes
    launcher_nodes: bool = False


@dataclass(frozen=True)
class Placement:
    """Where one launch's ranks go: ``nhosts`` hosts (named, or the launcher's choice) of
    ``ranks_per_host`` ranks each, in blocks."""

    nhosts: int
    ranks_per_host: int
    names: tuple[str, ...] = ()
    #: srun's own job without ranks_per_node: Slurm chooses the nodes and the ranks on each, so
    #: ``nhosts`` x ``ranks_per_host`` (1 x nranks) is only the most one node could be asked to hold
    launcher_spreads: bool = False

    @property
    def named(self) -> bool:
        return bool(self.names)

    def label(self) -> str:
        """The launch id's part: ``h2x4`` = 2 named hosts of 4 ranks (empty on this host alone)."""
        return f"h{self.nhosts}x{self.ranks_per_host}" if self.names else ""


def hosts_digest(hosts: tuple[str, ...] | list[str]) -> str:
    """16 hex digits of the SHA-256 of host names in rank order, one a line: the same hosts in the same
    order, the same digest, at any length (a row's ``hosts_digest``; a cell's planned hosts in its key)."""
    return hashlib.sha256("\n".join(hosts).encode()).hexdigest()[:16]


def place(nranks: int, ranks_per_node: int | None, plan: HostPlan) -> Placement:
    """The placement of a launch of ``nranks`` ranks in nodes of ``ranks_per_node`` (None: the
    real nodes); ValueError where it does not fit."""
    if plan.launcher_nodes:
        if ranks_per_node is None:
            return Placement(1, nranks, launcher_spreads=True)
        return Placement(nranks // ranks_per_node, ranks_per_node)
    if not plan.hosts:
        return Placement(1, nranks)
    nodes = nranks // ranks_per_node if ranks_per_node else nranks
    used = min(len(plan.hosts), nodes)
    if nodes % used:
        names = ", ".join(host.name for host in plan.hosts[:used])
        unit = f"{nodes} nodes of {ranks_per_node}" if ranks_per_node else f"{nranks} ranks"
        raise ValueError(f"{unit} do not spread evenly over {used} hosts ({names})")
    per_host = nranks // used
    for host in plan.hosts[:used]:
        if host.slots is not None and host.slots < per_host:
            hosts = f"each of {used} hosts" if used > 1 else "one host"
            raise ValueError(f"{nranks} ranks need {per_host} on {hosts}; {host.name} has {host.slots} "
                             f"slot{'s' if host.slots > 1 else ''}")
    return Placement(used, per_host, tuple(host.name for host in plan.hosts[:used]))


class NamesHosts(Protocol):
    """What a host plan reads of a suite (bench/plan/suite.py's Suite; no import of it here: the
    suite's schema checks host names with this module's parse_host)."""

    hosts: list[str] | None
    hostfile: str | None


def suite_host_plan(suite: NamesHosts, source: str | None = None) -> HostPlan:
    """The hosts the suite names (``hosts:`` or ``hostfile:``, --hosts/--hostfile written into it),
    or this host alone. ``source`` says where the names came from (default: the suite field)."""
    if suite.hosts:
        return HostPlan(tuple(host_list(suite.hosts, source or "hosts")), source or "hosts")
    if suite.hostfile:
        where = source or "hostfile"
        return HostPlan(tuple(read_hostfile(Path(suite.hostfile), where)), f"{where} {suite.hostfile}")
    return HostPlan()
