"""Launchers by name: one class per file, registered here with one line each.

A launcher says how one MPI job of a launch starts (its argv and environment), where the job's
hosts come from, and how the sweep drives it (``sweep_driver``). Adding one (PBS's mpiexec, Flux)
is a module with its class and ``@register``, and its import line below (docs/ARCHITECTURE.md).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from bench.driver.launchers.base import (
    BASE_ENV,
    PACKAGE_HOME,
    Job,
    Launcher,
    MachineLoad,
    mpi_flavour,
    worker_program,
)
from bench.errors import BadInput

if TYPE_CHECKING:
    from bench.plan.slurm_options import Slurm

#: every launcher by the name ``--launcher`` takes, in the order ``--launcher auto`` asks them
LAUNCHERS: dict[str, type[Launcher]] = {}
#: what ``--launcher auto`` takes when no launcher says it runs here
AUTO_DEFAULT = "mpiexec"


def register(cls: type[Launcher]) -> type[Launcher]:
    if not cls.name or cls.name in LAUNCHERS or cls.name == "auto":
        raise ValueError(f"launcher {cls.__name__}: name {cls.name!r} is empty, taken or reserved")
    LAUNCHERS[cls.name] = cls
    return cls


def launcher_names() -> tuple[str, ...]:
    return ("auto", *LAUNCHERS)


def launcher_class(name: str) -> type[Launcher]:
    """The class of ``--launcher NAME``: ``auto`` takes the first that runs here (srun inside an
    allocation), else mpiexec."""
    if name not in launcher_names():
        raise BadInput("--launcher", f"{name!r} is not a launcher; expected one of {launcher_names()}")
    if name == "auto":
        return next((cls for cls in LAUNCHERS.values() if cls.is_here()), LAUNCHERS[AUTO_DEFAULT])
    return LAUNCHERS[name]


def choose_launcher(name: str, slurm: Slurm | None = None) -> Launcher:
    """The launcher for ``--launcher NAME`` (BadInput where its program is not here)."""
    return launcher_class(name).make(mpi_flavour(), name, slurm)


# The launchers, one line each (each module registers its class).
from bench.driver.launchers import mpiexec, srun, sbatch, none  # noqa: E402,F401,I001

__all__ = ["BASE_ENV", "LAUNCHERS", "PACKAGE_HOME", "Job", "Launcher", "MachineLoad", "choose_launcher",
           "launcher_class", "launcher_names", "mpi_flavour", "register", "worker_program"]
