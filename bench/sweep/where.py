"""Where a sweep's launches run: the hosts (named by the suite, a flag, MPICH's hostfile variable or
the Slurm allocation), what each host is (probed once, before the first launch), and per launch
the busiest machine, whose cores decide the oversubscription settings and whose memory the
size check."""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass, field
from pathlib import Path

from bench.plan.cells import Launch, expand
from bench.plan.hosts import Host, HostPlan, Placement, read_hostfile, suite_host_plan
from bench.plan.suite import Suite
from bench.run import hostfacts, slurm
from bench.run.hostfacts import HostFacts, MachineRoom
from bench.run.launch import BASE_ENV, PACKAGE_HOME, Launcher, MachineLoad


def host_plan(suite: Suite, launcher: Launcher) -> HostPlan:
    """The hosts of the suite; else those the launcher is set up with (MPICH's HYDRA_HOST_FILE, the
    Slurm allocation); else this host (mpiexec) or whole nodes of srun's own job."""
    plan = suite_host_plan(suite)
    if plan.hosts:
        return plan
    hydra_file = os.environ.get("HYDRA_HOST_FILE")
    if launcher.kind == "mpiexec" and launcher.flavour == "mpich" and hydra_file:
        source = f"HYDRA_HOST_FILE={hydra_file}"
        return HostPlan(tuple(read_hostfile(Path(hydra_file), "HYDRA_HOST_FILE")), source)
    if launcher.kind == "srun":
        names = slurm.allocation_hosts() if os.environ.get("SLURM_JOB_ID") else []
        if names:
            return HostPlan(tuple(Host(name) for name in names), f"Slurm allocation {os.environ['SLURM_JOB_ID']}")
        return HostPlan(source="srun (the nodes of its own job)", launcher_nodes=True)
    return plan


@dataclass
class Where:
    """The hosts of a sweep and what they are."""

    plan: HostPlan
    launcher: Launcher
    facts: dict[str, HostFacts] = field(default_factory=dict)

    @classmethod
    def of(cls, suite: Suite, launcher: Launcher) -> Where:
        return cls(host_plan(suite, launcher), launcher)

    def launches(self, suite: Suite) -> list[Launch]:
        return expand(suite, self.plan)

    def probe(self, suite: Suite) -> None:
        """Ask every named host what it is (one rank each, through the launcher); BadInput where
        one does not answer. Nothing to ask on this host alone or of srun's own nodes."""
        names = [host.name for host in self.plan.hosts]
        if not names or self.launcher.kind == "none":
            return
        placement = Placement(len(names), 1, tuple(names))
        env = {**BASE_ENV, **{key: str(value) for key, value in suite.env.items()}}
        argv = self.launcher.command(len(names), env, [], placement, timeout_s=hostfacts.PROBE_TIMEOUT_S,
                                     program=[sys.executable, "-m", "bench.run.hostfacts"])
        self.facts = {host.name: host for host in hostfacts.probe(argv, env, names, PACKAGE_HOME)}

    def room(self, launch: Launch) -> MachineRoom:
        return hostfacts.busiest_machine(launch.where, self.facts)

    def load(self, launch: Launch) -> MachineLoad:
        room = self.room(launch)
        return MachineLoad(room.ranks, room.cores)

    def memory_room(self, launch: Launch) -> tuple[int, tuple[int, str] | None, str]:
        """For the size check: srun's own nodes cannot be seen from here."""
        room = self.room(launch)
        return room.ranks, None if self.plan.launcher_nodes else room.memory, room.name

    def process_room(self, launch: Launch) -> tuple[int, int, str, bool] | None:
        """For the process check: (ranks on the busiest machine, its cores, its name, whether it is this
        host); None for srun's own nodes, which cannot be seen from here (Slurm checks those)."""
        if self.plan.launcher_nodes:
            return None
        room = self.room(launch)
        # busiest_machine takes this host where the placement's hosts were not probed
        here = not launch.where.named or any(name not in self.facts for name in launch.where.names)
        return room.ranks, room.cores, room.name, here

    def record(self) -> dict:
        """meta.json's ``hosts``: where the names came from and each host's facts."""
        facts = [self.facts[host.name] for host in self.plan.hosts if host.name in self.facts]
        if not self.plan.hosts and not self.plan.launcher_nodes:
            facts = [hostfacts.local()]
        return {"source": self.plan.source, "hosts": hostfacts.as_record(facts),
                "machines": len(hostfacts.machines(facts)) if facts else None}
