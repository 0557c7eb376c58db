"""``--launcher sbatch``: the sweep submitted as batch jobs (bench/driver/slurm.py writes their scripts),
which run it with srun inside; planned here on whole nodes as srun takes them."""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

from bench.driver.launchers import register
from bench.driver.launchers.srun import Srun, slurm_fields
from bench.plan.hosts import HostPlan

if TYPE_CHECKING:
    from bench.driver.launchers.base import Launcher
    from bench.plan.cells import Launch
    from bench.plan.site import Site
    from bench.plan.slurm_options import Slurm


@register
@dataclass(frozen=True)
class Sbatch(Srun):
    name: ClassVar[str] = "sbatch"
    sweep_driver: ClassVar[str] = "batch"
    probes_hosts: ClassVar[bool] = False

    @classmethod
    def make(cls, flavour: str, requested: str, slurm: Slurm | None) -> Launcher:
        # the batch job runs the sweep with srun; here only sbatch must exist (its driver looks for it)
        return cls(flavour, shutil.which("srun"), requested, **slurm_fields(slurm))

    def check_launches(self, label: str, slurm: Slurm, site: Site | None, launches: list[Launch]) -> None:
        """Nothing here: the batch driver checks each job whole before it is written (slurm.check_job),
        and each job's own sweep checks its steps under srun inside the allocation."""

    def job_hosts(self) -> HostPlan:
        """The allocation asked for: the suite's hosts by name (taken before this), else whole nodes as
        srun takes them."""
        return HostPlan(source="sbatch", launcher_nodes=True)
