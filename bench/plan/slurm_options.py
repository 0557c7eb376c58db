"""The suite's ``slurm:`` section: how ``--launcher srun|sbatch`` ask Slurm for the jobs.

An option the launcher derives from the suite (nodes, tasks, time, the environment) may not be set
again in ``srun_args``/``sbatch_args``: the error names the suite field that sets it.
"""

from __future__ import annotations

import re
from typing import Annotated, Any

from pydantic import AfterValidator, BeforeValidator, Field

from bench.plan.schema import Strict

#: srun options the launcher derives from the suite; srun_args may not set them
SRUN_OWNED = {
    "-N": "ranks/ranks_per_node", "--nodes": "ranks/ranks_per_node", "-n": "ranks", "--ntasks": "ranks",
    "--ntasks-per-node": "ranks_per_node", "--export": "env", "-t": "timeout_s", "--time": "timeout_s",
    # a job of srun's own takes them from the suite or the flags (a later copy would silently win)
    "-p": "slurm.partition", "--partition": "slurm.partition", "-A": "slurm.account", "--account": "slurm.account",
}
#: sbatch options the batch job takes from the suite, the run folder or the command line
SBATCH_OWNED = {
    **{name: "ranks/ranks_per_node" for name in ("-N", "--nodes", "-n", "--ntasks", "--ntasks-per-node")},
    "-t": "slurm.time", "--time": "slurm.time", "-p": "slurm.partition", "--partition": "slurm.partition",
    "-A": "slurm.account", "--account": "slurm.account", "-o": "the run folder", "--output": "the run folder",
    "-D": "the working directory", "--chdir": "the working directory", "--export": "env",
    "-W": "--wait", "--wait": "--wait", "--parsable": "the launcher",
}
#: Slurm's time formats: minutes, minutes:seconds, hours:minutes:seconds, days-hours[:minutes[:seconds]]
SLURM_TIME = re.compile(r"^(\d+(:\d\d){0,2}|\d+-\d+(:\d\d){0,2}|UNLIMITED|INFINITE)$")


def _option(value: str, tool: str) -> str:
    if not value.startswith("-") or any(char.isspace() for char in value.split("=", 1)[0]) or "\n" in value:
        raise ValueError(f"{value!r} is not an {tool} option; write each as --name=value, one per list item")
    return value


def option_name(option: str) -> str:
    """``--cpu-bind`` of ``--cpu-bind=cores``, ``-c`` of ``-c7``: what a later option of the same name replaces."""
    return option.split("=", 1)[0] if option.startswith("--") else option[:2]


def _not_owned(value: str, owned: dict[str, str]) -> str:
    name = option_name(value)
    if name in owned:
        raise ValueError(f"{value!r}: the launcher sets {name} from {owned[name]}")
    return value


def srun_option(value: str) -> str:
    """An srun option of the suite or a site profile: --name=value, not one the launcher sets."""
    return _not_owned(_option(value, "srun"), SRUN_OWNED)


def sbatch_option(value: str) -> str:
    """An sbatch option of the suite or a site profile: --name=value, not one the batch job sets."""
    return _not_owned(_option(value, "sbatch"), SBATCH_OWNED)


def _slurm_time(value: Any) -> Any:
    if isinstance(value, int) and not isinstance(value, bool):
        value = str(value)
    if isinstance(value, str) and not SLURM_TIME.match(value):
        raise ValueError(f"{value!r} is not a Slurm time: minutes, minutes:seconds, hours:minutes:seconds "
                         "or days-hours[:minutes[:seconds]]")
    return value


def time_minutes(value: str) -> float | None:
    """A Slurm time in minutes (None: UNLIMITED/INFINITE): ``30``, ``30:15``, ``2:00:00``, ``1-12``,
    ``1-12:30``, ``1-12:30:00``."""
    if value in ("UNLIMITED", "INFINITE"):
        return None
    days, _, rest = value.rpartition("-")
    parts = [int(part) for part in rest.split(":")]
    if days:  # days-hours[:minutes[:seconds]]
        hours, minutes, seconds = (parts + [0, 0])[:3]
        return int(days) * 1440 + hours * 60 + minutes + seconds / 60
    if len(parts) == 3:
        return parts[0] * 60 + parts[1] + parts[2] / 60
    return parts[0] + (parts[1] / 60 if len(parts) == 2 else 0)


def cpus_per_task(options: list[str]) -> tuple[int, str] | None:
    """The last ``--cpus-per-task=N`` (or ``-cN``, ``-c=N``) of srun options: N and the option as given."""
    found = None
    for option in options:
        name = option_name(option)
        if name not in ("--cpus-per-task", "-c"):
            continue
        value = option.split("=", 1)[1] if "=" in option else option[2:]
        if value.isdigit():
            found = (int(value), option)
    return found


SLURM_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._,-]*$")


def _slurm_name(value: str) -> str:
    if not SLURM_NAME.match(value):
        raise ValueError(f"{value!r} is not a Slurm partition or account name: letters, digits and . _ , - "
                         "(no spaces), starting with a letter or digit")
    return value


SlurmName = Annotated[str, AfterValidator(_slurm_name), Field(max_length=128)]


class Slurm(Strict):
    """How ``--launcher srun|sbatch`` ask Slurm for the jobs (ignored by mpiexec and none)."""

    #: extra srun options for every launch, one per item: [--cpu-bind=cores, --gpus-per-task=1]
    srun_args: list[Annotated[str, AfterValidator(srun_option)]] = Field(default_factory=list)
    #: extra sbatch options for the batch job of ``--launcher sbatch``: [--exclusive, --qos=debug]
    sbatch_args: list[Annotated[str, AfterValidator(sbatch_option)]] = Field(default_factory=list)
    partition: SlurmName | None = None
    account: SlurmName | None = None
    #: the batch job's time limit (sbatch --time): minutes, or [days-]hours:minutes:seconds
    time: Annotated[str | None, BeforeValidator(_slurm_time)] = None
