"""``pccl-bench report``: one self-contained Markdown and HTML file, with and without a baseline."""

from __future__ import annotations

import base64
import re

import pandas as pd
import pytest
from conftest import DATA
from synthetic_runs import grid, make_run

from bench.cli import main


def test_report_with_baseline_is_self_contained(tmp_path):
    base = make_run(tmp_path / "base", grid(), "base-run", seed=1)
    slow = next(iter(grid()))
    current = make_run(tmp_path / "cur", {**grid(), slow: grid()[slow] * 1.5}, "cur-run", seed=2)
    with pytest.raises(SystemExit) as done:
        main(["report", str(current), "--baseline", str(base), "--out", str(tmp_path / "report")])
    assert done.value.code == 0  # a report documents; the gate gates
    markdown = (tmp_path / "report" / "report.md").read_text()
    page = (tmp_path / "report" / "report.html").read_text()
    for text in (markdown, page):
        for needed in ("Provenance", "Regression gate", "Summary", "Plots", "cur-run", "base-run", "MPICH 5.0.2",
                       "FAIL: 1 regressed"):
            assert needed in text, needed
    images = re.findall(r'src="data:image/png;base64,([A-Za-z0-9+/=]+)"', page)
    assert len(images) >= 3
    assert base64.b64decode(images[0])[:4] == b"\x89PNG"
    assert markdown.count("](data:image/png;base64,") == len(images)
    assert not re.search(r'(src|href)="(?!data:)', page)  # nothing outside the file


def test_report_without_baseline_has_no_gate(tmp_path):
    run = make_run(tmp_path / "run", grid(), "only-run")
    with pytest.raises(SystemExit) as done:
        main(["report", str(run)])
    assert done.value.code == 0
    markdown = (run / "report" / "report.md").read_text()
    assert "Regression gate" not in markdown and "only-run" in markdown


@pytest.mark.parametrize("names", [["all_gather_perf.txt"], ["all_gather_perf.txt", "all_reduce_perf.txt"]])
def test_provenance_of_an_import_counts_the_cells_of_all_its_runs(tmp_path, names):
    """A multi-run import's rows have run ids <run_id>-1, -2 ... (meta.json imported_from[].run_id):
    the provenance row shows their libraries and cells, as for a one-run import (it showed "-" and "-")."""
    out = tmp_path / "imported"
    with pytest.raises(SystemExit) as done:
        main(["import", "nccl-tests", *(str(DATA / "nccl-tests" / name) for name in names), "--out", str(out)])
    assert done.value.code == 0
    cells = len(pd.read_parquet(out / "results.parquet"))
    with pytest.raises(SystemExit) as done:
        main(["report", str(out)])
    assert done.value.code == 0
    markdown = (out / "report" / "report.md").read_text()
    [row] = [line for line in markdown.splitlines() if line.startswith("| import-nccl-tests-")]
    assert "| NCCL 2.18.3 |" in row and f"| {cells} ok |" in row, row
