"""Injected faults (bench/rank/faults.py): a crashed rank, a hung job, wrong data.

Each asserts the table and the exit code; the sweep goes on with the next launch.
"""

from __future__ import annotations

import time

import pandas as pd
import pytest
import yaml
from conftest import describe, run_cli

from bench.rank.faults import parse

SUITE = {
    "name": "faults", "collectives": ["allgather"], "implementations": ["mpi", "pccl-flat"],
    "ranks": [2, 3], "sizes": {"min": 8, "max": 1024, "factor": 4},
    "timing": {"warmup": 1, "iters": 3, "min_iters": 1, "budget_s": 0}, "timeout_s": 15,
}


def sweep_with_fault(tmp_path, fault: str):
    suite = tmp_path / "faults.yaml"
    suite.write_text(yaml.safe_dump(SUITE))
    started = time.monotonic()
    result = run_cli("run", "sweep", suite, "--out", tmp_path / "run", env={"PCCL_BENCH_FAULT": fault}, timeout=120)
    frame = pd.read_parquet(tmp_path / "run" / "results.parquet")
    return result, frame, time.monotonic() - started


@pytest.mark.mpi
def test_crashed_rank_fails_the_rest_of_its_launch_only(tmp_path):
    result, frame, _ = sweep_with_fault(tmp_path, "crash:rank=1:cell=3:launch=n2-rpn2-host")
    assert result.returncode == 3, describe(result)
    first = frame[frame["launch_id"] == "n2-rpn2-host"]
    assert list(first["status"]) == ["ok"] * 3 + ["failed"] * 5, first[["status", "error"]]
    assert first[first["status"] == "failed"]["error"].str.contains("exited with 17").all()
    assert set(frame[frame["launch_id"] == "n3-rpn3-host"]["status"]) == {"ok"}  # the sweep went on
    assert len(frame) == 16


@pytest.mark.mpi
def test_hung_job_is_killed_at_its_timeout(tmp_path):
    result, frame, seconds = sweep_with_fault(tmp_path, "hang:rank=0:cell=2:launch=n2-rpn2-host")
    assert result.returncode == 3, describe(result)
    first = frame[frame["launch_id"] == "n2-rpn2-host"]
    assert list(first["status"]) == ["ok"] * 2 + ["timeout"] * 6
    assert first[first["status"] == "timeout"]["error"].str.contains("killed after 15 s").all()
    assert set(frame[frame["launch_id"] == "n3-rpn3-host"]["status"]) == {"ok"}
    assert seconds < 90


@pytest.mark.mpi
def test_corrupted_result_is_a_wrong_cell_and_exit_1(tmp_path):
    result, frame, _ = sweep_with_fault(tmp_path, "corrupt:rank=1:cell=1")
    assert result.returncode == 1, describe(result)
    wrong = frame[frame["status"] == "wrong"]
    assert len(wrong) == 2 and (wrong["n_wrong"] == 1).all()  # one per launch, never timed
    assert wrong["time_us_p50"].isna().all()
    assert (frame[frame["status"] == "ok"]["n_wrong"] == 0).all()


def test_fault_spec_parsing():
    assert parse(None) is None and parse("") is None
    fault = parse("hang:rank=2:cell=5:launch=n4")
    assert fault.hits(2, 5, "n4") and not fault.hits(2, 5, "n2") and not fault.hits(1, 5, "n4")
    with pytest.raises(ValueError, match="PCCL_BENCH_FAULT"):
        parse("explode:rank=1:cell=1")
    with pytest.raises(ValueError, match="PCCL_BENCH_FAULT"):
        parse("crash:rank=1")
