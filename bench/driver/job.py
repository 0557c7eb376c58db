"""Run one MPI job and follow it: its rows streamed from the part file as rank 0 appends them, its
output kept for the error of cells it never reached, a timeout or an interrupt ending every rank.

Commands are argv lists, never shell strings (bench/driver/launchers/ writes them). The job runs in its
own process group so a timeout or an interrupt ends every rank, not just mpiexec (srun forwards the
SIGTERM to its tasks).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from bench.driver.launchers.base import PACKAGE_HOME


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


def follow_part(path: Path, position: int, on_row: Callable[[dict], None]) -> int:
    """Hand the complete lines of a part file from byte ``position`` on to ``on_row`` as rows; returns
    the position after them (where to go on from when more is appended)."""
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
                position = follow_part(part, position, on_row)
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
            follow_part(part, position, on_row)
            outcome.returncode = process.poll()
            outcome.output_tail = list(tail)
    return outcome
