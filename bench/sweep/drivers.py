"""``run sweep``: the driver its launcher asks for (``sweep_driver``) runs the sweep: jobs.py starts
one MPI job per launch (mpiexec, srun), batch.py submits the sweep as batch jobs (sbatch),
inside.py runs it in the job it was started in (none)."""

from __future__ import annotations

from rich.console import Console

from bench.driver.launchers import launcher_class
from bench.errors import BadInput
from bench.sweep import batch, inside, jobs
from bench.sweep.options import SweepOptions

#: each driver's ``run`` and ``dry_run``, by the name a launcher class gives as its ``sweep_driver``
DRIVERS = {"jobs": jobs, "batch": batch, "inside": inside}


def run_sweep(options: SweepOptions, out: Console) -> int:
    driver = DRIVERS[launcher_class(options.launcher).sweep_driver]
    if options.wait and driver is not batch:
        raise BadInput("--wait", f"waits for a batch job: it goes with --launcher sbatch, not {options.launcher}")
    if options.nodes and driver is not jobs:
        raise BadInput("--nodes", f"runs some launches of a sweep that starts one job per launch (mpiexec, srun), "
                                  f"not with --launcher {options.launcher}")
    return driver.dry_run(options, out) if options.dry_run else driver.run(options, out)
