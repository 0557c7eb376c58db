"""The ``buffers`` key column in tables: a table from before it reads as warm and gates a new run as
before; warm and rotate cells of one run are cells apart in the gate. No MPI."""

from __future__ import annotations

from dataclasses import replace

import pandas as pd
from synthetic_runs import grid, make_run

from bench.judge.gate import GateOptions, gate
from bench.results.read import read_results, read_samples
from bench.results.runset import load_runs

BUFFER_COLUMNS = ["buffers", "buffers_max_count", "buffer_positions", "buffer_span_bytes", "buffer_llc_bytes"]


def without_buffers(folder):
    """``folder``'s tables as a sweep wrote them before the buffers columns."""
    for name in ("results", "samples"):
        file = folder / f"{name}.parquet"
        frame = pd.read_parquet(file)
        frame.drop(columns=[c for c in BUFFER_COLUMNS if c in frame.columns]).to_parquet(file)
    return folder


def test_a_table_from_before_the_column_is_warm_and_gates_a_new_run(tmp_path):
    old = without_buffers(make_run(tmp_path / "old", grid(), "old"))
    assert "buffers" not in pd.read_parquet(old / "results.parquet")
    assert set(read_results([old])["buffers"]) == {"warm"} and set(read_samples(old)["buffers"]) == {"warm"}
    new = make_run(tmp_path / "new", grid(), "new", seed=2)
    result = gate(load_runs([old]), load_runs([new]), GateOptions())
    assert result.passed and len(result.cells) == len(grid()), result.counts()
    assert {c.verdict for c in result.cells} == {"unchanged"}


def test_warm_and_rotate_of_one_cell_are_judged_apart(tmp_path):
    warm = grid()
    rotate = {replace(spec, buffers="rotate", buffers_max_count=1 << 18): 3 * median for spec, median in warm.items()}
    base = make_run(tmp_path / "base", {**warm, **rotate}, "base")
    # the current run's rotate cells are as fast as its warm ones: pooled, the warm cells would look slower
    current = make_run(tmp_path / "cur", {**warm, **{spec: median / 3 for spec, median in rotate.items()}}, "cur",
                       seed=2)
    result = gate(load_runs([base]), load_runs([current]), GateOptions())
    assert len(result.cells) == 2 * len(warm)
    verdicts = {(c.row["buffers"], c.verdict) for c in result.cells}
    assert verdicts == {("warm", "unchanged"), ("rotate", "improved")}, verdicts
