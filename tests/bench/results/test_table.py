"""bench.results.table: the result-table contract, statistics, atomic writes, part files."""

from __future__ import annotations

import json
import os
import stat
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from bench.plan.cells import CELL_KEY, expand
from bench.plan.suite import parse_suite
from bench.rank.parts import read_parts
from bench.results import table
from bench.results.table import (
    COLUMNS,
    SAMPLE_COLUMNS,
    STATUSES,
    atomic_write,
    build_tables,
    make_row,
    timing_stats,
)
from collectives.spec import busbw_factor

#: the columns DESIGN.md fixes ("names fixed once chosen; add, don't rename")
DESIGN_COLUMNS = [
    "run_id",
    "suite",
    "launch_id",
    "timestamp",
    "collective",
    "impl",
    "algorithm",
    "intra",
    "inter",
    "transport",
    "library",
    "library_version",
    "device",
    "nranks",
    "nnodes",
    "ranks_per_node",
    "virtual_nodes",
    "hosts",
    "dtype",
    "op",
    "count_per_rank",
    "bytes_per_rank",
    "bytes_total",
    "placement",
    "timing_mode",
    "warmup",
    "iters",
    "time_us_min",
    "time_us_p50",
    "time_us_mean",
    "time_us_p95",
    "time_us_p99",
    "time_us_max",
    "time_us_std",
    "algbw_gbps",
    "busbw_gbps",
    "n_wrong",
    "status",
    "error",
    "tool_version",
    "git_sha",
]


def test_columns_hold_the_design_contract():
    missing = [name for name in DESIGN_COLUMNS if name not in COLUMNS]
    assert not missing
    assert len(set(COLUMNS)) == len(COLUMNS), "duplicate column names"
    assert "cell_key" in COLUMNS and "schema_version" in COLUMNS


def test_statuses_are_the_design_ones():
    # DESIGN.md's six, plus "modelled" for rows an analytical model produced (issue 8)
    assert set(STATUSES) == {"ok", "wrong", "failed", "timeout", "skipped", "unsupported", "modelled"}


def test_samples_are_keyed_by_the_cell_columns():
    for name in ("run_id", "cell_key", "launch_id", "iteration", "time_us", *CELL_KEY):
        assert name in SAMPLE_COLUMNS


# ---------------------------------------------------------------- statistics


def test_timing_stats_on_known_samples():
    samples = [float(x) for x in range(1, 11)]  # 1..10 us
    stats = timing_stats(samples, bytes_total=11_000, collective="allgather", nranks=4)
    assert stats["time_us_min"] == 1.0
    assert stats["time_us_max"] == 10.0
    assert stats["time_us_p50"] == 5.5
    assert stats["time_us_mean"] == 5.5
    assert stats["time_us_p95"] == pytest.approx(9.55)
    assert stats["time_us_p99"] == pytest.approx(9.91)
    assert stats["time_us_std"] == pytest.approx(np.std(samples, ddof=1))
    # decimal GB/s from the median: 11000 B / 5.5 us = 2 GB/s
    assert stats["algbw_gbps"] == pytest.approx(2.0)
    assert stats["busbw_gbps"] == pytest.approx(2.0 * 3 / 4)


@pytest.mark.parametrize(("collective", "factor"), [("allgather", 0.5), ("reduce_scatter", 0.5), ("allreduce", 1.0)])
def test_busbw_uses_the_nccl_tests_factor(collective, factor):
    stats = timing_stats([4.0, 2.0, 3.0], bytes_total=6000, collective=collective, nranks=2)
    assert stats["time_us_p50"] == 3.0
    assert stats["algbw_gbps"] == pytest.approx(2.0)
    assert stats["busbw_gbps"] == pytest.approx(2.0 * factor)


def test_timing_stats_order_does_not_matter():
    rng = np.random.default_rng(1)
    samples = list(rng.uniform(1, 100, 37))
    shuffled = list(rng.permutation(samples))
    one = timing_stats(samples, 4096, "allreduce", 8)
    two = timing_stats(shuffled, 4096, "allreduce", 8)
    assert one == pytest.approx(two)
    assert one["time_us_min"] <= one["time_us_p50"] <= one["time_us_p95"] <= one["time_us_p99"] <= one["time_us_max"]


def test_timing_stats_single_sample():
    stats = timing_stats([7.0], 7000, "allreduce", 1)
    assert stats["time_us_min"] == stats["time_us_max"] == stats["time_us_p50"] == 7.0
    assert stats["time_us_std"] == 0.0
    assert stats["busbw_gbps"] == 0.0  # one rank moves nothing over a bus


def test_timing_stats_without_samples_is_all_nan():
    stats = timing_stats([], 1024, "allgather", 2)
    assert {name for name in COLUMNS if name.startswith("time_us_")} <= set(stats)
    assert all(np.isnan(value) for value in stats.values())


# ---------------------------------------------------------------- build_tables


def worker_rows() -> list[dict]:
    """Rows shaped as bench.rank.worker writes them (cell + placement facts + outcome)."""
    suite = parse_suite(
        {
            "name": "t",
            "collectives": ["allgather", "allreduce"],
            "implementations": ["mpi", "pccl-flat"],
            "ranks": [2, 4],
            "ranks_per_node": 2,
            "sizes": {"min": "64B", "max": "128B"},
        },
        "t.yaml",
    )
    rows = []
    for launch in expand(suite):
        for index, cell in enumerate(launch.cells):
            status = "ok" if index % 5 else "unsupported"
            samples = [10.0 + i + index for i in range(4)] if status == "ok" else []
            rows.append(
                {
                    **cell.to_dict(),
                    "hosts": "h1",
                    "mpi_thread_level": "single",
                    "oversubscribed": False,
                    "transport": "mpi",
                    "library": "MPICH",
                    "library_version": "5.0.2",
                    "warmup": 2,
                    "n_wrong": 0,
                    "error": "" if status == "ok" else "why not",
                    "status": status,
                    "iters": len(samples),
                    "samples_us": samples,
                    "timestamp": 1_700_000_000.0 + index,
                    "launch_id": launch.launch_id,
                }
            )
    return rows


IDENTITY = {"run_id": "t-1", "suite": "t", "tool_version": "0.1.0", "git_sha": "abc", "schema_version": 1}


def test_build_tables_shapes():
    rows = worker_rows()
    results, samples = build_tables(rows, IDENTITY)
    assert list(results.columns) == COLUMNS
    assert list(samples.columns) == SAMPLE_COLUMNS
    assert len(results) == len(rows)
    assert len(samples) == sum(len(row["samples_us"]) for row in rows)
    assert (results["run_id"] == "t-1").all() and (results["git_sha"] == "abc").all()
    assert str(results["timestamp"].dt.tz) == "UTC"
    assert results["timestamp"].iloc[0] == pd.Timestamp(1_700_000_000, unit="s", tz="UTC")
    ok = results[results["status"] == "ok"]
    assert (ok["time_us_p50"] > 0).all()
    assert results.loc[results["status"] == "unsupported", "time_us_p50"].isna().all()
    expected_busbw = ok["algbw_gbps"] * [
        busbw_factor(c, n) for c, n in zip(ok["collective"], ok["nranks"], strict=True)
    ]
    assert np.allclose(ok["busbw_gbps"], expected_busbw)
    # every sample row points at a result row with the same cell columns
    merged = samples.merge(results[["cell_key", *CELL_KEY]], on=["cell_key", *CELL_KEY], how="left", indicator=True)
    assert (merged["_merge"] == "both").all()
    per_cell = samples.groupby("cell_key")["iteration"].agg(list)
    for iterations in per_cell:
        assert iterations == list(range(len(iterations)))
    medians = samples.groupby("cell_key")["time_us"].median()
    assert np.allclose(ok.set_index("cell_key")["time_us_p50"], medians.loc[ok["cell_key"]])


def test_build_tables_of_no_rows():
    results, samples = build_tables([], IDENTITY)
    assert list(results.columns) == COLUMNS and results.empty
    assert list(samples.columns) == SAMPLE_COLUMNS and samples.empty


def test_write_run_round_trip(tmp_path: Path):
    results, samples = build_tables(worker_rows(), IDENTITY)
    meta = {"schema_version": 1, "run_id": "t-1", "when": time.time(), "path": tmp_path}
    table.write_run(tmp_path, results, samples, meta)
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "meta.json",
        "results.csv",
        "results.parquet",
        "samples.parquet",
    ]
    pd.testing.assert_frame_equal(pd.read_parquet(tmp_path / "results.parquet"), results)
    pd.testing.assert_frame_equal(pd.read_parquet(tmp_path / "samples.parquet"), samples)
    csv = pd.read_csv(tmp_path / "results.csv")
    assert list(csv.columns) == COLUMNS
    assert list(csv["cell_key"]) == list(results["cell_key"])
    assert np.allclose(csv["time_us_p50"], results["time_us_p50"], equal_nan=True)
    loaded = json.loads((tmp_path / "meta.json").read_text())
    assert loaded["run_id"] == "t-1" and loaded["path"] == str(tmp_path)


def test_written_files_follow_the_umask(tmp_path: Path):
    umask = os.umask(0o022)
    try:
        results, samples = build_tables(worker_rows(), IDENTITY)
        table.write_run(tmp_path, results, samples, {"run_id": "t-1"})
        for name in ("results.parquet", "results.csv", "samples.parquet", "meta.json"):
            mode = stat.S_IMODE((tmp_path / name).stat().st_mode)
            assert mode == 0o644, f"{name}: {oct(mode)}"
    finally:
        os.umask(umask)


# ---------------------------------------------------------------- atomic_write


def test_atomic_write_writes_and_leaves_no_temp_files(tmp_path: Path):
    target = tmp_path / "results.csv"
    atomic_write(target, lambda path: path.write_text("new\n"))
    assert target.read_text() == "new\n"
    assert [p.name for p in tmp_path.iterdir()] == ["results.csv"]


def test_atomic_write_replaces_an_existing_file(tmp_path: Path):
    target = tmp_path / "meta.json"
    target.write_text("old")
    atomic_write(target, lambda path: path.write_text("new"))
    assert target.read_text() == "new"
    assert [p.name for p in tmp_path.iterdir()] == ["meta.json"]


@pytest.mark.parametrize("error", [RuntimeError("disk full"), KeyboardInterrupt()])
def test_atomic_write_keeps_the_old_file_when_the_writer_raises(tmp_path: Path, error: BaseException):
    target = tmp_path / "results.parquet"
    target.write_text("old table")

    def half_then_fail(path: Path) -> None:
        path.write_text("half a tab")
        raise error

    with pytest.raises(type(error)):
        atomic_write(target, half_then_fail)
    assert target.read_text() == "old table"
    assert [p.name for p in tmp_path.iterdir()] == ["results.parquet"], "temp file left behind"


def test_atomic_write_of_a_new_file_that_fails_leaves_nothing(tmp_path: Path):
    def fail(path: Path) -> None:
        raise OSError("no")

    with pytest.raises(OSError):
        atomic_write(tmp_path / "x.parquet", fail)
    assert list(tmp_path.iterdir()) == []


# ---------------------------------------------------------------- read_parts


def write_part(folder: Path, name: str, rows: list[dict], tail: str = "") -> None:
    parts = folder / "parts"
    parts.mkdir(exist_ok=True)
    (parts / name).write_text("".join(json.dumps(row) + "\n" for row in rows) + tail)


def test_read_parts_tolerates_a_truncated_last_line(tmp_path: Path):
    rows = [{"cell_key": f"k{i}", "status": "ok", "value": i} for i in range(3)]
    cut = json.dumps({"cell_key": "k3", "status": "ok", "value": 3})[:17]
    write_part(tmp_path, "n2.jsonl", rows, tail=cut)
    assert read_parts(tmp_path) == rows


def test_read_parts_last_row_of_a_cell_wins_across_files(tmp_path: Path):
    write_part(
        tmp_path,
        "n2.jsonl",
        [
            {"cell_key": "a", "status": "failed"},
            {"cell_key": "b", "status": "ok"},
            {"cell_key": "a", "status": "ok"},
        ],
    )
    write_part(tmp_path, "n4.jsonl", [{"cell_key": "c", "status": "timeout"}, {"cell_key": "c", "status": "ok"}])
    got = {row["cell_key"]: row["status"] for row in read_parts(tmp_path)}
    assert got == {"a": "ok", "b": "ok", "c": "ok"}


def test_read_parts_of_an_empty_or_missing_folder(tmp_path: Path):
    assert read_parts(tmp_path) == []
    (tmp_path / "parts").mkdir()
    assert read_parts(tmp_path) == []
    (tmp_path / "parts" / "empty.jsonl").write_text("")
    assert read_parts(tmp_path) == []


def test_make_row_refuses_a_key_that_is_no_column():
    values = {"run_id": "r", "cell_key": "k", "collective": "allreduce", "impl": "mpi", "status": "ok", "nranks": 2,
              "bytes_total": 8, "samples_us": [1.0, 2.0]}
    assert make_row(values).time_us_p50 == 1.5
    with pytest.raises(ValueError, match="'nrank' is no column"):
        make_row({**values, "nrank": 2})  # misspelt: before, dropped without a word
