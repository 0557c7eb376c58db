"""What the MPI benchmarks share: run the script again under mpiexec, with the environment the
sweep launcher gives its jobs (oversubscription aids included), and tell the child it is one."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CHILD = "PCCL_BENCHMARK_CHILD"


def is_child() -> bool:
    return os.environ.get(CHILD) == "1"


def rerun_under_mpiexec(script: str, nranks: int) -> int:
    """``script`` with this process's arguments on ``nranks`` ranks; its exit code."""
    from bench.driver.launchers import MachineLoad, mpi_flavour
    from bench.driver.launchers.mpiexec import Mpiexec, find_mpiexec

    job_env = Mpiexec.for_flavour(mpi_flavour()).job_env(MachineLoad.here(nranks), {})
    env = {**os.environ, **job_env, CHILD: "1", "PYTHONPATH": str(ROOT)}
    argv = [find_mpiexec() or "mpiexec", "-n", str(nranks), sys.executable, script, *sys.argv[1:]]
    return subprocess.run(argv, env=env).returncode
