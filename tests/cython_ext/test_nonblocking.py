"""MPI's non-blocking collectives (cython_ext/nonblocking.pyx) under OSU's method, on 2 ranks: a sweep's
rows (checked bit for bit in both placements, the pure time as the cell's samples, the overlap columns,
the implementations that cannot progress refused with why), and that the method tells a compute
without progress calls from one with MPI_Test calls in it."""

from __future__ import annotations

import copy
import json
import statistics

import numpy as np
import pandas as pd
import pytest
import yaml
from conftest import MPI_SCRIPTS, TINY_SUITE, describe, run_cli, run_mpi

pytestmark = pytest.mark.mpi


def test_nonblocking_sweep_rows(tmp_path):
    raw = {**copy.deepcopy(TINY_SUITE), "name": "nb", "mode": ["blocking", "nonblocking"],
           "placement": ["out_of_place", "in_place"]}
    raw["timing"] = {**raw["timing"], "nb_test_calls": 2}
    suite = tmp_path / "suite.yaml"
    suite.write_text(yaml.safe_dump(raw))
    done = run_cli("run", "sweep", suite, "--out", tmp_path / "run")
    assert done.returncode == 0, describe(done)
    results = pd.read_parquet(tmp_path / "run" / "results.parquet")
    samples = pd.read_parquet(tmp_path / "run" / "samples.parquet")
    assert len(results) == 3 * 2 * 2 * 2 * 4  # collectives, impls, placements, modes, sizes
    blocking, posted = results[results["mode"] == "blocking"], results[results["mode"] == "nonblocking"]
    assert set(blocking.status) == {"ok"} and blocking.overlap_pct.isna().all()
    mpi = posted[posted.impl == "mpi"]
    assert set(mpi.status) == {"ok"} and (mpi.n_wrong == 0).all() and set(mpi.placement) == {"out_of_place",
                                                                                                 "in_place"}
    # the cell's timing columns are the pure time's; overlap from the overlapped calls
    assert np.allclose(mpi.time_us_p50, mpi.pure_us)
    assert (mpi.overall_us > 0).all() and (mpi.compute_us > 0).all() and (mpi.overlap_pct >= 0).all()
    assert set(mpi.nb_test_calls) == {2} and (mpi.test_us >= 0).all()
    flat = posted[posted.impl == "pccl-flat"]
    assert set(flat.status) == {"unsupported"}
    assert flat.error.str.startswith("non-blocking pccl-flat: its executor").all()
    counts = samples[samples["mode"] == "nonblocking"].groupby("cell_key").size()
    assert counts.sort_index().tolist() == mpi.set_index("cell_key").iters.sort_index().tolist()


def _overlaps(stdout: str) -> dict[int, list[float]]:
    found: dict[int, list[float]] = {}
    for line in stdout.splitlines():
        row = json.loads(line)
        assert row["status"] == "ok", row
        found.setdefault(row["calls"], []).append(row["overlap_pct"])
    return found


def test_progress_calls_let_the_collective_overlap():
    """An 8 MiB all-reduce on 2 ranks needs MPICH's rendezvous, which moves only when MPI is called:
    without MPI_Test calls in the compute little of it overlaps, with 16 much more. Medians of five
    rounds, the two kinds in turns; the margin is far below what this machine shows under load
    (docs/PERFORMANCE.md, "Non-blocking collectives")."""
    done = run_mpi(2, MPI_SCRIPTS / "check_overlap.py", 2 * 1024 * 1024, 16, 5, timeout=240)
    assert done.returncode == 0, describe(done)
    overlaps = _overlaps(done.stdout)
    assert len(overlaps[0]) == len(overlaps[16]) == 5
    without, with_tests = statistics.median(overlaps[0]), statistics.median(overlaps[16])
    assert with_tests > without + 15, overlaps
