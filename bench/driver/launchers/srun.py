"""``--launcher srun``: one job step per launch, inside an allocation or as a job of its own; the
nodes are the allocation's, or Slurm's to choose."""

from __future__ import annotations

import math
import os
import shutil
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

from bench.driver import slurm
from bench.driver.launchers import register
from bench.driver.launchers.base import Job, Launcher
from bench.driver.slurm import allocation_time_limit, check_steps
from bench.errors import BadInput
from bench.plan.hosts import Host, HostPlan
from bench.plan.slurm_options import time_minutes

if TYPE_CHECKING:
    from bench.plan.cells import Launch
    from bench.plan.site import Site
    from bench.plan.slurm_options import Slurm

#: srun --mpi=<plugin> for the MPI that mpi4py loads ("other": the site's MpiDefault)
PMI_PLUGIN = {"mpich": "pmi2", "openmpi": "pmix"}

#: srun --time is a backstop behind run_job's own kill: the job's timeout plus this, in minutes
SRUN_TIME_MARGIN_S = 60


def pmi_plugin(flavour: str) -> str | None:
    """srun's --mpi for the loaded MPI; None leaves the site's MpiDefault, which is right for
    Cray MPICH (cray_shasta) and for libraries this does not know."""
    from mpi4py import MPI  # mpi_flavour() has set it up without initialising MPI

    if "CRAY MPICH" in MPI.Get_library_version().upper():
        return None
    return PMI_PLUGIN.get(flavour)


def find_slurm_tool(name: str) -> str:
    """The path of srun/sbatch on PATH, or a one-line error naming what is missing."""
    path = shutil.which(name)
    if path is None:
        raise BadInput("--launcher", f"{name}: not found on PATH (is Slurm installed and loaded here?)")
    return path


def in_slurm_allocation() -> bool:
    """Inside an salloc/sbatch allocation with srun at hand: ``--launcher auto`` picks srun."""
    return bool(os.environ.get("SLURM_JOB_ID")) and shutil.which("srun") is not None


@register
@dataclass(frozen=True)
class Srun(Launcher):
    name: ClassVar[str] = "srun"
    site_section: ClassVar[str] = "srun"

    #: srun --mpi=<pmi> (None: the site's MpiDefault); the suite's srun_args may name another
    pmi: str | None = None
    #: the suite's slurm.srun_args, partition and account
    srun_args: tuple[str, ...] = ()
    partition: str | None = None
    account: str | None = None
    #: the batch job's time limit (slurm.time): no step asks for more
    job_time: str | None = None

    @classmethod
    def make(cls, flavour: str, requested: str, slurm: Slurm | None) -> Launcher:
        fields = slurm_fields(slurm)
        if not fields.get("job_time"):  # inside an allocation: no step asks for more than it has
            fields["job_time"] = allocation_time_limit()
        return cls(flavour, find_slurm_tool("srun"), requested, pmi_plugin(flavour), **fields)

    @classmethod
    def is_here(cls) -> bool:
        return in_slurm_allocation()

    def argv(self, job: Job) -> list[str]:
        nranks, env, placement, timeout_s = job.nranks, job.env, job.placement, job.timeout_s
        # without ranks_per_node srun's own job is Slurm's to spread (as many nodes as the tasks need),
        # not one node asked to hold every rank; the worker measures where they went
        shape = [] if placement.launcher_spreads else [f"--nodes={placement.nhosts}"]
        shape.append(f"--ntasks={nranks}")
        shape += [] if placement.launcher_spreads else [f"--ntasks-per-node={placement.ranks_per_host}"]
        argv = [*_env_prefix(env), self.program or "srun", *shape, "--kill-on-bad-exit=1", _srun_export(env)]
        argv += [f"--nodelist={','.join(placement.names)}"] if placement.named else []
        site = self.site_options(nranks, placement, self.srun_args)
        if self.pmi and not any(arg.startswith("--mpi=") for arg in [*site, *self.srun_args]):
            argv.append(f"--mpi={self.pmi}")
        if timeout_s is not None:
            argv.append(f"--time={step_minutes(timeout_s, self.job_time)}")
        if not os.environ.get("SLURM_JOB_ID"):  # a job of its own: where and on whose account
            argv += [f"--partition={self.partition}"] if self.partition else []
            argv += [f"--account={self.account}"] if self.account else []
        # the site profile's binding, then the suite's own srun_args (which replace a site option by name)
        return argv + site + list(self.srun_args)

    def check_launches(self, label: str, slurm: Slurm, site: Site | None, launches: list[Launch]) -> None:
        """Each step against the site's node, and (srun's own job, outside an allocation) its time."""
        check_steps(label, slurm, site, launches, in_allocation=bool(os.environ.get("SLURM_JOB_ID")))

    def job_hosts(self) -> HostPlan:
        """The allocation's nodes, or (outside one) the nodes srun's own job gets."""
        names = slurm.allocation_hosts() if os.environ.get("SLURM_JOB_ID") else []
        if names:
            return HostPlan(tuple(Host(name) for name in names), f"Slurm allocation {os.environ['SLURM_JOB_ID']}")
        return HostPlan(source="srun (the nodes of its own job)", launcher_nodes=True)


    def hosts_for_some_launches(self) -> HostPlan:
        """Nodes of srun's choosing: a batch job of one node count holds only its own launches' nodes,
        so its cells are planned as every job of the run plans them (the same keys: the last job's
        table holds the rows of all) and the launches of other node counts are not placed here."""
        return HostPlan(source="srun (the nodes of this allocation it chooses)", launcher_nodes=True)


def slurm_fields(slurm: Slurm | None) -> dict:
    """The suite's ``slurm:`` fields a Slurm launcher holds (none without the block)."""
    return {"srun_args": tuple(slurm.srun_args), "partition": slurm.partition,
            "account": slurm.account, "job_time": slurm.time} if slurm else {}


def step_minutes(timeout_s: float, job_time: str | None) -> int:
    """A step's ``--time``: the launch's timeout + a minute, never beyond its job's limit (a
    ``timeout_s: 10800`` step in a 2 h job asks for 120, not 181)."""
    minutes = math.ceil((timeout_s + SRUN_TIME_MARGIN_S) / 60)
    job = time_minutes(job_time) if job_time else None
    return minutes if job is None else max(1, min(minutes, math.floor(job)))


def _srun_export(env: dict[str, str]) -> str:
    """``--export=ALL,KEY=VALUE,...`` for the values without a comma (see ``_env_prefix``)."""
    pairs = [f"{key}={value}" for key, value in env.items() if "," not in value]
    return ",".join(["--export=ALL", *pairs])


def _env_prefix(env: dict[str, str]) -> list[str]:
    """``env KEY=a,b`` before srun: --export cannot escape a comma in a value (UCX_TLS=rc,sm), so
    such variables go into srun's own environment, which ALL passes on; the argv stays exact."""
    pairs = [f"{key}={value}" for key, value in env.items() if "," in value]
    return [shutil.which("env") or "/usr/bin/env", *pairs] if pairs else []
