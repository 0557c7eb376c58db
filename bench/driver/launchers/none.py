"""``--launcher none``: the sweep runs in the processes of a job the user started (``mpiexec -n 4
pccl-bench run sweep S --launcher none``, ``srun -N 2 pccl-bench ...``): no argv of its own, no host to
ask; bench/sweep/inside.py drives it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

from bench.driver.launchers import register
from bench.driver.launchers.base import Launcher

if TYPE_CHECKING:
    from bench.plan.hosts import Placement


@register
@dataclass(frozen=True)
class InJob(Launcher):
    name: ClassVar[str] = "none"
    sweep_driver: ClassVar[str] = "inside"
    probes_hosts: ClassVar[bool] = False

    def argv(self, nranks: int, env: dict[str, str], placement: Placement, timeout_s: float | None,
             oversubscribed: bool) -> list[str]:
        return []
