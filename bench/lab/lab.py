"""Bring a lab up and down, enter its hosts, fail one of them (``pccl-bench lab ...``)."""

from __future__ import annotations

import hashlib
import os
import shlex
import shutil
import subprocess
from pathlib import Path

from bench.errors import BadInput
from bench.lab import links, namespaces, processes
from bench.lab.state import (
    FIRST_HOST_OCTET,
    HOST_PREFIX_PATTERN,
    LOGIN_ADDRESS,
    MAX_HOSTS,
    SUBNET,
    Lab,
    Link,
    lab_folder,
    load,
    locked,
    require,
    state_root,
)

#: the helper's C sources (compiled together) and what they share
HELPER_SOURCES = [Path(__file__).with_name(name) for name in ("labhelper.c", "switch.c", "switch_port.c")]
HELPER_HEADER = Path(__file__).with_name("labhelper.h")
#: Debian packages that hold what the lab runs
PACKAGES = {"unshare": "util-linux", "nsenter": "util-linux", "setpriv": "util-linux", "mountpoint": "util-linux",
            "ip": "iproute2", "cc": "gcc"}
LOGIN = "login"


def unavailable() -> str | None:
    """Why no lab can be built here (None: it can), after installing what is missing where allowed."""
    if os.geteuid() != 0:
        return "the lab needs root (network, PID and mount namespaces, veth links)"
    missing = [name for name in PACKAGES if not _found(name)]
    if missing and shutil.which("apt-get"):
        packages = sorted({PACKAGES[name] for name in missing})
        env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
        apt = ["timeout", "300", "apt-get", "-o", "DPkg::Lock::Timeout=60", "-qq"]
        subprocess.run([*apt, "update"], capture_output=True, env=env)
        subprocess.run([*apt, "install", "-y", "--no-install-recommends", *packages], capture_output=True, env=env)
        missing = [name for name in PACKAGES if not _found(name)]
    if missing:
        return f"missing {', '.join(missing)} (Debian: {' '.join(sorted({PACKAGES[n] for n in missing}))})"
    flags = ["--net", "--uts", "--ipc", "--mount", "--pid", "--fork"]
    probe = subprocess.run([namespaces.tool("unshare"), *flags, "true"], capture_output=True, text=True)
    if probe.returncode != 0:
        why = (probe.stderr.strip().splitlines() or [f"exit {probe.returncode}"])[-1]
        return f"namespaces are not allowed here ({why})"
    return None


def _found(name: str) -> bool:
    if name == "cc":
        return bool(os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc"))
    try:
        namespaces.tool(name)
        return True
    except BadInput:
        return False


def helper_binary() -> str:
    """The helper compiled once per source version (in the state folder: root's, not the checkout's)."""
    digest = hashlib.sha1(b"".join(path.read_bytes() for path in (*HELPER_SOURCES, HELPER_HEADER))).hexdigest()
    target = state_root() / "bin" / f"labhelper-{digest[:10]}"
    if target.exists():
        return str(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    compiler = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc") or "cc"
    temp = target.with_suffix(".tmp")
    result = subprocess.run([*shlex.split(compiler), "-O2", "-o", str(temp), *map(str, HELPER_SOURCES)],
                            capture_output=True, text=True)
    if result.returncode != 0:
        raise BadInput("lab up", f"cannot compile the lab's helper: {result.stderr.strip()[-300:]}")
    os.replace(temp, target)
    return str(target)


def host_names(count: int, prefix: str) -> list[str]:
    if not 1 <= count <= MAX_HOSTS:
        raise BadInput("lab up", f"{count} hosts: a lab has 1 to {MAX_HOSTS}")
    if not HOST_PREFIX_PATTERN.match(prefix) or prefix == LOGIN:
        raise BadInput("--prefix", f"{prefix!r}: 1-8 lower-case letters or digits, starting with a letter")
    return [f"{prefix}{index}" for index in range(1, count + 1)]


def up(name: str, count: int, prefix: str = "h", link: Link | None = None) -> Lab:
    """A new lab of ``count`` hosts and a login namespace on one switch (refused if one is up)."""
    names = host_names(count, prefix)
    link = link or Link()
    _check_link(link)
    reason = unavailable()
    if reason:
        raise BadInput("lab up", reason)
    with locked(name):
        existing = load(name)
        if existing is not None:
            if all(node.is_up() for node in existing.nodes) and processes.alive(existing.switch_pid):
                raise BadInput("lab up", f"lab {name!r} is already up ({len(existing.hosts)} hosts); "
                               f"`pccl-bench lab down --lab {name}` first")
            _teardown(existing)
        helper = helper_binary()
        folder = lab_folder(name)
        shutil.rmtree(folder, ignore_errors=True)
        folder.mkdir(parents=True)
        addresses = {LOGIN: LOGIN_ADDRESS, **{host: f"{SUBNET}.{FIRST_HOST_OCTET + i}" for i, host in enumerate(names)}}
        (folder / "hosts").write_text("127.0.0.1 localhost\n::1 localhost ip6-localhost ip6-loopback\n"
                                      + "".join(f"{address} {host}\n" for host, address in addresses.items()))
        switch_pid, switch_netns = namespaces.start_switch(folder, helper)
        lab = Lab(name, str(folder), helper, switch_pid, switch_netns, login=None,  # type: ignore[arg-type]
                  link=Link(mtu=link.mtu))
        try:
            lab.login = namespaces.start(LOGIN, LOGIN_ADDRESS, "port0", folder, helper, own_pids=False)
            for index, host in enumerate(names, 1):
                lab.hosts.append(namespaces.start(host, addresses[host], f"port{index}", folder, helper, own_pids=True))
            links.wire(lab)
            if link.emulated:
                links.apply(lab, link)
            _write_rsh(lab)
            lab.save()
        except BaseException:
            _teardown(lab)
            shutil.rmtree(folder, ignore_errors=True)
            raise
        return lab


def _check_link(link: Link) -> None:
    for field, value, top in (("--delay", link.delay_us, 1e6), ("--rate", link.rate_gbit, 1000),
                              ("--spin", link.spin_us, 1e4)):
        if value is not None and not 0 <= value <= top:
            raise BadInput(field, f"{value!r}: expected 0 to {top:g}")
    if not 1280 <= link.mtu <= 9000:
        raise BadInput("--mtu", f"{link.mtu}: expected 1280 to 9000")


def set_link(name: str, link: Link) -> Lab:
    """Change every host link of a running lab (the MTU stays)."""
    _check_link(link)
    with locked(name):
        lab = require(name)
        link.mtu = lab.link.mtu
        links.apply(lab, link)
        lab.save()
        return lab


def _write_rsh(lab: Lab) -> None:
    """``<lab>/rsh``: the lab's ssh stand-in for launchers (hydra -launcher-exec, Open MPI's rsh agent).

    ``rsh [ssh options] HOST COMMAND...`` runs COMMAND in HOST's namespaces, in the caller's working
    directory; killed with its caller (setpriv --pdeathsig), as a closed ssh session would end it."""
    cases = "\n".join(f"    {node.name}|{node.address}) pid={node.pid} ;;" for node in lab.hosts)
    # names and addresses are the lab's own (state.NAME_PATTERN, generated); the tool paths come from
    # PATH, so they are quoted like every value in a generated script
    nsenter, setpriv = shlex.quote(str(namespaces.tool("nsenter"))), shlex.quote(str(namespaces.tool("setpriv")))
    script = f"""#!/bin/sh
# ssh stand-in for the pccl-bench lab {lab.name!r}: rsh [ssh options] HOST COMMAND...
while [ $# -gt 0 ]; do
    case $1 in
    -[bcDEeFIiJLlmOopQRSWw]) shift 2 ;;
    --) shift; break ;;
    -*) shift ;;
    *) break ;;
    esac
done
case $1 in
{cases}
    *) echo "lab {lab.name}: no host '$1'" >&2; exit 255 ;;
esac
shift
exec {nsenter} -t "$pid" -a --wd="$PWD" -- {setpriv} --pdeathsig KILL -- /bin/sh -c "$*"
"""
    path = lab.path / "rsh"
    path.write_text(script)
    path.chmod(0o755)


def exec_environment(lab: Lab) -> dict[str, str]:
    """What a command run in the lab gets on top of the caller's environment: the launchers'
    remote shell is the lab's, so ``mpiexec -hosts h1,h2`` (MPICH) and ``mpirun --host`` (Open MPI)
    start their daemons on the lab's hosts."""
    rsh = str(lab.path / "rsh")
    return {"HYDRA_LAUNCHER": "ssh", "HYDRA_LAUNCHER_EXEC": rsh, "OMPI_MCA_plm_rsh_agent": rsh,
            "PRTE_MCA_plm_ssh_agent": rsh, "PCCL_LAB": lab.name,
            "PCCL_LAB_HOSTS": ",".join(node.name for node in lab.hosts)}


def exec_prefix(name: str, host: str, cwd: str | None = None) -> tuple[list[str], dict[str, str]]:
    """The argv prefix that runs a command on ``host`` of lab ``name`` (in ``cwd``, default this
    directory), and what its environment needs on top of the caller's."""
    lab = require(name)
    node = lab.node(host)
    if not node.is_up():
        raise BadInput("lab exec", f"host {node.name} of lab {name!r} is down; `pccl-bench lab down` and up again")
    return namespaces.enter(node.pid, "all", cwd or os.getcwd()), exec_environment(lab)


def exec_argv(name: str, host: str, argv: list[str], cwd: str | None = None) -> tuple[list[str], dict[str, str]]:
    """The nsenter argv that runs ``argv`` on ``host`` of lab ``name``, and its whole environment."""
    if not argv:
        raise BadInput("lab exec", "give the command to run, after --")
    prefix, extra = exec_prefix(name, host, cwd)
    return [*prefix, *argv], {**os.environ, **extra}


def kill_host(name: str, host: str) -> list[int]:
    """Kill every process of ``host`` but its init, as a node crash would (the host stays up, so
    ``--resume`` can use it again); the pids killed."""
    lab = require(name)
    node = lab.node(host)
    if node.name == LOGIN:
        raise BadInput("lab kill", "the login host runs the launchers; kill a compute host")
    victims = [pid for pid in processes.members("pid", {node.pidns or ""}) if pid != node.pid]
    processes.kill_all(victims)
    return victims


def host_processes(lab: Lab, host: str) -> list[int]:
    """Live processes of a compute host, its init excluded."""
    node = lab.node(host)
    return [pid for pid in processes.members("pid", {node.pidns or ""}) if pid != node.pid]


def down(name: str) -> int:
    """Stop every process in the lab's namespaces, then its holders; the number of processes stopped
    (0 and nothing done where no lab ``name`` is up)."""
    with locked(name):
        lab = load(name)
        if lab is None:
            shutil.rmtree(lab_folder(name), ignore_errors=True)
            return 0
        stopped = _teardown(lab)
        shutil.rmtree(lab.path, ignore_errors=True)
        return stopped


def _teardown(lab: Lab) -> int:
    """Everything the lab runs (members of its network namespaces), then the holders."""
    holders = [node.pid for node in lab.nodes if node is not None] + [lab.switch_pid]
    namespaces = {node.netns for node in lab.nodes if node is not None} | {lab.switch_netns}
    inside = [pid for pid in processes.members("net", namespaces) if pid not in holders]
    processes.kill_all(inside)
    processes.kill_all([pid for pid in holders if processes.alive(pid)
                        and processes.namespace_id(pid, "net") in namespaces])
    return len(inside)


def status(name: str) -> dict:
    """Each node: address, up or not, processes, link byte counters; the link and the emulator's figures."""
    lab = require(name)
    nodes = []
    for node in lab.nodes:
        up_now = node.is_up()
        received, sent = links.counters(node) if up_now else (0, 0)
        count = len(host_processes(lab, node.name)) if node.pidns and up_now else None
        nodes.append({"name": node.name, "address": node.address, "pid": node.pid, "up": up_now,
                      "processes": count, "rx_bytes": received, "tx_bytes": sent})
    return {"lab": lab.name, "link": lab.link.describe(), "nodes": nodes, "emulator": links.emulator_stats(lab),
            "rsh": str(lab.path / "rsh")}
