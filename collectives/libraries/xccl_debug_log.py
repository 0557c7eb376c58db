"""What NCCL/RCCL says it uses, read from its own ``NCCL_DEBUG=INFO`` lines: the network (a plugin
such as aws-ofi-rccl over Libfabric, IB verbs, or TCP sockets) and the library version at run time.

NCCL's debug lines are ``host:pid:tid [dev] NCCL INFO <message>``; the messages read here:

- ``NCCL version 2.18.5+cuda12.2`` (RCCL: ``RCCL version 2.20.5+hip6.2 ...`` or ``NCCL version ...``)
- ``NET/Plugin : Plugin load (librccl-net.so) returned 2 : ...``, ``NET/Plugin : No plugin found ...``,
  ``NET/Plugin: Could not find: libnccl-net.so ...`` (no plugin); ``NET/OFI Using aws-ofi-rccl 1.4.0``,
  ``NET/Plugin: Loaded net plugin NCCL RDMA Plugin v8`` (a plugin)
- ``NET/OFI Unable to find a protocol that worked. Failing initialization.``, ``NET/OFI No eligible
  providers were found`` (a plugin that loaded and did not start: NCCL goes on over sockets)
- ``NET/IB : Using [0]mlx5_0:1/IB ...``, ``NET/Socket : Using [0]eth0:10.0.0.1<0>``
- ``Using network AWS Libfabric`` | ``IB`` | ``Socket``: the one NCCL chose.

``capture`` asks NCCL for these lines (INIT and NET only: printed while communicators are made,
never during a collective) in a file of this process, unless the user set NCCL_DEBUG_FILE.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import re
import sys
import tempfile
from collections.abc import Iterable, MutableMapping
from dataclasses import dataclass

_VERSION = re.compile(r"\b([NR]CCL) version[ :]+v?(\d+\.\d+\.\d+\S*)")
_USING_NETWORK = re.compile(r"NCCL INFO Using network (.+?)\s*$")
_NET_LINE = re.compile(r"NCCL INFO NET/(OFI|IB|Socket|Plugin)\b\s*:?\s*(.*?)\s*$")
_PLUGIN_MISSING = (re.compile(r"Plugin load \(([^)]+)\) returned"),
                   re.compile(r"Could not find:?\s*(\S+?)\.?\s*(?:\s|$)"),
                   re.compile(r"Plugin load returned \d+ : (\S+?):"))
_PLUGIN_LOADED = (re.compile(r"Loaded (?:net )?plugin (.+)$"),
                  re.compile(r"Successfully loaded external plugin (\S+)"),
                  re.compile(r"(?:Using|Initializing) (aws-ofi-[nr]ccl \S+)"))
#: aws-ofi-nccl/rccl's words when it loaded but could not start (no provider, no usable NIC)
_PLUGIN_FAILED = re.compile(r"(Unable to find a protocol.*|No eligible providers.*|.*[Ff]ailing initialization.*)$")
#: the plugin each library looks for by default
DEFAULT_PLUGIN = {"NCCL": "libnccl-net.so", "RCCL": "librccl-net.so"}


@dataclass(frozen=True)
class XcclNet:
    """What one process's NCCL/RCCL said about its network ("" where it said nothing)."""

    network: str = ""  # "AWS Libfabric", "IB", "Socket", ...
    version: str = ""  # e.g. "2.18.5+cuda12.2"
    plugin: str = ""  # the network plugin it loaded
    missing_plugin: str = ""  # the plugin it looked for and did not find
    interfaces: str = ""  # NET/IB or NET/Socket's "Using ..." devices
    plugin_failed: str = ""  # why the plugin it loaded did not start (aws-ofi-*'s own words)

    @property
    def socket(self) -> bool:
        """Inter-node traffic over TCP sockets (the internal fallback)."""
        return self.network.lower() == "socket"

    @property
    def summary(self) -> str:
        """One value for the row's ``xccl_net`` column."""
        if not self.network:
            return ""
        if self.plugin:
            return f"{self.network} ({self.plugin})"
        return self.network

    def socket_warning(self, library: str) -> str:
        """The warning for a multi-node launch whose NCCL/RCCL fell back to TCP sockets ("" otherwise)."""
        if not self.socket:
            return ""
        if self.plugin:  # found, then gave up: the plugin's path is right, its provider or NICs are not
            failed = f" ({self.plugin_failed})" if self.plugin_failed else ""
            return (f"{library} uses TCP sockets between nodes (Using network Socket): its network plugin "
                    f"{self.plugin} loaded but did not start{failed}; check the libfabric it loads (the site's, "
                    "with the cxi provider on Slingshot) and FI_PROVIDER")
        missing = self.missing_plugin or DEFAULT_PLUGIN.get(library, "the network plugin")
        hint = ("aws-ofi-rccl's lib folder on LD_LIBRARY_PATH (Frontier)" if library == "RCCL"
                else "the site's NCCL network plugin (e.g. aws-ofi-nccl on Slingshot) on LD_LIBRARY_PATH")
        return (f"{library} uses TCP sockets between nodes (Using network Socket): its network plugin {missing} "
                f"was not found; put {hint}")


def _first(patterns: tuple[re.Pattern, ...], text: str) -> str:
    for pattern in patterns:
        if hit := pattern.search(text):
            return hit.group(1).strip()
    return ""


def parse(lines: Iterable[str]) -> XcclNet:
    """The network and version one process's NCCL_DEBUG=INFO lines name."""
    network = version = plugin = missing = interfaces = failed = ""
    for line in lines:
        if not version and (found := _VERSION.search(line)):
            version = found.group(2)
        if found := _USING_NETWORK.search(line):
            network = found.group(1)
            continue
        if not (found := _NET_LINE.search(line)):
            continue
        kind, message = found.groups()
        if kind in ("Plugin", "OFI"):
            if kind == "OFI" and (gave_up := _PLUGIN_FAILED.search(message)):
                failed = failed or gave_up.group(1).strip().rstrip(".")
                continue
            if absent := _first(_PLUGIN_MISSING, message):
                missing = missing or absent
            elif loaded := _first(_PLUGIN_LOADED, message):
                plugin = plugin or loaded
            if kind == "OFI":
                network = network or "OFI"
        elif message.startswith("Using"):
            interfaces = message.removeprefix("Using").strip()
            network = network or kind
    if plugin:  # NCCL tries several names; one loaded
        missing = ""
    if failed and network == "OFI":  # it named no network of its own, and the plugin gave up
        network = ""
    return XcclNet(network, version, plugin, missing, interfaces, failed)


def capture(env: MutableMapping[str, str] | None = None) -> str | None:
    """Ask NCCL/RCCL (before its first call in this process) for its INIT and NET lines in a file of
    this process; the file's path, or None where the user's own NCCL_DEBUG settings stay (a
    NCCL_DEBUG_FILE of theirs, or a level below INFO)."""
    env = os.environ if env is None else env
    if env.get("NCCL_DEBUG_FILE"):
        return None
    level = env.get("NCCL_DEBUG", "").upper()
    if level and level not in ("INFO", "TRACE"):
        return None
    if not level:
        env["NCCL_DEBUG"] = "INFO"
        env["NCCL_DEBUG_SUBSYS"] = env.get("NCCL_DEBUG_SUBSYS") or "INIT,NET"
    path = os.path.join(tempfile.gettempdir(), f"pccl-bench-nccl-{os.getpid()}.log")
    env["NCCL_DEBUG_FILE"] = path
    return path


@dataclass
class Capture:
    """This process's capture: NCCL reads its debug settings once, at its first call, so there is one
    per process whatever the communicators (the pre-flight's probe and the worker's cells in one
    ``--launcher none`` rank share it)."""

    path: str | None
    #: the user set NCCL_DEBUG: their lines are handed back whole, not only the warnings
    user_asked: bool
    #: bytes of the file already handed back to the job's output
    handed_back: int = 0

    def read(self) -> XcclNet:
        return read(self.path)

    def hand_back(self) -> None:
        """What NCCL wrote since the last call, to stderr (all of it where the user asked for
        NCCL_DEBUG, else its warnings): the job's log keeps NCCL's warnings."""
        if not self.path:
            return
        try:
            with open(self.path, "rb") as log:
                log.seek(self.handed_back)
                text = log.read()
        except OSError:
            return
        self.handed_back += len(text)
        lines = text.decode(errors="replace").splitlines(keepends=True)
        kept = [line for line in lines if self.user_asked or " NCCL WARN " in line]
        if kept:
            sys.stderr.writelines(kept)
            sys.stderr.flush()


_PROCESS: list[Capture] = []  # at most one: this process's capture (Capture's docstring)


def process_capture() -> Capture:
    """This process's capture, made before NCCL's first call (``capture`` on os.environ), its file
    removed at exit."""
    if not _PROCESS:
        user_asked = bool(os.environ.get("NCCL_DEBUG"))
        path = capture()
        if path:
            atexit.register(_remove, path)
        _PROCESS.append(Capture(path, user_asked))
    return _PROCESS[0]


def _remove(path: str) -> None:
    with contextlib.suppress(OSError):
        os.unlink(path)


def read(path: str | None) -> XcclNet:
    """What the captured file says so far (empty where there is none)."""
    if not path:
        return XcclNet()
    try:
        with open(path, errors="replace") as log:
            return parse(log)
    except OSError:
        return XcclNet()
