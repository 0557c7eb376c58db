"""What every launcher is: the argv of one MPI job, the environment its ranks get, where it finds the
job's hosts, and how the sweep drives it. One class per launcher (mpiexec.py, srun.py, sbatch.py,
none.py), registered by name in bench/driver/launchers/__init__.py; nothing outside those classes asks
which launcher it is.
"""

from __future__ import annotations

import shlex
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, ClassVar

from bench.files import PACKAGE_ROOT
from collectives.envsettings import MACHINE_RANKS_VARIABLE, physical_cores
from collectives.version import VERSION_VARIABLE, library_version

if TYPE_CHECKING:
    from bench.driver.installs import Install
    from bench.plan.cells import Launch
    from bench.plan.hosts import HostPlan, Placement
    from bench.plan.site import Site
    from bench.plan.slurm_options import Slurm

#: glibc keeps MPICH's per-call temporary buffers instead of mmap/munmap every call
#: (REFERENCE.md §5: 128 KiB reduce-scatter 300 us -> 70 us).
BASE_ENV = {"MALLOC_MMAP_THRESHOLD_": "33554432", "MALLOC_TRIM_THRESHOLD_": "67108864"}

#: Ranks outnumber cores: a rank spinning in the progress loop holds the core its peer needs until
#: the scheduler tick (4 ms here). usleep(1) after a few empty polls gave 12-34 us small all-reduces
#: on 4 ranks / 2 cores where MPIR_CVAR_ENABLE_HEAVY_YIELD left 4-8 ms (docs/PERFORMANCE.md).
#: Harmful when not oversubscribed, so only then; per MPI library (not per launcher).
OVERSUBSCRIBED_ENV = {
    "mpich": {"MPIR_CVAR_CH4_PROGRESS_THROTTLE": "1", "MPIR_CVAR_CH4_PROGRESS_THROTTLE_NO_PROGRESS_COUNT": "4"},
    "openmpi": {"OMPI_MCA_mpi_yield_when_idle": "1"},
}

#: where the jobs start: ``python -m bench.rank.worker`` then imports the very package this process
#: runs (a pip-installed pccl-bench started inside a source checkout would otherwise import the
#: checkout's bench and its uncompiled cython_ext)
PACKAGE_HOME = str(PACKAGE_ROOT)


@dataclass(frozen=True)
class MachineLoad:
    """The ranks on the busiest machine of a launch and that machine's cores (physical: Open MPI's
    slots, envsettings.physical_cores); None where not known here (srun's own nodes: Slurm sizes
    them, so they are not oversubscribed)."""

    ranks: int | None
    cores: int | None

    @property
    def oversubscribed(self) -> bool:
        return self.ranks is not None and self.cores is not None and self.ranks > self.cores

    @classmethod
    def here(cls, ranks: int) -> MachineLoad:
        return cls(ranks, physical_cores())


def mpi_flavour() -> str:
    """mpich | openmpi | other, from the library mpi4py loads (MPI is not initialised here)."""
    import mpi4py

    mpi4py.rc.initialize = False
    mpi4py.rc.finalize = False
    from mpi4py import MPI

    vendor = MPI.get_vendor()[0]
    if vendor in ("MPICH", "Intel MPI", "MVAPICH", "MVAPICH2"):
        return "mpich"
    if vendor == "Open MPI":
        return "openmpi"
    return "other"


def worker_program(worker_args: list[str]) -> list[str]:
    """The worker of this install on ``worker_args`` (a plan's path)."""
    return [sys.executable, "-m", "bench.rank.worker", *worker_args]


@dataclass(frozen=True)
class Job:
    """One MPI job as a launcher starts it: the one argument of ``Launcher.argv`` and ``command`` (as
    ReFrame's launchers take the job), built once per launch (``Sweep.job_command``; the host probe of
    ``Where.probe``; the pre-flight's probe launch, through ``job_command``)."""

    nranks: int
    #: where the ranks go (hosts, ranks per host; the launcher's own nodes where it spreads them)
    placement: Placement
    #: what every rank gets in its environment (the launcher exports it)
    env: Mapping[str, str]
    #: what each rank runs: the worker on a plan, a probe
    program: tuple[str, ...]
    #: the launch's limit (srun's --time of the step); None: none asked
    timeout_s: float | None = None
    #: more ranks than cores on the busiest machine (Open MPI must be told)
    oversubscribed: bool = False


@dataclass(frozen=True)
class Launcher:
    """A per-job launcher. Subclasses set ``name`` and ``sweep_driver`` and write ``argv``."""

    #: the name ``--launcher`` takes and meta.json records
    name: ClassVar[str] = ""
    #: how a sweep runs with it (bench/sweep/drivers.py DRIVERS): "jobs" (one MPI job per launch, started
    #: here), "batch" (the sweep submitted as batch jobs), "inside" (in the job it was started in)
    sweep_driver: ClassVar[str] = "jobs"
    #: whether the sweep asks each named host what it is before the first launch (one rank each)
    probes_hosts: ClassVar[bool] = True

    flavour: str  # mpich | openmpi | other: the MPI library mpi4py loads
    #: the mpiexec or srun executable
    program: str | None = None
    #: what --launcher asked for (auto resolves to mpiexec or srun)
    requested: str = ""
    #: the suite's site profile: its options for this launcher (``site_section``) go into every argv
    site: Site | None = field(default=None, kw_only=True)
    #: the profile's list of options this launcher takes (Site.srun, Site.mpiexec; "": none)
    site_section: ClassVar[str] = ""

    @property
    def kind(self) -> str:
        return self.name

    @classmethod
    def make(cls, flavour: str, requested: str, slurm: Slurm | None) -> Launcher:
        """The launcher for ``--launcher`` (BadInput where its program is not here)."""
        return cls(flavour, requested=requested)

    @classmethod
    def is_here(cls) -> bool:
        """Whether ``--launcher auto`` takes this one (it runs inside this launcher's job)."""
        return False

    def with_site(self, site: Site | None) -> Launcher:
        """This launcher with a site profile's options for it."""
        return replace(self, site=site)

    def site_options(self, nranks: int, placement: Placement, given: tuple[str, ...] = ()) -> list[str]:
        """The site profile's options for this launcher, filled for one launch (``given``: the suite's
        own options, which win by name)."""
        if self.site is None or not self.site_section:
            return []
        return self.site.launcher_options(self.site_section, placement.nhosts, nranks, placement.ranks_per_host,
                                          given)

    def job_env(self, load: MachineLoad, suite_env: dict) -> dict[str, str]:
        """Environment every rank gets: base settings, oversubscription aids, the suite's own."""
        env = {**BASE_ENV, VERSION_VARIABLE: library_version()}
        if load.ranks is not None:  # else each rank counts its node's ranks itself
            env[MACHINE_RANKS_VARIABLE] = str(load.ranks)
        if load.oversubscribed:
            env.update(OVERSUBSCRIBED_ENV.get(self.flavour, {}))
        env.update({key: str(value) for key, value in suite_env.items()})
        return env

    def command(self, job: Job) -> list[str]:
        """The argv of one job: its program on its ranks, placed as its placement says."""
        return self.argv(job) + list(job.program)

    def argv(self, job: Job) -> list[str]:
        """The launcher's part of a job's argv, before the program."""
        raise NotImplementedError(f"{type(self).__name__} writes no argv")

    def job_hosts(self) -> HostPlan | None:
        """The hosts of the job this process runs in, as this launcher takes them by itself (None:
        none; the suite's own hosts come first)."""
        return None

    def hosts_for_some_launches(self) -> HostPlan | None:
        """The hosts when this process runs only some of a sweep's launches (``--nodes``: each batch job
        of one node count), where the suite names none: by default those of ``job_hosts``."""
        return self.job_hosts()

    def for_install(self, install: Install) -> Launcher:
        """The launcher of a job that runs another install's worker."""
        return self

    def refuses_install(self, install: Install) -> str | None:
        """Why another install's jobs cannot be launched this way (None: they can): by default its
        MPI library must be this one's."""
        if install.flavour != self.flavour:
            return (f"{install.given}: loads {install.mpi_library} ({install.flavour}); this sweep launches its "
                    f"jobs for {self.flavour}")
        return None

    def check_launches(self, label: str, slurm: Slurm, site: Site | None, launches: list[Launch]) -> None:
        """BadInput, before the first launch, where a launch cannot run at the site this way (a
        scheduler's step that its node cannot hold): nothing to check by default."""

    def dry_run_text(self, argv: list[str]) -> str:
        """How ``--dry-run`` shows one launch: quoted as a shell reads it (the line can be pasted, and
        a value cannot start a command)."""
        return shlex.join(argv)
