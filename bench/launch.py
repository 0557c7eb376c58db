"""Start one MPI job per launch and follow it: mpiexec (MPICH or Open MPI) or none.

Commands are argv lists, never shell strings. The job runs in its own process
group so a timeout or an interrupt ends every rank, not just mpiexec.
"""

from __future__ import annotations

import json
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

from bench.errors import BadInput

LAUNCHERS = ("auto", "mpiexec", "none")

#: glibc keeps MPICH's per-call temporary buffers instead of mmap/munmap every call
#: (REFERENCE.md §5: 128 KiB reduce-scatter 300 us -> 70 us).
BASE_ENV = {"MALLOC_MMAP_THRESHOLD_": "33554432", "MALLOC_TRIM_THRESHOLD_": "67108864"}


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


def find_mpiexec() -> str | None:
    beside = Path(sys.executable).parent / "mpiexec"
    if beside.exists():
        return str(beside)
    return os.environ.get("MPIEXEC") or shutil.which("mpiexec")


@dataclass(frozen=True)
class Launcher:
    kind: str  # mpiexec | none
    flavour: str  # mpich | openmpi | other
    mpiexec: str | None = None

    def job_env(self, nranks: int, suite_env: dict) -> dict[str, str]:
        """Environment every rank gets: base settings, oversubscription aids, the suite's own."""
        env = dict(BASE_ENV)
        if nranks > (os.cpu_count() or 1):
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

    def command(self, nranks: int, env: dict[str, str], worker_args: list[str]) -> list[str]:
        program = [sys.executable, "-m", "bench.worker", *worker_args]
        if self.kind == "none":
            return program
        argv = [self.mpiexec or "mpiexec"]
        if self.flavour == "openmpi":
            if hasattr(os, "geteuid") and os.geteuid() == 0:
                argv.append("--allow-run-as-root")
            if nranks > (os.cpu_count() or 1):
                argv.append("--oversubscribe")
            for key, value in env.items():
                argv += ["-x", f"{key}={value}"]
        else:
            for key, value in env.items():
                argv += ["-genv", key, value]
        return argv + ["-n", str(nranks), *program]


def choose_launcher(name: str) -> Launcher:
    if name not in LAUNCHERS:
        raise BadInput("--launcher", f"{name!r} is not a launcher; expected one of {LAUNCHERS}")
    flavour = mpi_flavour()
    if name == "none":
        return Launcher("none", flavour)
    mpiexec = find_mpiexec()
    if mpiexec is None:
        raise BadInput("--launcher", "no mpiexec beside this Python, in $MPIEXEC or on PATH")
    return Launcher("mpiexec", flavour, mpiexec)


@dataclass
class JobOutcome:
    returncode: int | None
    timed_out: bool = False
    interrupted: bool = False
    output_tail: list[str] = field(default_factory=list)


def _end_job(process: subprocess.Popen, grace_s: float = 5.0) -> None:
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
            on_row: Callable[[dict], None], on_start: Callable[[str], None] = lambda key: None) -> JobOutcome:
    """Run one MPI job to completion, timeout or interrupt, streaming its rows."""
    tail: deque[str] = deque(maxlen=40)
    position = part.stat().st_size if part.exists() else 0
    with log.open("a") as log_file:
        process = subprocess.Popen(
            argv, env={**os.environ, **env}, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL, text=True, start_new_session=True,
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
                    _end_job(process)
                    break
                time.sleep(0.05)
        except BaseException:
            outcome.interrupted = True
            _end_job(process)
            raise
        finally:
            reader.join(timeout=5)
            _follow(part, position, on_row)
            outcome.returncode = process.poll()
            outcome.output_tail = list(tail)
    return outcome
