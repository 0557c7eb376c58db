"""One sweep per run folder (a real second invocation while the first runs), and sizes that do
not fit this host's memory refused before anything is written."""

from __future__ import annotations

import fcntl
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from conftest import ROOT, TINY_SUITE, describe, run_cli, sigint_default, subprocess_env

from bench.driver import memory_check as memory
from bench.driver.runlock import LOCK_FILE, RunLock
from bench.errors import BadInput
from bench.plan.cells import expand
from bench.plan.suite import parse_suite

#: a sweep that runs for a minute and a half unless stopped: a 2 s budget for each of many cells (short, so that
#: the first row comes soon and an interrupt ends the cell in progress soon). It must outlast the two
#: refused CLI runs that follow its first row: 15 cells (30 s) left about 20 s to spare when quiet, which
#: a load burst that slows both CLI starts 3x would use up; 45 cells cost nothing more (it is interrupted)
SLOW_SUITE = {**TINY_SUITE, "collectives": ["allreduce", "allgather", "reduce_scatter"], "implementations": ["mpi"],
              "sizes": {"min": "8B", "max": "128KiB"},
              "timing": {"warmup": 1, "iters": 10_000_000, "min_iters": 1, "budget_s": 2}}


def _held(path: Path) -> bool:
    """Whether some other process holds the flock on ``path``."""
    fd = os.open(path, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)
    return False


def _start_sweep(suite: Path, out: Path) -> subprocess.Popen:
    # Output to files, not pipes: nobody reads a pipe until the end, and a sweep whose progress bar
    # fills one blocks on it (and answers its interrupt only when the pipe is drained).
    logs = suite.parent
    with open(logs / "first.out", "w") as stdout, open(logs / "first.err", "w") as stderr:
        process = subprocess.Popen([sys.executable, "-m", "bench", "run", "sweep", str(suite), "--out", str(out)],
                                   cwd=ROOT, env=subprocess_env(1), stdin=subprocess.DEVNULL, stdout=stdout,
                                   stderr=stderr, text=True, start_new_session=True, preexec_fn=sigint_default)
    process.logs = logs
    return process


def _wait_until_running(first: subprocess.Popen, out: Path, timeout_s: float = 60) -> None:
    """Until the first sweep holds the lock and has written a row (it is timing cells)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        assert first.poll() is None, f"the first sweep ended early: {(first.logs / 'first.err').read_text()}"
        parts = list((out / "parts").glob("*.jsonl")) if (out / "parts").is_dir() else []
        if (out / LOCK_FILE).exists() and _held(out / LOCK_FILE) and any(p.stat().st_size for p in parts):
            return
        time.sleep(0.2)
    pytest.fail("the first sweep did not start timing within a minute")


def _stop(first: subprocess.Popen) -> tuple[int, str, str]:
    os.killpg(first.pid, signal.SIGINT)
    try:
        first.wait(timeout=60)
    except subprocess.TimeoutExpired:
        os.killpg(first.pid, signal.SIGKILL)
        first.wait()
    return first.returncode, (first.logs / "first.out").read_text(), (first.logs / "first.err").read_text()


def _assert_refused(result, out: Path) -> None:
    assert result.returncode == 2, describe(result)
    assert "Traceback" not in result.stdout + result.stderr, describe(result)
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("pccl-bench: error:"), describe(result)
    assert str(out) in lines[0] and "in use by another sweep" in lines[0] and "pid" in lines[0], describe(result)


@pytest.mark.mpi
def test_second_sweep_on_a_running_folder_is_refused(tmp_path: Path):
    suite = tmp_path / "slow.yaml"
    suite.write_text(yaml.safe_dump(SLOW_SUITE))
    out = tmp_path / "run"
    first = _start_sweep(suite, out)
    try:
        _wait_until_running(first, out)
        run_id = json.loads((out / "run.json").read_text())["run_id"]
        parts_before = sorted(p.name for p in (out / "parts").iterdir())
        second = run_cli("run", "sweep", suite, "--out", out, timeout=60)
        _assert_refused(second, out)
        resumed = run_cli("run", "sweep", "--resume", out, timeout=60)
        _assert_refused(resumed, out)
        assert json.loads((out / "run.json").read_text())["run_id"] == run_id, "the refused sweep took the run id"
        assert sorted(p.name for p in (out / "parts").iterdir()) == parts_before
        assert first.poll() is None, "the first sweep must go on"
    finally:
        code, stdout, stderr = _stop(first)
    assert code == 130, f"first sweep: exit {code}\n{stdout[-2000:]}\n{stderr[-2000:]}"
    assert (out / "results.parquet").exists(), "the interrupted first sweep still writes its table"
    assert not _held(out / LOCK_FILE), "the lock ends with the sweep"


def test_lock_is_exclusive_and_ends_with_release(tmp_path: Path):
    out = tmp_path / "run"
    holder = subprocess.Popen(
        [sys.executable, "-c", "import sys, time; from pathlib import Path; from bench.driver.runlock import RunLock; "
         "RunLock(Path(sys.argv[1])).acquire('--out'); print('held', flush=True); time.sleep(60)", str(out)],
        cwd=ROOT, env=subprocess_env(1), stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        with pytest.raises(BadInput, match="in use by another sweep"):
            RunLock(out).acquire("--out")
    finally:
        holder.kill()
        holder.wait()
    lock = RunLock(out)
    lock.acquire("--out")  # the holder is gone: the kernel dropped its lock
    lock.release()


def test_refused_lock_on_a_new_folder_leaves_nothing(tmp_path: Path):
    out = tmp_path / "new"
    lock = RunLock(out)
    lock.acquire("--out")
    lock.abandon()
    assert not out.exists()


# ---------------------------------------------------------------- memory before launch

GATHER_4MIB = {**TINY_SUITE, "collectives": ["allgather"], "sizes": {"min": "8B", "max": "4MiB"}}


def test_size_beyond_the_memory_is_refused_before_anything_is_written(tmp_path: Path):
    suite = tmp_path / "suite.yaml"
    suite.write_text(yaml.safe_dump({**TINY_SUITE, "sizes": {"min": "8B", "max": "1024GiB"}}))
    out = tmp_path / "run"
    result = run_cli("run", "sweep", suite, "--out", out, timeout=60)
    assert result.returncode == 2, describe(result)
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("pccl-bench: error:"), describe(result)
    for needle in (str(suite), "sizes.max: 1024 GiB", "per rank", "x 2 ranks on this host", "available"):
        assert needle in lines[0], describe(result)
    assert not out.exists(), "nothing may be created"


def room(mebibytes: int, ranks: int | None = None):
    """A machine with ``mebibytes`` available, holding ``ranks`` (default: all) of a launch."""
    return lambda launch: (ranks or launch.nranks, (mebibytes * 2**20, "MemAvailable"), "this host")


def test_memory_check_names_both_figures():
    suite = parse_suite({**GATHER_4MIB, "ranks": [4]}, "s.yaml")
    with pytest.raises(BadInput) as info:
        memory.check_memory(expand(suite), room(10), "4 MiB", "s.yaml")
    # all-gather of 4 MiB total on 4 ranks: 1 MiB send + 4 MiB receive per rank, 4 ranks here
    assert str(info.value) == ("s.yaml: sizes.max: 4 MiB needs 5.0 MiB of buffers per rank (allgather, float32, "
                               "4 ranks) x 4 ranks on this host = 20.0 MiB; this host has 10.0 MiB available "
                               "(MemAvailable)")
    memory.check_memory(expand(suite), room(21), "4MiB", "s.yaml")


def test_memory_check_counts_the_ranks_of_one_machine():
    suite = parse_suite({**GATHER_4MIB, "ranks": [4], "ranks_per_node": 2}, "s.yaml")
    memory.check_memory(expand(suite), room(11, ranks=2), "4MiB", "s.yaml")  # two machines of two ranks
    with pytest.raises(BadInput, match="x 4 ranks on this host"):
        memory.check_memory(expand(suite), room(11), "4MiB", "s.yaml")


def test_available_memory_is_read_here():
    figure = memory.available_memory()
    assert figure is not None and figure[0] > 0 and figure[1]
