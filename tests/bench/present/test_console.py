"""bench.present.console: the end-of-sweep summary (one line per cell, the reasons cells gave no time)."""

from __future__ import annotations

import io

import pandas as pd
from conftest import console_text
from rich.console import Console

from bench.present import console as screen


def row(impl: str = "mpi", status: str = "ok", time_us: float = 10.0, repeat: int = 0, error: str | None = None,
        **changes) -> dict:
    base = {"collective": "allgather", "impl": impl, "algorithm": "native" if impl == "mpi" else "ring",
            "intra": None, "inter": None, "device": "host", "nranks": 2, "nnodes": 1, "ranks_per_node": 2,
            "dtype": "float32", "op": "none", "placement": "out_of_place", "count_per_rank": 256,
            "timing_mode": "max", "bytes_total": 2048, "repeat": repeat, "status": status,
            "time_us_p50": time_us if status == "ok" else None,
            "busbw_gbps": 2048 / 2 / (time_us * 1e3) if status == "ok" else None,
            "n_wrong": 0, "error": error}
    return {**base, **changes}


def rendered(results: pd.DataFrame) -> str:
    out = Console(width=200, record=True, file=io.StringIO())
    for table in screen.summary_tables(results):
        out.print(table)
    return out.export_text()


def test_repeats_become_one_line_with_the_median_of_medians():
    results = pd.DataFrame([row("mpi", time_us=t, repeat=r) for r, t in enumerate([10.0, 30.0, 20.0])]
                           + [row("pccl-flat", time_us=t, repeat=r) for r, t in enumerate([5.0, 4.0, 100.0])])
    text = rendered(results)
    assert text.count("pccl-flat:ring") == 1 and text.count("│ mpi ") == 1
    assert "20.00" in text and "5.00" in text and "4.00x" in text
    assert "median over the cell's repeats" in " ".join(text.split())  # the caption may wrap


def test_a_failed_repeat_shows_as_failed_with_every_wrong_element():
    results = pd.DataFrame([row("pccl-flat", time_us=5.0, repeat=0),
                            row("pccl-flat", status="wrong", repeat=1, n_wrong=7, error="7 elements differ")])
    line = screen._one_line_per_cell(results)
    assert len(line) == 1 and line.loc[0, "status"] == "wrong" and line.loc[0, "n_wrong"] == 7


def test_without_repeats_the_lines_are_the_rows():
    results = pd.DataFrame([row("mpi"), row("pccl-flat", time_us=5.0)])
    assert screen._one_line_per_cell(results) is results
    text = rendered(results)
    assert "2.00x" in text and "1.00x" not in text  # the baseline line has no ratio of its own


def test_reasons_once_each_most_frequent_first_with_the_implementations():
    no_cupy = "device cuda: CuPy is not installed"
    results = pd.DataFrame([
        row("mpi", status="unsupported", error=no_cupy, count_per_rank=1),
        row("pccl-flat", status="unsupported", error=no_cupy, count_per_rank=2),
        row("pccl-flat", status="unsupported", error=no_cupy, count_per_rank=4),
        row("pccl-hier", status="failed", error="MPI job exited with 1\n  before this cell", inter="rd", intra="ring"),
        row("mpi"),
    ])
    lines = screen.reasons(results)
    assert lines == [f"3 unsupported (mpi, pccl-flat:ring): {no_cupy}",
                     "1 failed (pccl-hier:rd/ring): MPI job exited with 1 before this cell"]


def test_reasons_are_bounded_in_number_and_length():
    results = pd.DataFrame([row("mpi", status="failed", error=f"reason {index} " + "x" * 1000, count_per_rank=index)
                            for index in range(screen.MAX_REASONS + 3)])
    lines = screen.reasons(results)
    assert len(lines) == screen.MAX_REASONS + 1
    assert all(len(line) < screen.REASON_CHARS + 40 for line in lines[:-1])
    assert lines[-1].startswith("... 3 more reasons")
    assert screen.reasons(pd.DataFrame([row("mpi")])) == []
    assert screen.reasons(pd.DataFrame([row("mpi", status="timeout")]))[0].endswith("no reason recorded")


# --- how sure a speedup is (bench.results.speedup) ------------------------------------------------------


def samples_of(results: pd.DataFrame, spreads: dict[str, list[float]]) -> pd.DataFrame:
    """One launch of samples per row: the row's time times each factor of its implementation."""
    rows = []
    for record in results.to_dict("records"):
        for iteration, factor in enumerate(spreads[record["impl"]]):
            rows.append({**record, "run_id": "r", "launch_id": "n2", "iteration": iteration,
                         "time_us": record["time_us_p50"] * factor})
    return pd.DataFrame(rows)


def rendered_with(results: pd.DataFrame, samples: pd.DataFrame | None) -> str:
    return console_text(screen.summary_tables(results, samples))


TIGHT = [0.99, 1.0, 1.01] * 7


def test_a_tight_speedup_reads_as_a_result():
    results = pd.DataFrame([row("mpi", time_us=10.0), row("pccl-flat", time_us=5.0)])
    text = rendered_with(results, samples_of(results, {"mpi": TIGHT, "pccl-flat": TIGHT}))
    assert "2.00x" in text and "2.00x?" not in text and "unsure" not in text


def test_a_single_slow_baseline_cell_is_marked_with_its_interval():
    """The smoke summary's 50x: an MPI cell whose iterations were mostly fast, a few very slow."""
    results = pd.DataFrame([row("mpi", time_us=10.0), row("pccl-flat", time_us=0.2)])
    wild = [1.0, 0.1, 0.12, 1.1, 0.09, 0.11, 1.2] * 3
    text = rendered_with(results, samples_of(results, {"mpi": wild, "pccl-flat": TIGHT}))
    assert "50.00x? [" in text and "unsure" in text


def test_oversubscribed_cells_are_unsure_however_tight():
    results = pd.DataFrame([row("mpi", time_us=10.0, oversubscribed=True),
                            row("pccl-flat", time_us=5.0, oversubscribed=True)])
    text = rendered_with(results, samples_of(results, {"mpi": TIGHT, "pccl-flat": TIGHT}))
    assert "2.00x? [" in text and "oversubscribed" in text


def test_without_samples_a_ratio_is_unsure():
    results = pd.DataFrame([row("mpi", time_us=10.0), row("pccl-flat", time_us=5.0)])
    text = rendered_with(results, None)
    assert "2.00x?" in text and "no samples" in text


def test_the_pccl_hier_note_only_under_tables_with_pccl_hier_rows():
    flat = pd.DataFrame([row("mpi"), row("pccl-flat", time_us=5.0)])
    assert "pccl-hier" not in rendered_with(flat, None)
    hier = pd.DataFrame([row("mpi"), row("pccl-hier", time_us=5.0, inter="rd", intra="ring")])
    text = rendered_with(hier, None)
    assert "pccl-hier:<inter>/<intra> phases" in text and "pccl-hier:rd/ring" in text


def test_both_placements_side_by_side_out_of_place_first_each_against_its_own_mpi():
    """As nccl-tests prints them: one line per implementation, out-of-place columns then in-place."""
    results = pd.DataFrame([row("pccl-flat", time_us=4.0, placement="in_place"),
                            row("mpi", time_us=10.0), row("pccl-flat", time_us=5.0),
                            row("mpi", time_us=12.0, placement="in_place")])
    tables = screen.summary_tables(results)
    headers = [" ".join(str(column.header).split()) for column in tables[0].columns]
    rest = [" ".join(name.split()) for name in screen.SIDE_BY_SIDE_COLUMNS[1:]]
    assert headers[3:] == ["out-of-place time us p50", *rest, "in-place time us p50", *rest]
    text = rendered(results)
    lines = [line for line in text.splitlines() if "pccl-flat" in line or "mpi" in line.split()[:3]]
    assert len(lines) == 2 and "(in place)" not in text
    cells = next(line for line in lines if "pccl-flat" in line).split()
    # pccl-flat: 5.00 out of place (mpi 10: 2x), then 4.00 in place (mpi 12: 3x)
    assert cells[cells.index("5.00") + 3] == "2.00x?" and cells[cells.index("4.00") + 3] == "3.00x?"
    assert cells.index("5.00") < cells.index("4.00")


def test_one_placement_alone_keeps_the_one_block_of_columns():
    results = pd.DataFrame([row("mpi", placement="in_place"), row("pccl-flat", time_us=5.0, placement="in_place")])
    headers = [str(column.header) for column in screen.summary_tables(results)[0].columns]
    assert headers[3:] == list(screen.CELL_COLUMNS) and "pccl-flat:ring (in place)" in rendered(results)
