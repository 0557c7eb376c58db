"""The adaptive timing loop (cython_ext/timing.pyx measure): warm-up until stable, stop on
precision / budget / iters, and the new row columns that say why. Structure only: no assertion
depends on how fast this machine is."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import yaml
from conftest import ROOT, describe, run_cli
from cython_ext.order_stats import ci_of
from cython_ext.timing import STOP_REASONS, WARMUP_REASONS

from bench.plan.suite_files import load_suite
from bench.results.table import COLUMNS

ADAPTIVE = {
    "name": "adaptive", "collectives": ["allreduce"], "implementations": ["mpi", {"impl": "pccl-flat",
                                                                                 "algorithms": ["ring"]}],
    "ranks": [2], "sizes": {"min": "8B", "max": "4KiB", "factor": 8},
    "timing": {"warmup": 3, "iters": 200, "min_iters": 25, "budget_s": 0.05, "target_ci": 0.02,
               "max_warmup": 50},
    "timeout_s": 120,
}


def test_order_statistic_interval_of_the_median():
    rng = np.random.default_rng(0)
    narrow = ci_of(rng.normal(100.0, 1.0, 400))
    wide = ci_of(rng.normal(100.0, 10.0, 400))
    assert 0 < narrow < wide < 0.05
    assert np.isnan(ci_of(np.ones(3)))  # too few samples to bound a median
    assert ci_of(np.full(100, 7.0)) == 0.0


def test_new_columns_are_added_not_renamed():
    for name in ("stop_reason", "ci_rel", "warmup_discarded", "warmup_slowest_us", "warmup_reason"):
        assert name in COLUMNS
    assert COLUMNS.index("stop_reason") > COLUMNS.index("cost_per_call_usd")  # appended at the end


def test_ci_suite_times_adaptively():
    suite, _ = load_suite(ROOT / "suites" / "ci.yaml")
    assert suite.timing.target_ci > 0 and suite.timing.max_warmup > 0
    assert suite.timing.min_iters * suite.repeats >= 20  # every cell reaches the gate's --min-samples


@pytest.mark.mpi
def test_adaptive_cells_record_why_they_stopped(tmp_path):
    suite = tmp_path / "suite.yaml"
    suite.write_text(yaml.safe_dump(ADAPTIVE))
    done = run_cli("run", "sweep", suite, "--out", tmp_path / "run")
    assert done.returncode == 0, describe(done)
    results = pd.read_parquet(tmp_path / "run" / "results.parquet")
    samples = pd.read_parquet(tmp_path / "run" / "samples.parquet")
    assert len(results) == 2 * 4 and set(results.status) == {"ok"}
    assert set(results.stop_reason) <= set(STOP_REASONS) - {"fixed"}
    assert set(results.warmup_reason) <= set(WARMUP_REASONS) - {"fixed"}
    assert (results.iters >= 25).all() and (results.iters <= 200).all()
    assert (results.warmup_discarded >= 3 + 5).all() and (results.warmup_discarded <= 3 + 50 + 5).all()
    assert (results.warmup_slowest_us > 0).all()
    # a cell that stopped on precision reached it; the samples table holds exactly iters per cell
    precise = results[results.stop_reason == "precision"]
    assert (precise.ci_rel <= 0.02 + 1e-12).all()
    assert samples.groupby("cell_key").size().sort_index().tolist() == results.set_index("cell_key").iters.sort_index(
    ).tolist()


@pytest.mark.mpi
def test_fixed_timing_is_unchanged(tmp_path):
    raw = {**ADAPTIVE, "timing": {"warmup": 2, "iters": 7, "min_iters": 7, "budget_s": 0}}
    suite = tmp_path / "suite.yaml"
    suite.write_text(yaml.safe_dump(raw))
    done = run_cli("run", "sweep", suite, "--out", tmp_path / "run")
    assert done.returncode == 0, describe(done)
    results = pd.read_parquet(tmp_path / "run" / "results.parquet")
    assert set(results.iters) == {7} and set(results.stop_reason) == {"fixed"}
    assert set(results.warmup_discarded) == {2}
