"""Where a sweep's launches run: the hosts (named by the suite or a flag, else taken from the job the
sweep runs in: the launcher's own hostfile variable, the PBS or LSF job's host list, the Slurm
allocation), what each host is (probed once, before the first launch), and per launch its
machines: the busiest one's cores decide the oversubscription settings, each one's memory the
size check."""

from __future__ import annotations

import sys
from dataclasses import dataclass, field

from bench.driver.installs import Install
from bench.driver.launchers import BASE_ENV, PACKAGE_HOME, Job, Launcher, MachineLoad
from bench.errors import BadInput
from bench.plan.cells import Launch, expand
from bench.plan.hosts import HostPlan, Placement, suite_host_plan
from bench.plan.site import Site, load_site
from bench.plan.suite import Suite
from bench.rank import hostfacts
from bench.rank.hostfacts import HostFacts, MachineRoom


def host_plan(suite: Suite, launcher: Launcher, some_launches: bool = False) -> HostPlan:
    """The hosts of the suite (or --hosts/--hostfile); else those of the job the launcher runs in (a
    PBS, LSF or hostfile job's for mpiexec, the Slurm allocation's for srun), or the nodes of srun's
    own job; else this host. ``some_launches``: this process runs only some of the sweep's launches
    (--nodes), which the launcher may plan otherwise (srun: on nodes of its choosing)."""
    plan = suite_host_plan(suite)
    if plan.hosts:
        return plan
    return (launcher.hosts_for_some_launches() if some_launches else launcher.job_hosts()) or plan


@dataclass
class Where:
    """The hosts of a sweep and what they are."""

    plan: HostPlan
    launcher: Launcher
    facts: dict[str, HostFacts] = field(default_factory=dict)
    #: the other installs the suite's arms name, by the path as given (bench/driver/installs.py)
    installs: dict[str, Install] = field(default_factory=dict)
    #: the suite's site profile (its launcher options are the launcher's already)
    site: Site | None = None

    @classmethod
    def of(cls, suite: Suite, launcher: Launcher, label: str = "suite", some_launches: bool = False) -> Where:
        """The hosts of ``suite`` and its launcher, with the suite's site profile (read here: a bad
        one is bad input naming the profile's file). ``some_launches``: see ``host_plan``."""
        site = load_site(suite.site, f"{label}: site").for_device(suite.device) if suite.site else None
        launcher = launcher.with_site(site) if site else launcher
        return cls(host_plan(suite, launcher, some_launches), launcher, site=site)

    def launches(self, suite: Suite) -> list[Launch]:
        """The suite's launches on these hosts; where the site keeps the NCCL/RCCL environment apart,
        a launch of both kinds of cells is two (bench/plan/site.py)."""
        launches = expand(suite, self.plan)
        return self.site.split(launches) if self.site else launches

    def site_env(self, launch: Launch) -> dict[str, str]:
        """The site's variables for one launch (none without a site)."""
        return self.site.launch_env(launch) if self.site else {}

    def probe(self, suite: Suite) -> None:
        """Ask every named host what it is (one rank each, through the launcher); BadInput where
        one does not answer. Nothing to ask on this host alone or of srun's own nodes."""
        names = [host.name for host in self.plan.hosts]
        if not names or not self.launcher.probes_hosts:
            return
        placement = Placement(len(names), 1, tuple(names))
        env = {**BASE_ENV, **{key: str(value) for key, value in suite.env.items()}}
        argv = self.launcher.command(Job(len(names), placement, env, (sys.executable, "-m", "bench.rank.hostfacts"),
                                         timeout_s=hostfacts.PROBE_TIMEOUT_S))
        self.facts = {host.name: host for host in hostfacts.probe(argv, env, names, PACKAGE_HOME)}

    def add_install(self, install: Install, where: str) -> None:
        """Take another install an arm names (BadInput where its jobs cannot be launched the way this
        sweep launches: with mpiexec they start with the one beside its Python, else with this one)."""
        refused = self.launcher.refuses_install(install)
        if refused:
            raise BadInput(where, refused)
        self.installs[install.given] = install

    def job(self, launch: Launch) -> tuple[Launcher, Install | None]:
        """The launcher of a launch's job and the install whose worker it runs (None: this one);
        with mpiexec another install's jobs start with the mpiexec beside its Python."""
        install = self.installs.get(launch.install) if launch.install else None
        return (self.launcher if install is None else self.launcher.for_install(install)), install

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
