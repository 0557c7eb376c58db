"""Namespace hosts: made by ``unshare`` around the helper's ``init``, entered with ``nsenter``."""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import time
from pathlib import Path

from bench.errors import BadInput
from bench.lab import processes
from bench.lab.state import Node

#: how long a new host may take to set itself up
READY_TIMEOUT_S = 10.0


def host_setup(name: str, hosts_file: Path, mounts: Path, ready: Path, helper: str) -> str:
    """The shell a new host runs before it becomes its own init: hostname, /etc/hosts, a private
    /dev/shm, and a sysfs that shows this host's network (the cgroup tree carried across)."""
    cgroup = mounts / name
    lines = [
        "set -e",
        f"echo {shlex.quote(name)} > /proc/sys/kernel/hostname",
        f"mount --bind {shlex.quote(str(hosts_file))} /etc/hosts",
        "mount -t tmpfs -o mode=1777 tmpfs /dev/shm",
        f"mkdir -p {shlex.quote(str(cgroup))}",
        "if mountpoint -q /sys/fs/cgroup; then",
        f"  mount --rbind /sys/fs/cgroup {shlex.quote(str(cgroup))}",
        "  mount -t sysfs sysfs /sys",
        f"  mount --move {shlex.quote(str(cgroup))} /sys/fs/cgroup",
        "else",
        "  mount -t sysfs sysfs /sys",
        "fi",
        f"touch {shlex.quote(str(ready))}",
        f"exec {shlex.quote(helper)} init",
    ]
    return "\n".join(lines)


def start(name: str, address: str, port: str, folder: Path, helper: str, own_pids: bool) -> Node:
    """A new host ``name`` (``own_pids``: with a PID namespace of its own; the login host shares
    the machine's, so its ssh stand-in can reach every other host by pid)."""
    ready = folder / f"{name}.ready"
    ready.unlink(missing_ok=True)
    script = host_setup(name, folder / "hosts", folder / "mnt", ready, helper)
    flags = ["--net", "--uts", "--ipc", "--mount", "--propagation", "private"]
    if own_pids:
        flags += ["--pid", "--fork", "--mount-proc"]
    log = open(folder / f"{name}.log", "w")
    holder = subprocess.Popen([tool("unshare"), *flags, "/bin/sh", "-c", script], stdin=subprocess.DEVNULL,
                              stdout=log, stderr=log, start_new_session=True, close_fds=True)
    log.close()
    deadline = time.monotonic() + READY_TIMEOUT_S
    while not ready.exists():
        if holder.poll() is not None or time.monotonic() > deadline:
            holder.kill()
            why = (folder / f"{name}.log").read_text().strip().splitlines()[-1:] or ["no output"]
            raise BadInput("lab up", f"host {name} did not come up: {why[0]}")
        time.sleep(0.01)
    pid = _init_pid(holder.pid) if own_pids else holder.pid
    netns = processes.namespace_id(pid, "net")
    return Node(name, address, pid, port, netns or "", processes.namespace_id(pid, "pid") if own_pids else None)


def _init_pid(unshare_pid: int) -> int:
    """The host's init: the child ``unshare --fork`` made (it execs the helper once set up)."""
    deadline = time.monotonic() + READY_TIMEOUT_S
    while time.monotonic() < deadline:
        for child in processes.children_of(unshare_pid):
            if "init" in processes.command_line(child):
                return child
        time.sleep(0.01)
    raise BadInput("lab up", f"the host's init (a child of unshare {unshare_pid}) did not start")


def start_switch(folder: Path, helper: str) -> tuple[int, str]:
    """The switch's namespace: a network namespace held by the helper's init."""
    holder = subprocess.Popen([tool("unshare"), "--net", helper, "init"], stdin=subprocess.DEVNULL,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    deadline = time.monotonic() + READY_TIMEOUT_S
    while time.monotonic() < deadline:
        netns = processes.namespace_id(holder.pid, "net")
        own = processes.namespace_id(os.getpid(), "net")
        if netns and netns != own and "init" in processes.command_line(holder.pid):
            return holder.pid, netns
        if holder.poll() is not None:
            break
        time.sleep(0.01)
    raise BadInput("lab up", "the switch namespace did not come up (unshare --net failed)")


def enter(node_pid: int, namespaces: str = "all", cwd: str | None = None) -> list[str]:
    """``nsenter`` argv prefix into the namespaces of ``node_pid`` (``all`` or e.g. ``net``)."""
    argv = [tool("nsenter"), "-t", str(node_pid)]
    argv += ["-a"] if namespaces == "all" else [f"--{kind}" for kind in namespaces.split(",")]
    if cwd is not None:
        argv.append(f"--wd={cwd}")
    return argv + ["--"]


def run_in(node_pid: int, namespaces: str, script: str, what: str) -> str:
    """Run a shell script inside a host's namespaces; its output, or a one-line BadInput."""
    result = subprocess.run([*enter(node_pid, namespaces), "/bin/sh", "-c", script], capture_output=True, text=True,
                            timeout=60, stdin=subprocess.DEVNULL)
    if result.returncode != 0:
        lines = (result.stderr or result.stdout).strip().splitlines() or [f"exit {result.returncode}"]
        raise BadInput("lab", f"{what}: {lines[-1]}")
    return result.stdout


def tool(name: str) -> str:
    path = shutil.which(name) or next((str(p) for p in (Path("/usr/sbin") / name, Path("/sbin") / name)
                                       if p.exists()), None)
    if path is None:
        raise BadInput("lab", f"{name} is not installed (util-linux, iproute2)")
    return path
