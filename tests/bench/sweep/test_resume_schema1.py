"""``run sweep --resume`` of a run folder begun before results schema 2 (cell keys without the
placement): its finished cells keep their rows and schema-1 keys, only the missing ones are measured."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest
import yaml
from conftest import describe, run_cli

from bench.plan.cells import legacy_cell_key
from bench.results.read import read_results

pytestmark = pytest.mark.mpi

SUITE = {"name": "schema1", "collectives": ["allreduce", "allgather"], "implementations": ["mpi"], "ranks": [2],
         "sizes": {"min": "8B", "max": "16B"}, "timing": {"warmup": 1, "iters": 3, "min_iters": 1, "budget_s": 0}}
KEEP = 2


def as_schema_1(folder: Path) -> list[str]:
    """The run's part files as a schema-1 sweep wrote them, cut after KEEP rows; their lines."""
    for name in ("results.parquet", "results.csv", "samples.parquet", "meta.json"):
        (folder / name).unlink()
    part = next((folder / "parts").glob("*.jsonl"))
    lines = []
    for line in part.read_text().splitlines()[:KEEP]:
        row = {name: value for name, value in json.loads(line).items() if not name.startswith("planned_")}
        lines.append(json.dumps({**row, "cell_key": legacy_cell_key(row)}))
    part.write_text("".join(line + "\n" for line in lines))
    return lines


def test_resume_of_a_schema_1_run_redoes_only_the_missing_cells(tmp_path):
    suite = tmp_path / "suite.yaml"
    suite.write_text(yaml.safe_dump(SUITE))
    folder = tmp_path / "run"
    first = run_cli("run", "sweep", suite, "--out", folder, timeout=180)
    assert first.returncode == 0, describe(first)
    planned = len(pd.read_parquet(folder / "results.parquet"))
    kept = as_schema_1(folder)
    resumed = run_cli("run", "sweep", "--resume", folder, timeout=180)
    assert resumed.returncode == 0, describe(resumed)
    assert f"{KEEP} already done" in resumed.stdout, resumed.stdout
    lines = next((folder / "parts").glob("*.jsonl")).read_text().splitlines()
    assert lines[:KEEP] == kept and len(lines) == planned, "exactly the missing cells measured again"
    assert all("planned_nnodes" in json.loads(line) for line in lines[KEEP:])
    table = read_results([folder])
    old_keys = {json.loads(line)["cell_key"] for line in kept}
    assert len(table) == planned and set(table.status) == {"ok"}
    assert set(table[table.schema_version == 1].cell_key) == old_keys, "finished cells keep their schema-1 keys"
    new = table[table.schema_version == 2]
    assert (new.planned_nnodes == new.nnodes).all() and (new.planned_nnodes == 1).all()
    assert (new.planned_hosts_digest == "").all() and new.hosts.str.len().gt(0).all(), "measured: this host"
    meta = json.loads((folder / "meta.json").read_text())
    assert meta["cells_written"] == meta["cells_planned"] == planned
