"""``pccl-bench lab up|link|exec|status|kill|down``: namespace hosts on this machine (docs/LAB.md)."""

from __future__ import annotations

import json
import os
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

from bench.errors import BadInput
from bench.lab import lab as lab_ops
from bench.lab.state import Link

app = typer.Typer(
    help="A lab of network-namespace hosts on this machine (root): real TCP between hosts h1..hN, "
         "a login host for the launchers, links bridged or emulated (delay, rate). docs/LAB.md.",
    no_args_is_help=True,
)

LabName = Annotated[str, typer.Option("--lab", envvar="PCCL_LAB", help="Which lab (several may be up at once).")]
Delay = Annotated[float, typer.Option("--delay", help="Added one-way latency between hosts, us (0: none).")]
Rate = Annotated[float, typer.Option("--rate", help="Rate of every host link, each direction, Gbit/s (0: none).")]
Spin = Annotated[str, typer.Option("--spin", help="Emulator: spin this many us before a departure instead of "
                                                "sleeping; auto: its own measure of this machine's timer wake-up "
                                                "latency.")]


def _spin(value: str) -> float | None:
    if value == "auto":
        return None
    try:
        return float(value)
    except ValueError:
        raise BadInput("--spin", f"{value!r}: auto or microseconds") from None


@app.command("up")
def up(
    hosts: Annotated[int, typer.Argument(help="How many compute hosts (h1..hN).")],
    delay: Delay = 0.0,
    rate: Rate = 0.0,
    spin: Spin = "auto",
    mtu: Annotated[int, typer.Option("--mtu", help="MTU of every link.")] = Link.mtu,
    prefix: Annotated[str, typer.Option("--prefix", help="Host names: PREFIX1..PREFIXN.")] = "h",
    lab: LabName = "lab",
) -> None:
    """Bring up N hosts and a login host on one switch; prints how to use them."""
    made = lab_ops.up(lab, hosts, prefix, Link(delay_us=delay, rate_gbit=rate, mtu=mtu, spin_us=_spin(spin)))
    names = ",".join(node.name for node in made.hosts)
    typer.echo(f"lab {made.name}: login + {names} on {made.link.describe()}")
    typer.echo(f"  pccl-bench lab exec login -- pccl-bench run sweep SUITE --hosts {names}")


@app.command("link")
def link(delay: Delay = 0.0, rate: Rate = 0.0, spin: Spin = "auto", lab: LabName = "lab") -> None:
    """Change the links of a running lab (no delay and no rate: the kernel bridge)."""
    changed = lab_ops.set_link(lab, Link(delay_us=delay, rate_gbit=rate, spin_us=_spin(spin)))
    typer.echo(f"lab {changed.name}: {changed.link.describe()}")


@app.command("exec", context_settings={"allow_interspersed_args": False})
def exec_command(
    host: Annotated[str, typer.Argument(help="login, h1, ... (or an address).")],
    command: Annotated[list[str], typer.Argument(help="The command and its arguments (after --).")],
    lab: LabName = "lab",
) -> None:
    """Run a command on a host, in the current directory, with the lab's ssh stand-in set for
    launchers (HYDRA_LAUNCHER_EXEC, OMPI_MCA_plm_rsh_agent); exits with the command's status."""
    command = command[1:] if command[:1] == ["--"] else command
    argv, env = lab_ops.exec_argv(lab, host, list(command))
    os.execve(argv[0], argv, env)


@app.command("status")
def status(lab: LabName = "lab",
           as_json: Annotated[bool, typer.Option("--json", help="As JSON.")] = False) -> None:
    """Hosts, addresses, processes, link byte counters, and the emulator's figures."""
    facts = lab_ops.status(lab)
    if as_json:
        typer.echo(json.dumps(facts, indent=1))
        return
    table = Table("host", "address", "up", "processes", "rx bytes", "tx bytes",
                  title=f"lab {facts['lab']}: {facts['link']}")
    for node in facts["nodes"]:
        table.add_row(node["name"], node["address"], "yes" if node["up"] else "[red]no[/red]",
                      "-" if node["processes"] is None else str(node["processes"]),
                      f"{node['rx_bytes']:,}", f"{node['tx_bytes']:,}")
    console = Console()
    console.print(table)
    emulator = facts["emulator"]
    if emulator:
        late = emulator["late_hist_us"]
        on_time = late[0] / max(emulator["departures"], 1)
        console.print(f"emulator: {emulator['departures']:,} frames sent ({emulator['sched']} scheduling), "
                      f"late < 1 us: {on_time:.0%}, latest {emulator['late_max_us']:.0f} us, "
                      f"dropped {sum(port['dropped'] for port in emulator['ports'].values()):,}", highlight=False)


@app.command("kill")
def kill(host: Annotated[str, typer.Argument(help="The compute host whose processes die.")],
         lab: LabName = "lab") -> None:
    """Kill every process of one host (a node crash; the host itself stays, for --resume)."""
    killed = lab_ops.kill_host(lab, host)
    typer.echo(f"lab {lab}: killed {len(killed)} processes on {host}")


@app.command("down")
def down(lab: LabName = "lab") -> None:
    """Stop everything running in the lab, then the lab itself."""
    stopped = lab_ops.down(lab)
    typer.echo(f"lab {lab}: down ({stopped} processes stopped)")
