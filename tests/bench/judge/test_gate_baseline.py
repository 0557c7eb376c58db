"""The committed baseline of suites/ci.yaml: readable, a schema this version reads, every cell of the suite.

Live timings of this machine are never compared with it here (they differ from machine to
machine and minute to minute); `pccl-bench gate results/baselines/ci <run>` does that on purpose.
"""

from __future__ import annotations

import pytest
from conftest import ROOT

from bench.judge.gate import MIN_SAMPLES, GateOptions, gate
from bench.plan.cells import CELL_KEY, expand
from bench.plan.suite_files import load_suite
from bench.results.runset import load_runs
from bench.results.table import COLUMNS, READABLE_SCHEMAS, SAMPLE_COLUMNS

BASELINE = ROOT / "results" / "baselines" / "ci"
GATE_COLUMNS = (*CELL_KEY, "run_id", "launch_id", "bytes_total", "status", "n_wrong", "error", "time_us_p50")


@pytest.fixture(scope="module")
def baseline():
    return load_runs([BASELINE])


def test_schema_is_current(baseline):
    assert len(baseline.sources) >= 2, "pool at least two runs (pccl-bench baseline update ci)"
    # columns are added, never renamed (bench/results/table.py): an older table of the same schema version
    # may lack new ones, but must have every column the gate reads and none that is unknown
    assert set(baseline.results.columns) <= set(COLUMNS)
    assert set(GATE_COLUMNS) <= set(baseline.results.columns)
    assert set(baseline.samples.columns) == set(SAMPLE_COLUMNS)
    # schema 2 changed the cell key only (placement in it); the gate matches on columns, so a baseline
    # of schema 1 (committed before it) still gates: readable, not necessarily the newest
    assert set(baseline.results.schema_version) <= set(READABLE_SCHEMAS)
    assert all(meta["schema_version"] in READABLE_SCHEMAS and meta["suite"] == "ci" for meta in baseline.metas)
    assert set(baseline.results.status) == {"ok"}


def test_covers_every_cell_of_the_suite(baseline):
    suite, _ = load_suite(ROOT / "suites" / "ci.yaml")
    planned = {tuple(getattr(cell, name) for name in CELL_KEY) for launch in expand(suite) for cell in launch.cells}
    measured = {tuple(row) for row in baseline.results[list(CELL_KEY)].itertuples(index=False)}
    assert measured == planned, "suites/ci.yaml changed: run `pccl-bench baseline update ci` and commit it"


def test_every_cell_has_enough_samples(baseline):
    counts = baseline.samples.groupby(list(CELL_KEY)).size()
    assert counts.min() >= MIN_SAMPLES


def test_gates_against_itself(baseline):
    result = gate(baseline, baseline, GateOptions(resamples=200))
    assert result.passed and {cell.verdict for cell in result.cells} == {"unchanged"}
