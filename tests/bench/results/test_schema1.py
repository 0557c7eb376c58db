"""Runs of results schema 1 (cell keys without the placement, no planned_* columns) under schema 2:
their tables load and gate, and their part files resume: finished cells are found under their
schema-1 keys, kept with them, and only the missing cells are measured (with schema-2 keys). No MPI."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import numpy as np
from synthetic_runs import cell, grid, make_run

from bench.judge.gate import GateOptions, gate
from bench.plan.cells import Cell
from bench.rank.outcome import CellOutcome, part_row
from bench.rank.parts import append_rows, cell_rows, finished_keys, read_parts, rows_of_cells
from bench.results.read import read_meta, read_results
from bench.results.runset import load_runs
from bench.results.table import SCHEMA_VERSION, build_tables, write_run

FINISHED = ("ok", "wrong", "unsupported", "skipped")
PLANNED_COLUMNS = ["planned_nnodes", "planned_ranks_per_node", "planned_virtual_nodes", "planned_hosts_digest"]


def schema_1_row(spec: Cell, status: str = "ok", samples: list[float] | None = None) -> dict:
    """A part row as a schema-1 worker wrote it: the cell's fields (the measured placement over the
    planned one), its schema-1 key, no planned_* and no hosts digest in the key."""
    fields = {name: value for name, value in vars(spec).items() if name != "hosts_digest"}
    samples = [10.0, 11.0, 10.5] if samples is None and status == "ok" else samples or []
    return {**fields, "cell_key": spec.legacy_key, "hosts": "h1", "hosts_digest": "ab" * 8,
            "mpi_thread_level": "single", "status": status, "error": "" if status == "ok" else "MPI job exited",
            "n_wrong": 0, "iters": len(samples), "samples_us": samples, "timestamp": 1.8e9, "launch_id": "n2"}


def schema_1_run(folder: Path, cells: dict, run_id: str) -> Path:
    """A run folder of schema 1: its table has schema-1 keys, schema_version 1, no planned_* columns."""
    rng = np.random.default_rng(3)
    rows = [schema_1_row(replace(spec, repeat=repeat), samples=list(median * np.exp(rng.normal(0, 0.03, 60))))
            for spec, median in cells.items() for repeat in range(2)]
    identity = {"run_id": run_id, "suite": "synthetic", "tool_version": "old", "git_sha": "", "schema_version": 1}
    results, samples = build_tables(rows, identity)
    folder.mkdir(parents=True)
    write_run(folder, results.drop(columns=PLANNED_COLUMNS), samples,
              {"schema_version": 1, "run_id": run_id, "suite": "synthetic"})
    return folder


def test_a_schema_1_table_loads_and_gates_a_schema_2_run(tmp_path):
    old = schema_1_run(tmp_path / "old", grid(), "old")
    table = read_results([old])
    assert set(table.schema_version) == {1} and table[PLANNED_COLUMNS].isna().all().all()
    assert read_meta(old)["schema_version"] == 1
    new = make_run(tmp_path / "new", grid(), "new", seed=2)
    result = gate(load_runs([old]), load_runs([new]), GateOptions())
    assert result.passed and {c.verdict for c in result.cells} == {"unchanged"}, result.counts()
    assert len(result.cells) == len(grid()), "the gate matches the cells on their columns, not on the key"


def test_a_resumed_schema_1_run_keeps_its_finished_cells_and_redoes_only_the_missing(tmp_path):
    done, failed, missing = cell(bytes_total=64), cell(bytes_total=4096), cell(bytes_total=1 << 20)
    planned = [done, failed, missing]
    folder = tmp_path / "run"
    (folder / "parts").mkdir(parents=True)
    part = folder / "parts" / "n2.jsonl"
    append_rows(part, [schema_1_row(done), schema_1_row(failed, "failed")])

    rows = read_parts(folder, check_cells=True)
    assert finished_keys(rows, planned, FINISHED) == {done.key}, "found under its schema-1 key"
    # the resumed sweep measures the other two, with schema-2 keys
    append_rows(part, [part_row(spec, CellOutcome("ok", samples_us=[12.0, 13.0]), 1.9e9, "n2")
                       for spec in (failed, missing)])
    rows = read_parts(folder)
    assert set(cell_rows(rows, planned)) == {spec.key for spec in planned}
    kept = rows_of_cells(rows, planned)
    assert [(row["cell_key"], row.get("schema_version")) for row in kept] == \
        [(done.legacy_key, 1), (failed.key, None), (missing.key, None)], "the failed schema-1 row is replaced"
    identity = {"run_id": "r", "suite": "s", "tool_version": "t", "git_sha": "", "schema_version": SCHEMA_VERSION}
    write_run(folder, *build_tables(kept, identity), {"schema_version": SCHEMA_VERSION, "run_id": "r"})
    table = read_results([folder]).set_index("cell_key")
    assert table.loc[done.legacy_key, "schema_version"] == 1 and table.loc[failed.key, "schema_version"] == 2
    assert np.isnan(table.loc[done.legacy_key, "planned_nnodes"]) and table.loc[missing.key, "planned_nnodes"] == 1
    assert json.loads((folder / "meta.json").read_text())["schema_version"] == SCHEMA_VERSION


def test_a_schema_2_row_is_never_taken_for_another_placement(tmp_path):
    """Only schema-1 rows stand in for a cell under the schema-1 key: a row planned elsewhere does not."""
    here, there = cell(), replace(cell(), hosts_digest="0123456789abcdef")
    row = part_row(here, CellOutcome("ok", samples_us=[1.0]), 1.0, "n2")
    assert here.legacy_key == there.legacy_key
    assert set(cell_rows([row], [there])) == set() and set(cell_rows([row], [here])) == {here.key}
