"""The console's non-blocking cells: labelled, each against mpi of its own mode, and the overlap
table as OSU prints it (bench.present.console overlap_tables)."""

from __future__ import annotations

import io

import pandas as pd
from rich.console import Console

from bench.present import console as screen


def row(impl: str, mode: str, time_us: float, **changes) -> dict:
    base = {"collective": "allreduce", "impl": impl, "algorithm": "native" if impl == "mpi" else "ring",
            "intra": "", "inter": "", "device": "host", "nranks": 2, "nnodes": 1, "ranks_per_node": 2,
            "dtype": "float32", "op": "sum", "placement": "out_of_place", "count_per_rank": 1 << 20,
            "timing_mode": "sync", "arm": "", "mode": mode, "bytes_total": 4 << 20, "repeat": 0, "status": "ok",
            "time_us_p50": time_us, "busbw_gbps": 1.0, "n_wrong": 0, "error": None}
    return {**base, **changes}


def text(tables) -> str:
    out = Console(width=200, record=True, file=io.StringIO())
    for table in tables:
        out.print(table)
    return out.export_text()


RESULTS = pd.DataFrame([
    row("mpi", "blocking", 100.0), row("pccl-flat", "blocking", 50.0),
    row("mpi", "nonblocking", 400.0, pure_us=400.0, compute_us=1000.0, overall_us=1100.0, test_us=12.5,
        nb_test_calls=8, overlap_pct=75.0),
    row("pccl-flat", "nonblocking", float("nan"), status="unsupported", error="non-blocking pccl-flat: ..."),
])


def test_nonblocking_lines_are_labelled_and_blocking_ones_judged_against_blocking_mpi():
    shown = text(screen.summary_tables(RESULTS))
    assert "mpi nonblocking" in shown and "pccl-flat:ring nonblocking" in shown
    assert "2.00x" in shown  # pccl-flat (50 us) against blocking mpi (100 us), not the non-blocking 400 us


def test_the_overlap_table_has_osus_columns():
    shown = text(screen.overlap_tables(RESULTS))
    assert "allreduce overlap (OSU)" in shown
    line = next(line for line in shown.splitlines() if "mpi nonblocking" in line)
    for figure in ("4 MiB", "400.00", "1000.00", "1100.00", "8", "75.0"):
        assert figure in line, line
    assert screen.overlap_tables(RESULTS[RESULTS["mode"] == "blocking"]) == []
