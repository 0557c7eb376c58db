"""The ReFrame check (reframe_checks/pccl_bench_check.py) run by ReFrame itself on this machine:
it passes, and every figure is a performance variable in its perflog."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from conftest import ROOT, subprocess_env

CHECK = ROOT / "reframe_checks" / "pccl_bench_check.py"
SETTINGS = ROOT / "reframe_checks" / "settings.py"
FIGURES = [f"{collective}_{impl}_{nbytes}B" for collective in ("allgather", "allreduce")
           for impl in ("mpi", "pccl_flat_ring") for nbytes in (8, 1024)]


def reframe(tmp_path: Path, *extra: str) -> subprocess.CompletedProcess:
    """``reframe -C settings -c check -r`` with its stage, output and perflogs under ``tmp_path``."""
    command = [str(Path(sys.executable).with_name("reframe")), "-C", str(SETTINGS), "-c", str(CHECK), "-r",
               "--prefix", str(tmp_path), "--perflogdir", str(tmp_path / "perflogs"), *extra]
    return subprocess.run(command, cwd=tmp_path, env=subprocess_env(2), capture_output=True, text=True,
                          timeout=120)


@pytest.mark.mpi
def test_reframe_runs_the_sweep_and_logs_every_figure(tmp_path):
    result = reframe(tmp_path)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-2000:]
    assert "PASSED" in result.stdout and "Ran 1/1 test case" in result.stdout
    perflog = tmp_path / "perflogs" / "local" / "default" / "PcclBenchSweep.log"
    lines = perflog.read_text().splitlines()
    assert len(lines) == 2, lines  # the header and this run's line
    record = lines[-1]
    assert "|pass|PcclBenchSweep|" in record
    for name in FIGURES:
        for suffix, unit in (("_p50", "us"), ("_busbw", "GB/s")):
            field = f"{name}{suffix}="
            assert field in record, (field, record)
            value, logged_unit = record.split(field, 1)[1].split("|")[:2]
            assert float(value) > 0 and logged_unit == unit, (name, value, logged_unit)
    assert "allreduce_mpi_8B_p50=" in record and "ref=50.0|-1.0|1000.0" in record  # the local reference


@pytest.mark.mpi
def test_a_failing_sweep_fails_the_check(tmp_path):
    result = reframe(tmp_path, "-S", "PcclBenchSweep.pccl_bench=/bin/false")
    assert result.returncode != 0
    assert "FAILED" in result.stdout and "sanity" in result.stdout, result.stdout[-3000:]
