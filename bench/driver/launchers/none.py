"""``--launcher none``: the sweep runs in the processes of a job the user started (``mpiexec -n 4
pccl-bench run sweep S --launcher none``, ``srun -N 2 pccl-bench ...``): no argv of its own, no host to
ask; bench/sweep/inside.py drives it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from bench.driver.launchers import register
from bench.driver.launchers.base import Job, Launcher


@register
@dataclass(frozen=True)
class InJob(Launcher):
    name: ClassVar[str] = "none"
    sweep_driver: ClassVar[str] = "inside"
    probes_hosts: ClassVar[bool] = False

    def argv(self, job: Job) -> list[str]:
        return []
