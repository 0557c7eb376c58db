"""Processes by namespace: what a lab host runs, found through /proc, stopped by pid."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

PROC = Path("/proc")


def namespace_id(pid: int, kind: str) -> str | None:
    """``net:[4026532…]`` of process ``pid`` (None: the process is gone)."""
    try:
        return os.readlink(PROC / str(pid) / "ns" / kind)
    except OSError:
        return None


def alive(pid: int) -> bool:
    """Running, not a zombie (a reaped-by-nobody zombie counts as gone: its namespaces are released)."""
    try:
        stat = (PROC / str(pid) / "stat").read_text()
    except OSError:
        return False
    return stat[stat.rindex(")") + 2:][:1] not in ("Z", "X")


def parent_of(pid: int) -> int | None:
    try:
        stat = (PROC / str(pid) / "stat").read_text()
    except OSError:
        return None
    return int(stat[stat.rindex(")") + 2:].split()[1])


def children_of(pid: int) -> list[int]:
    """Live children of ``pid`` (this kernel has no /proc/PID/task/TID/children)."""
    return [other for other in _pids() if parent_of(other) == pid and alive(other)]


def _pids() -> list[int]:
    return [int(entry.name) for entry in PROC.iterdir() if entry.name.isdigit()]


def members(kind: str, namespaces: set[str]) -> list[int]:
    """Live processes whose ``kind`` namespace (net, pid) is one of ``namespaces``."""
    found = []
    for pid in _pids():
        if pid != os.getpid() and namespace_id(pid, kind) in namespaces and alive(pid):
            found.append(pid)
    return found


def command_line(pid: int) -> str:
    try:
        return (PROC / str(pid) / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
    except OSError:
        return ""


def kill_all(pids: list[int], sig: int = signal.SIGKILL, wait_s: float = 5.0) -> list[int]:
    """Signal every pid, wait until they are gone; the pids still alive after ``wait_s``."""
    for pid in pids:
        try:
            os.kill(pid, sig)
        except (ProcessLookupError, PermissionError):
            pass
    deadline = time.monotonic() + wait_s
    left = [pid for pid in pids if alive(pid)]
    while left and time.monotonic() < deadline:
        time.sleep(0.02)
        left = [pid for pid in left if alive(pid)]
    return left
