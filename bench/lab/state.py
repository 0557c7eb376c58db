"""What a lab is made of, kept in ``<state>/<lab>/lab.json`` while it is up (``$PCCL_LAB_STATE``,
default /run/pccl-lab: gone with a reboot, as the namespaces are)."""

from __future__ import annotations

import fcntl
import json
import os
import re
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path

from bench.errors import BadInput
from bench.lab import processes

#: the lab's addresses: inside its own namespaces only, never routed anywhere else
SUBNET = "10.77.0"
LOGIN_ADDRESS = f"{SUBNET}.2"
FIRST_HOST_OCTET = 11
MAX_HOSTS = 60
NAME_PATTERN = re.compile(r"^[a-z][a-z0-9-]{0,15}$")
HOST_PREFIX_PATTERN = re.compile(r"^[a-z][a-z0-9-]{0,7}$")


def state_root() -> Path:
    return Path(os.environ.get("PCCL_LAB_STATE", "/run/pccl-lab"))


@dataclass
class Node:
    """One namespace host (or the login namespace) and the process that holds its namespaces."""

    name: str
    address: str
    #: the holder: pid 1 of the host's PID namespace (the login namespace has none of its own)
    pid: int
    #: the switch-side end of its link
    port: str
    #: ``net:[...]`` of the holder when it was made (a recycled pid never passes for it)
    netns: str
    pidns: str | None = None

    def is_up(self) -> bool:
        return processes.alive(self.pid) and processes.namespace_id(self.pid, "net") == self.netns


@dataclass
class Link:
    """How the switch treats every host link."""

    #: added one way, host to host (us); 0 with rate 0: the kernel bridge
    delay_us: float = 0.0
    #: per host link, each direction (Gbit/s); 0: no limit
    rate_gbit: float = 0.0
    mtu: int = 9000
    #: the emulator spins this long before a departure instead of sleeping; None: its own measure
    #: of this machine's timer wake-up latency (the 90th percentile of its recent wake-ups)
    spin_us: float | None = None
    #: tail drop past this many bytes queued on a link
    queue_bytes: int = 512 * 1024

    @property
    def emulated(self) -> bool:
        return self.delay_us > 0 or self.rate_gbit > 0

    def describe(self) -> str:
        if not self.emulated:
            return f"bridge (kernel), MTU {self.mtu}"
        parts = [f"+{self.delay_us:g} us one way"] if self.delay_us else []
        parts += [f"{self.rate_gbit:g} Gbit/s per link"] if self.rate_gbit else []
        return f"emulated ({', '.join(parts)}; labhelper switch), MTU {self.mtu}"


@dataclass
class Lab:
    name: str
    folder: str
    helper: str
    switch_pid: int
    switch_netns: str
    login: Node
    hosts: list[Node] = field(default_factory=list)
    link: Link = field(default_factory=Link)
    emulator_pid: int | None = None

    @property
    def nodes(self) -> list[Node]:
        return [self.login, *self.hosts]

    def node(self, name: str) -> Node:
        for node in self.nodes:
            if name in (node.name, node.address):
                return node
        known = ", ".join(node.name for node in self.nodes)
        raise BadInput("lab", f"{self.name} has no host {name!r} (its hosts: {known})")

    @property
    def path(self) -> Path:
        return Path(self.folder)

    def save(self) -> None:
        temp = self.path / "lab.json.tmp"
        temp.write_text(json.dumps(asdict(self), indent=1))
        os.replace(temp, self.path / "lab.json")


def check_name(name: str) -> str:
    if not NAME_PATTERN.match(name):
        raise BadInput("--lab", f"{name!r}: a lab name is 1-16 lower-case letters, digits or '-', starting with "
                       "a letter")
    return name


def lab_folder(name: str) -> Path:
    return state_root() / check_name(name)


def load(name: str) -> Lab | None:
    """The lab ``name`` as recorded (None: not up)."""
    path = lab_folder(name) / "lab.json"
    try:
        values = json.loads(path.read_text())
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as error:
        raise BadInput(str(path), f"not a lab record ({error}); `pccl-bench lab down --lab {name}` clears it") from None
    values["login"] = Node(**values["login"])
    values["hosts"] = [Node(**node) for node in values["hosts"]]
    values["link"] = Link(**values["link"])
    return Lab(**values)


def require(name: str) -> Lab:
    lab = load(name)
    if lab is None:
        raise BadInput("lab", f"no lab {name!r} is up (`pccl-bench lab up N --lab {name}` brings one up)")
    return lab


@contextmanager
def locked(name: str) -> Iterator[None]:
    """One ``up``/``down``/``link`` at a time per lab."""
    root = state_root()
    root.mkdir(parents=True, exist_ok=True)
    with open(root / f"{check_name(name)}.lock", "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)
