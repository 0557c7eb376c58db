"""``--launcher mpiexec``: one ``mpiexec`` per launch, MPICH's (hydra) or Open MPI's argv by the MPI
library mpi4py loads; the hosts of a PBS, LSF or hostfile job taken from its variables."""

from __future__ import annotations

import os
import shutil
import sys
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, ClassVar

from bench.driver.launchers import register
from bench.driver.launchers.base import Job, Launcher
from bench.errors import BadInput
from bench.plan.hosts import HostPlan, parse_host_counts, read_hostfile, read_slot_file

if TYPE_CHECKING:
    from bench.driver.installs import Install
    from bench.plan.hosts import Placement
    from bench.plan.slurm_options import Slurm

#: batch systems' host lists of one line per slot (the job's first host, where the script runs, too)
SLOT_FILES = ("PBS_NODEFILE", "LSB_DJOB_HOSTFILE")


def find_mpiexec() -> str | None:
    beside = Path(sys.executable).parent / "mpiexec"
    if beside.exists():
        return str(beside)
    return os.environ.get("MPIEXEC") or shutil.which("mpiexec")


@register
@dataclass(frozen=True)
class Mpiexec(Launcher):
    """mpiexec of a library this does not know: MPICH's argv, the common denominator."""

    name: ClassVar[str] = "mpiexec"
    site_section: ClassVar[str] = "mpiexec"
    #: the hostfile this mpiexec reads by itself when the variable is set
    hostfile_variables: ClassVar[tuple[str, ...]] = ()

    @classmethod
    def make(cls, flavour: str, requested: str, slurm: Slurm | None) -> Launcher:
        mpiexec = find_mpiexec()
        if mpiexec is None:
            raise BadInput("--launcher", "no mpiexec beside this Python, in $MPIEXEC or on PATH")
        return cls.for_flavour(flavour, mpiexec, requested)

    @staticmethod
    def for_flavour(flavour: str, program: str | None = None, requested: str = "") -> Mpiexec:
        """The mpiexec of the MPI library ``flavour`` (its argv and hostfile variables)."""
        variant = {"mpich": HydraMpiexec, "openmpi": OpenMpiMpiexec}.get(flavour, Mpiexec)
        return variant(flavour, program, requested)

    @staticmethod
    def host_list(placement: Placement) -> str:
        # host:count for every host, in order: block placement without relying on slot counts
        # of a hostfile (hydra places round-robin without them)
        return ",".join(f"{name}:{placement.ranks_per_host}" for name in placement.names)

    def argv(self, job: Job) -> list[str]:
        hosts = self.host_list(job.placement)
        argv = [self.program or "mpiexec", *(["-hosts", hosts] if hosts else [])]
        for key, value in job.env.items():
            argv += ["-genv", key, value]
        return argv + self.site_options(job.nranks, job.placement) + ["-n", str(job.nranks)]

    def job_hosts(self) -> HostPlan | None:
        """The hosts a site's mpiexec takes by itself: its hostfile variable, else the PBS/Torque or
        LSF job's host list (``LSB_MCPU_HOSTS`` where LSF wrote no file); None outside such a job.

        The names are still passed to mpiexec for every launch (``-hosts h1:64,...``, Open MPI
        ``--host``): left to itself each launcher fills the first host's slots before the next
        (hydra's blocks of a host's count, Open MPI's map-by-slot, either one inside PBS or LSF), so
        a launch of fewer ranks than the job holds would not be where the plan (and the launch id)
        put it: the same hosts in equal blocks. Inside its allocation every launcher takes a subset
        named this way."""
        for name in self.hostfile_variables:
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

    def for_install(self, install: Install) -> Launcher:
        """Another install's jobs start with the mpiexec beside its Python (its own MPI library)."""
        return replace(self, program=install.mpiexec) if install.mpiexec else self

    def refuses_install(self, install: Install) -> str | None:
        return None if install.mpiexec else super().refuses_install(install)


@dataclass(frozen=True)
class HydraMpiexec(Mpiexec):
    """MPICH's mpiexec (hydra): ``-hosts``, ``-genv``."""

    hostfile_variables: ClassVar[tuple[str, ...]] = ("HYDRA_HOST_FILE",)


@dataclass(frozen=True)
class OpenMpiMpiexec(Mpiexec):
    """Open MPI's mpiexec (prte in Open MPI 5, orte in 4): ``--host``, ``-x``; root and more ranks than
    slots need saying so."""

    hostfile_variables: ClassVar[tuple[str, ...]] = ("OMPI_MCA_orte_default_hostfile",
                                                     "PRTE_MCA_prte_default_hostfile")

    def argv(self, job: Job) -> list[str]:
        argv = [self.program or "mpiexec"]
        if hasattr(os, "geteuid") and os.geteuid() == 0:
            argv.append("--allow-run-as-root")
        if job.oversubscribed:
            argv.append("--oversubscribe")
        hosts = self.host_list(job.placement)
        argv += ["--host", hosts] if hosts else []
        for key, value in job.env.items():
            argv += ["-x", f"{key}={value}"]
        return argv + self.site_options(job.nranks, job.placement) + ["-n", str(job.nranks)]
