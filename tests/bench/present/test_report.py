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


def test_summary_puts_the_placements_side_by_side_never_pooled():
    """Out-of-place columns then in-place columns, each placement's fastest against its own mpi."""
    from bench.present.report import _summary_table

    frame = pd.DataFrame([
        {"label": label, "bytes_total": 1024, "placement": placement, "time_us": time_us}
        for label, placement, time_us in [("mpi", "out_of_place", 10.0), ("pccl-flat:ring", "out_of_place", 5.0),
                                          ("mpi", "in_place", 40.0), ("pccl-flat:ring", "in_place", 80.0)]])
    table, _ = _summary_table(frame, "mpi")
    assert table.header == ["size", "mpi µs (out-of-place)", "pccl-flat:ring µs (out-of-place)",
                            "fastest (out-of-place)", "fastest vs mpi (out-of-place)", "mpi µs (in-place)",
                            "pccl-flat:ring µs (in-place)", "fastest (in-place)", "fastest vs mpi (in-place)"]
    assert table.rows == [["1 KiB", "10.00", "5.00", "pccl-flat:ring", "2.00x?", "40.00", "80.00", "mpi", "1.00x?"]]
    one, _ = _summary_table(frame[frame["placement"].eq("out_of_place")], "mpi")
    assert one.header == ["size", "mpi µs", "pccl-flat:ring µs", "fastest", "fastest vs mpi"]
