"""The lab's wires: one veth per host into the switch namespace, a kernel bridge there, or the
user-space link emulator (labhelper switch) when a delay or a rate is set."""

from __future__ import annotations

import json
import shlex
import subprocess
import time
from pathlib import Path

from bench.errors import BadInput
from bench.lab import processes
from bench.lab.namespaces import enter, run_in
from bench.lab.state import Lab, Link, Node

BRIDGE = "br0"
#: every host's end of its link
HOST_INTERFACE = "eth0"


def wire(lab: Lab) -> None:
    """Make every node's link and address; the bridge joins them (offloads off on both ends: every
    frame crosses whole, with its checksum, as over a wire, whether bridged or emulated)."""
    mtu = lab.link.mtu
    switch = [f"link add {BRIDGE} type bridge", f"link set {BRIDGE} mtu {mtu} up", "link set lo up"]
    for node in lab.nodes:
        switch += [f"link add {node.port} mtu {mtu} type veth peer name {HOST_INTERFACE} mtu {mtu} netns {node.pid}",
                   f"link set {node.port} master {BRIDGE} up"]
    ports = " ".join(node.port for node in lab.nodes)
    run_in(lab.switch_pid, "net", _ip_batch(switch) + f"\n{shlex.quote(lab.helper)} offload {ports}\n", "switch links")
    for node in lab.nodes:
        commands = ["link set lo up", f"addr add {node.address}/24 dev {HOST_INTERFACE}",
                    f"link set {HOST_INTERFACE} up"]
        # A fabric's transport does not restart slow start after every idle gap (RDMA has none).
        script = (_ip_batch(commands) + f"\n{shlex.quote(lab.helper)} offload {HOST_INTERFACE}\n"
                  "echo 0 > /proc/sys/net/ipv4/tcp_slow_start_after_idle\n")
        run_in(node.pid, "net", script, f"{node.name} address")


def _ip_batch(commands: list[str]) -> str:
    body = "\n".join(commands)
    return f"ip -batch - <<'EOF'\n{body}\nEOF"


def apply(lab: Lab, link: Link) -> None:
    """Put ``link`` on every host link: the bridge, or the emulator with its delay and rate."""
    stop_emulator(lab)
    ports = [node.port for node in lab.nodes]
    if not link.emulated:
        run_in(lab.switch_pid, "net", _ip_batch([f"link set {port} master {BRIDGE}" for port in ports]), "bridge")
        lab.link = link
        return
    run_in(lab.switch_pid, "net", _ip_batch([f"link set {port} nomaster" for port in ports]), "unbridge")
    stats = lab.path / "switch.json"
    stats.unlink(missing_ok=True)
    argv = [*enter(lab.switch_pid, "net"), lab.helper, "switch", "--delay-us", f"{link.delay_us:g}",
            "--rate-mbit", f"{link.rate_gbit * 1000:g}", "--queue-bytes", str(link.queue_bytes),
            "--spin-us", "auto" if link.spin_us is None else f"{link.spin_us:g}", "--stats", str(stats), *ports]
    with open(lab.path / "switch.log", "w") as log:
        emulator = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log, stderr=log, start_new_session=True)
    deadline = time.monotonic() + 5
    while not stats.exists():
        if emulator.poll() is not None or time.monotonic() > deadline:
            emulator.kill()
            why = (lab.path / "switch.log").read_text().strip().splitlines()[-1:] or ["no output"]
            raise BadInput("lab", f"the link emulator did not start: {why[0]}")
        time.sleep(0.01)
    lab.emulator_pid = emulator.pid
    lab.link = link


def stop_emulator(lab: Lab) -> None:
    if lab.emulator_pid and processes.alive(lab.emulator_pid):
        import signal

        left = processes.kill_all([lab.emulator_pid], signal.SIGTERM, wait_s=3)
        processes.kill_all(left)
    lab.emulator_pid = None


def emulator_stats(lab: Lab) -> dict | None:
    """The emulator's counters and departure lateness (written once a second), if it runs."""
    if not lab.emulator_pid:
        return None
    try:
        return json.loads((lab.path / "switch.json").read_text())
    except (OSError, ValueError):
        return None


def counters(node: Node) -> tuple[int, int]:
    """(received, sent) bytes of the host's link, read from the root namespace through its holder."""
    text = Path(f"/proc/{node.pid}/net/dev").read_text()
    for line in text.splitlines():
        name, _, values = line.partition(":")
        if name.strip() == HOST_INTERFACE:
            fields = values.split()
            return int(fields[0]), int(fields[8])
    raise BadInput("lab", f"{node.name} has no {HOST_INTERFACE}")
