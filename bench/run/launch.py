"""Start one MPI job per launch and follow it: mpiexec (MPICH or Open MPI), srun, or none.

Commands are argv lists, never shell strings. The job runs in its own process
group so a timeout or an interrupt ends every rank, not just mpiexec (srun
forwards the SIGTERM to its tasks). ``sbatch`` is not a per-job launcher: it
submits the whole sweep as one batch job that uses srun (bench/run/slurm.py).
"""

from __future__ import annotations

import json
import math
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from bench.errors import BadInput
from bench.files import PACKAGE_ROOT
from collectives.envsettings import MACHINE_RANKS_VARIABLE, physical_cores
from collectives.version import VERSION_VARIABLE, library_version

if TYPE_CHECKING:
    from bench.plan.hosts import Placement
    from bench.plan.slurm_options import Slurm

LAUNCHERS = ("auto", "mpiexec", "srun", "sbatch", "none")

#: glibc keeps MPICH's per-call temporary buffers instead of mmap/munmap every call
#: (REFERENCE.md §5: 128 KiB reduce-scatter 300 us -> 70 us).
BASE_ENV = {"MALLOC_MMAP_THRESHOLD_": "33554432", "MALLOC_TRIM_THRESHOLD_": "67108864"}

#: srun --mpi=<plugin> for the MPI that mpi4py loads ("other": the site's MpiDefault)
PMI_PLUGIN = {"mpich": "pmi2", "openmpi": "pmix"}

#: where the jobs start: ``python -m bench.run.worker`` then imports the very package this process
#: runs (a pip-installed pccl-bench started inside a source checkout would otherwise import the
#: checkout's bench and its uncompiled cython_ext)
PACKAGE_HOME = str(PACKAGE_ROOT)

#: srun --time is a backstop behind run_job's own kill: the job's timeout plus this, in minutes
SRUN_TIME_MARGIN_S = 60


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


def pmi_plugin(flavour: str) -> str | None:
    """srun's --mpi for the loaded MPI; None leaves the site's MpiDefault, which is right for
    Cray MPICH (cray_shasta) and for libraries this does not know."""
    from mpi4py import MPI  # mpi_flavour() has set it up without initialising MPI

    if "CRAY MPICH" in MPI.Get_library_version().upper():
        return None
    return PMI_PLUGIN.get(flavour)


def find_mpiexec() -> str | None:
    beside = Path(sys.executable).parent / "mpiexec"
    if beside.exists():
        return str(beside)
    return os.environ.get("MPIEXEC") or shutil.which("mpiexec")


def find_slurm_tool(name: str) -> str:
    """The path of srun/sbatch on PATH, or a one-line error naming what is missing."""
    path = shutil.which(name)
    if path is None:
        raise BadInput("--launcher", f"{name}: not found on PATH (is Slurm installed and loaded here?)")
    return path


def in_slurm_allocation() -> bool:
    """Inside an salloc/sbatch allocation with srun at hand: ``--launcher auto`` picks srun."""
    return bool(os.environ.get("SLURM_JOB_ID")) and shutil.which("srun") is not None


@dataclass(frozen=True)
class Launcher:
    kind: str  # mpiexec | srun | none
    flavour: str  # mpich | openmpi | other
    #: the mpiexec or srun executable
    program: str | None = None
    #: what --launcher asked for (auto resolves to mpiexec or srun)
    requested: str = ""
    #: srun --mpi=<pmi> (None: the site's MpiDefault); the suite's srun_args may name another
    pmi: str | None = None
    #: the suite's slurm.srun_args, partition and account
    srun_args: tuple[str, ...] = ()
    partition: str | None = None
    account: str | None = None

    def job_env(self, load: MachineLoad, suite_env: dict) -> dict[str, str]:
        """Environment every rank gets: base settings, oversubscription aids, the suite's own."""
        env = {**BASE_ENV, VERSION_VARIABLE: library_version()}
        if load.ranks is not None:  # else each rank counts its node's ranks itself
            env[MACHINE_RANKS_VARIABLE] = str(load.ranks)
        if load.oversubscribed:
            # Ranks outnumber cores: a rank spinning in the progress loop holds the core its
            # peer needs until the scheduler tick (4 ms here). usleep(1) after a few empty
            # polls gave 12-34 us small all-reduces on 4 ranks / 2 cores where
            # MPIR_CVAR_ENABLE_HEAVY_YIELD left 4-8 ms (docs/PERFORMANCE.md). Harmful when
            # not oversubscribed, so only here.
            if self.flavour == "mpich":
                env["MPIR_CVAR_CH4_PROGRESS_THROTTLE"] = "1"
                env["MPIR_CVAR_CH4_PROGRESS_THROTTLE_NO_PROGRESS_COUNT"] = "4"
            elif self.flavour == "openmpi":
                env["OMPI_MCA_mpi_yield_when_idle"] = "1"
        env.update({key: str(value) for key, value in suite_env.items()})
        return env

    def command(self, nranks: int, env: dict[str, str], worker_args: list[str], placement: Placement,
                timeout_s: float | None = None, oversubscribed: bool = False,
                program: list[str] | None = None) -> list[str]:
        """The argv of one job: ``program`` (default: the worker on ``worker_args``) on ``nranks``
        ranks placed as ``placement`` says."""
        program = program or [sys.executable, "-m", "bench.run.worker", *worker_args]
        if self.kind == "none":
            return program
        if self.kind == "srun":
            return self._srun_argv(nranks, placement, env, timeout_s) + program
        return self._mpiexec_argv(nranks, env, placement, oversubscribed) + program

    def _mpiexec_argv(self, nranks: int, env: dict[str, str], placement: Placement, oversubscribed: bool) -> list[str]:
        argv = [self.program or "mpiexec"]
        # host:count for every host, in order: block placement without relying on slot counts
        # of a hostfile (hydra places round-robin without them)
        hosts = ",".join(f"{name}:{placement.ranks_per_host}" for name in placement.names)
        if self.flavour == "openmpi":
            if hasattr(os, "geteuid") and os.geteuid() == 0:
                argv.append("--allow-run-as-root")
            if oversubscribed:
                argv.append("--oversubscribe")
            argv += ["--host", hosts] if hosts else []
            for key, value in env.items():
                argv += ["-x", f"{key}={value}"]
        else:
            argv += ["-hosts", hosts] if hosts else []
            for key, value in env.items():
                argv += ["-genv", key, value]
        return argv + ["-n", str(nranks)]

    def _srun_argv(self, nranks: int, placement: Placement, env: dict[str, str], timeout_s: float | None) -> list[str]:
        # without ranks_per_node srun's own job is Slurm's to spread (as many nodes as the tasks need),
        # not one node asked to hold every rank; the worker measures where they went
        shape = [] if placement.launcher_spreads else [f"--nodes={placement.nhosts}"]
        shape.append(f"--ntasks={nranks}")
        shape += [] if placement.launcher_spreads else [f"--ntasks-per-node={placement.ranks_per_host}"]
        argv = [*_env_prefix(env), self.program or "srun", *shape, "--kill-on-bad-exit=1", _srun_export(env)]
        argv += [f"--nodelist={','.join(placement.names)}"] if placement.named else []
        if self.pmi and not any(arg.startswith("--mpi=") for arg in self.srun_args):
            argv.append(f"--mpi={self.pmi}")
        if timeout_s is not None:
            argv.append(f"--time={math.ceil((timeout_s + SRUN_TIME_MARGIN_S) / 60)}")
        if not os.environ.get("SLURM_JOB_ID"):  # a job of its own: where and on whose account
            argv += [f"--partition={self.partition}"] if self.partition else []
            argv += [f"--account={self.account}"] if self.account else []
        return argv + list(self.srun_args)


def _srun_export(env: dict[str, str]) -> str:
    """``--export=ALL,KEY=VALUE,...`` for the values without a comma (see ``_env_prefix``)."""
    pairs = [f"{key}={value}" for key, value in env.items() if "," not in value]
    return ",".join(["--export=ALL", *pairs])


def _env_prefix(env: dict[str, str]) -> list[str]:
    """``env KEY=a,b`` before srun: --export cannot escape a comma in a value (UCX_TLS=rc,sm), so
    such variables go into srun's own environment, which ALL passes on; the argv stays exact."""
    pairs = [f"{key}={value}" for key, value in env.items() if "," in value]
    return [shutil.which("env") or "/usr/bin/env", *pairs] if pairs else []


def choose_launcher(name: str, slurm: Slurm | None = None) -> Launcher:
    """The per-job launcher for ``--launcher NAME`` (sbatch is handled by bench/run/slurm.py)."""
    if name not in LAUNCHERS:
        raise BadInput("--launcher", f"{name!r} is not a launcher; expected one of {LAUNCHERS}")
    flavour = mpi_flavour()
    if name == "none":
        return Launcher("none", flavour, requested=name)
    if name in ("srun", "sbatch") or (name == "auto" and in_slurm_allocation()):
        extra = {"srun_args": tuple(slurm.srun_args), "partition": slurm.partition,
                 "account": slurm.account} if slurm else {}
        return Launcher("srun", flavour, find_slurm_tool("srun"), name, pmi_plugin(flavour), **extra)
    mpiexec = find_mpiexec()
    if mpiexec is None:
        raise BadInput("--launcher", "no mpiexec beside this Python, in $MPIEXEC or on PATH")
    return Launcher("mpiexec", flavour, mpiexec, name)


@dataclass
class JobOutcome:
    returncode: int | None
    timed_out: bool = False
    interrupted: bool = False
    output_tail: list[str] = field(default_factory=list)


def end_job(process: subprocess.Popen, grace_s: float = 5.0) -> None:
    """SIGTERM the job's process group, then SIGKILL what is left."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(process.pid, sig)
        except ProcessLookupError:
            return
        try:
            process.wait(timeout=grace_s)
            return
        except subprocess.TimeoutExpired:
            continue


def _follow(path: Path, position: int, on_row: Callable[[dict], None]) -> int:
    """Hand complete new lines of a part file to ``on_row``; returns the new position."""
    if not path.exists():
        return position
    with path.open() as handle:
        handle.seek(position)
        while True:
            line = handle.readline()
            if not line.endswith("\n"):
                return position
            position += len(line.encode())
            try:
                row = json.loads(line)
            except json.JSONDecodeError:
                continue  # the end of a line cut by an earlier crash (read_parts skips it too)
            on_row(row)


def run_job(argv: list[str], env: dict[str, str], part: Path, log: Path, timeout_s: float,
            on_row: Callable[[dict], None], on_start: Callable[[str], None] = lambda key: None,
            cwd: str = PACKAGE_HOME) -> JobOutcome:
    """Run one MPI job to completion, timeout or interrupt, streaming its rows; ``cwd``: the folder
    whose ``bench`` its workers import (another install's home for an arm of that install)."""
    tail: deque[str] = deque(maxlen=40)
    position = part.stat().st_size if part.exists() else 0
    with log.open("a") as log_file:
        process = subprocess.Popen(
            argv, env={**os.environ, **env}, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL, text=True, start_new_session=True, cwd=cwd,
        )

        def pump() -> None:
            for line in process.stdout:
                log_file.write(line)
                log_file.flush()
                if line.startswith('{"event": "start"'):
                    on_start(json.loads(line)["cell_key"])
                else:
                    tail.append(line.rstrip("\n"))

        reader = threading.Thread(target=pump, daemon=True)
        reader.start()
        deadline = time.monotonic() + timeout_s
        outcome = JobOutcome(None)
        try:
            while process.poll() is None:
                position = _follow(part, position, on_row)
                if time.monotonic() > deadline:
                    outcome.timed_out = True
                    end_job(process)
                    break
                time.sleep(0.05)
        except BaseException:
            outcome.interrupted = True
            end_job(process)
            raise
        finally:
            reader.join(timeout=5)
            _follow(part, position, on_row)
            outcome.returncode = process.poll()
            outcome.output_tail = list(tail)
    return outcome
