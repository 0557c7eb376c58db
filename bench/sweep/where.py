"""Where a sweep's launches run: the hosts (named by the suite or a flag, else taken from the job the
sweep runs in: the launcher's own hostfile variable, the PBS or LSF job's host list, the Slurm
allocation), what each host is (probed once, before the first launch), and per launch its
machines: the busiest one's cores decide the oversubscription settings, each one's memory the
size check."""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass, field, replace
from pathlib import Path

from bench.errors import BadInput
from bench.plan.cells import Launch, expand
from bench.plan.hosts import (
    Host,
    HostPlan,
    Placement,
    parse_host_counts,
    read_hostfile,
    read_slot_file,
    suite_host_plan,
)
from bench.plan.suite import Suite
from bench.run import hostfacts, slurm
from bench.run.hostfacts import HostFacts, MachineRoom
from bench.run.installs import Install
from bench.run.launch import BASE_ENV, PACKAGE_HOME, Launcher, MachineLoad

#: the hostfile a launcher reads by itself when set, per MPI flavour: MPICH's hydra; Open MPI 4 (orte)
#: and 5 (prte)
LAUNCHER_HOSTFILES = {"mpich": ("HYDRA_HOST_FILE",),
                      "openmpi": ("OMPI_MCA_orte_default_hostfile", "PRTE_MCA_prte_default_hostfile")}
#: batch systems' host lists of one line per slot (the job's first host, where the script runs, too)
SLOT_FILES = ("PBS_NODEFILE", "LSB_DJOB_HOSTFILE")


def job_host_plan(launcher: Launcher) -> HostPlan | None:
    """The hosts a site's mpiexec takes by itself: its flavour's hostfile variable, else the PBS/Torque
    or LSF job's host list (``LSB_MCPU_HOSTS`` where LSF wrote no file); None outside such a job.

    The names are still passed to mpiexec for every launch (``-hosts h1:64,...``, Open MPI ``--host``):
    left to itself each launcher fills the first host's slots before the next (hydra's blocks of a
    host's count, Open MPI's map-by-slot, either one inside PBS or LSF), so a launch of fewer ranks
    than the job holds would not be where the plan (and the launch id) put it: the same hosts in equal
    blocks. Inside its allocation every launcher takes a subset named this way."""
    for name in LAUNCHER_HOSTFILES.get(launcher.flavour, ()):
        value = os.environ.get(name)
        if value:
            return HostPlan(tuple(read_hostfile(Path(value), name)), f"{name}={value}")
    for name in SLOT_FILES:
        value = os.environ.get(name)
        if value:
            return HostPlan(tuple(read_slot_file(Path(value), name)), f"{name}={value}")
    counts = os.environ.get("LSB_MCPU_HOSTS")
    if counts:
        hosts = tuple(parse_host_counts(counts, "LSB_MCPU_HOSTS"))
        return HostPlan(hosts, f"LSB_MCPU_HOSTS ({len(hosts)} hosts)")
    return None


def host_plan(suite: Suite, launcher: Launcher) -> HostPlan:
    """The hosts of the suite (or --hosts/--hostfile); else those of the job mpiexec runs in
    (job_host_plan) or the Slurm allocation srun runs in; else this host (mpiexec) or the nodes
    of srun's own job."""
    plan = suite_host_plan(suite)
    if plan.hosts:
        return plan
    if launcher.kind == "mpiexec":
        return job_host_plan(launcher) or plan
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
    #: the other installs the suite's arms name, by the path as given (bench/run/installs.py)
    installs: dict[str, Install] = field(default_factory=dict)

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

    def add_install(self, install: Install, where: str) -> None:
        """Take another install an arm names (BadInput where its jobs cannot be launched the way this
        sweep launches: with mpiexec they start with the one beside its Python, else with this one)."""
        own_launcher = self.launcher.kind == "mpiexec" and install.mpiexec
        if not own_launcher and install.flavour != self.launcher.flavour:
            raise BadInput(where, f"{install.given}: loads {install.mpi_library} ({install.flavour}); this sweep "
                                  f"launches its jobs for {self.launcher.flavour}")
        self.installs[install.given] = install

    def job(self, launch: Launch) -> tuple[Launcher, Install | None]:
        """The launcher of a launch's job and the install whose worker it runs (None: this one);
        with mpiexec another install's jobs start with the mpiexec beside its Python."""
        install = self.installs.get(launch.install) if launch.install else None
        if install is not None and self.launcher.kind == "mpiexec" and install.mpiexec:
            return replace(self.launcher, program=install.mpiexec), install
        return self.launcher, install

    def room(self, launch: Launch) -> MachineRoom:
        """The launch's machine with the most ranks a core (each host holds its share of the ranks)."""
        return hostfacts.busiest_machine(launch.where, self.facts)

    def load(self, launch: Launch) -> MachineLoad:
        if self.plan.launcher_nodes:
            # srun's own nodes cannot be seen from here, and need not be: Slurm gives every task a CPU
            # of its own (short of --overcommit), so they are never oversubscribed. Where Slurm also
            # chooses how many ranks a node gets, the ranks count themselves (their node communicator).
            spread = launch.where
            return MachineLoad(None if spread.launcher_spreads else spread.ranks_per_host, None)
        room = self.room(launch)
        return MachineLoad(room.ranks, room.cores)

    def memory_room(self, launch: Launch) -> tuple[int, tuple[int, str] | None, str]:
        """For the size check: the machine with the least memory a rank (srun's own nodes cannot be
        seen from here: no figure)."""
        room = hostfacts.tightest_memory(launch.where, self.facts)
        return room.ranks, None if self.plan.launcher_nodes else room.memory, room.name

    def process_room(self, launch: Launch) -> tuple[int, int, str, bool] | None:
        """For the process check: (ranks on the busiest machine, its cores, its name, whether its process
        limits are this host's); None for srun's own nodes, which cannot be seen from here (Slurm checks those)."""
        if self.plan.launcher_nodes:
            return None
        room = self.room(launch)
        return room.ranks, room.cores, room.name, room.here

    def record(self) -> dict:
        """meta.json's ``hosts``: where the names came from and each host's facts."""
        facts = [self.facts[host.name] for host in self.plan.hosts if host.name in self.facts]
        if not self.plan.hosts and not self.plan.launcher_nodes:
            facts = [hostfacts.local()]
        return {"source": self.plan.source, "hosts": hostfacts.as_record(facts),
                "machines": len(hostfacts.machines(facts)) if facts else None}
