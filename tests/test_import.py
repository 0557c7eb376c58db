"""``pccl-bench import``: nccl-tests / rccl-tests / OSU outputs (tests/data) as pccl-bench tables."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from bench.cli import main
from bench.errors import BadInput
from bench.importers.rows import ImportOptions
from bench.importers.run import import_files, write_import
from bench.runset import load_runs
from bench.table import COLUMNS

DATA = Path(__file__).resolve().parent / "data"
NCCL = DATA / "nccl-tests"
OSU = DATA / "osu"


def parsed(kind: str, name: str, **options) -> pd.DataFrame:
    folder = NCCL if kind != "osu" else OSU
    results, _ = import_files(kind, [folder / name], ImportOptions(**options))
    return results


def file_columns(name: str) -> pd.DataFrame:
    """size, count, out-of-place time/busbw as printed, for cross-checks."""
    rows = [line.split() for line in (NCCL / name).read_text().splitlines()
            if line.strip() and not line.lstrip().startswith("#") and line.split()[0].isdigit()]
    return pd.DataFrame({"size": [int(r[0]) for r in rows], "count": [int(r[1]) for r in rows],
                         "time": [float(r[-8]) for r in rows], "busbw": [float(r[-6]) for r in rows]})


@pytest.mark.parametrize("name, collective, nranks", [("all_gather_perf.txt", "allgather", 8),
                                                      ("reduce_scatter_perf.txt", "reduce_scatter", 8),
                                                      ("all_reduce_perf.txt", "allreduce", 4)])
def test_nccl_tests_sizes_and_bandwidths(name, collective, nranks):
    results = parsed("nccl-tests", name)
    printed = file_columns(name)
    out = results[results.placement.eq("out_of_place")].reset_index(drop=True)
    assert list(results.columns) == COLUMNS
    assert set(results.collective) == {collective} and set(results.nranks) == {nranks}
    assert set(results.impl) == {"xccl"} and set(results.status) == {"ok"}
    assert set(results.library) == {"NCCL"} and set(results.library_version) == {"2.18.3"}
    # nccl-tests' size is the total buffer, its count is per rank
    assert list(out.bytes_total) == list(printed["size"])
    assert list(out.count_per_rank) == list(printed["count"])
    assert list(out.time_us_p50) == list(printed["time"])
    # the same formula, from the time as printed (two decimals) instead of the exact one
    assert ((out.busbw_gbps - printed["busbw"]).abs() <= 0.006 + 0.002 * printed["busbw"]).all()
    assert len(results) == 2 * len(printed)  # out-of-place and in-place
    assert set(results.iters) == {20} and set(results.warmup) == {5}


def test_nccl_tests_hosts_nodes_and_device():
    results = parsed("nccl-tests", "all_gather_perf.txt")
    assert set(results.nnodes) == {2} and set(results.ranks_per_node) == {4}
    assert set(results.hosts) == {"nid001,nid002"} and set(results.device) == {"cuda"}


def test_old_layout_without_root_column_and_half():
    results = parsed("nccl-tests", "old_all_reduce_perf.out")
    assert set(results.dtype) == {"float16"} and set(results.nranks) == {2}
    assert results.bytes_total.iloc[0] == 64 and results.count_per_rank.iloc[0] == 32


def test_rccl_version_and_device():
    results = parsed("rccl-tests", "rccl_all_gather_perf.txt")
    assert set(results.library) == {"RCCL"} and set(results.library_version) == {"2.18.3"}
    assert set(results.device) == {"rocm"} and set(results.nranks) == {8}


def test_wrong_data_is_status_wrong():
    results = parsed("nccl-tests", "all_gather_wrong.txt")
    wrong = results[results.status.eq("wrong")]
    assert len(wrong) == 1 and wrong.bytes_total.iloc[0] == 65536 and wrong.n_wrong.iloc[0] == 1


def test_nccl_tests_json():
    results = parsed("nccl-tests", "all_reduce_perf.json")
    assert len(results) == 6 and set(results.nranks) == {8} and set(results.library_version) == {"2.21.5"}
    assert sorted(set(results.bytes_total)) == [8, 65536, 16777216]


def test_osu_allgather_size_is_per_rank():
    results = parsed("osu", "osu_allgather_full.txt", nranks=4)
    first = results.iloc[0]
    assert first["collective"] == "allgather" and first["dtype"] == "char" and first["bytes_per_rank"] == 1
    assert first.bytes_total == 4  # nccl-tests size = OSU size * n
    assert first.time_us_p50 == 1.92 and first.time_us_min == 1.71 and first.time_us_max == 2.13
    assert first.iters == 1000 and first.impl == "osu-mpi"


def test_osu_allreduce_and_reduce_scatter_sizes_are_the_whole_vector():
    allreduce = parsed("osu", "osu_allreduce.txt", nranks=4, library="MPICH", library_version="4.2.1")
    assert allreduce.bytes_total.iloc[0] == 4 and allreduce.count_per_rank.iloc[0] == 1
    assert set(allreduce.impl) == {"osu-mpich"} and set(allreduce.library_version) == {"4.2.1"}
    scatter = parsed("osu", "osu_reduce_scatter.txt", nranks=4)
    assert scatter.bytes_total.iloc[0] == 16  # 4 and 8 B cannot be split over 4 ranks: skipped
    assert scatter.count_per_rank.iloc[0] == 1 and len(scatter) == 17


def test_osu_xccl_validation():
    results = parsed("osu", "osu_xccl_allreduce.txt", nranks=8)
    assert set(results.library) == {"NCCL"} and set(results.device) == {"cuda"}
    assert list(results.status) == ["ok", "ok", "ok", "wrong"]


def test_import_cli_writes_a_run_that_plots_and_gates_read(tmp_path, capsys):
    out = tmp_path / "nccl"
    with pytest.raises(SystemExit) as done:
        main(["import", "nccl-tests", str(NCCL / "all_gather_perf.txt"), str(NCCL / "all_reduce_perf.txt"),
              "--out", str(out)])
    assert done.value.code == 0
    runs = load_runs([out])
    assert len(runs.results) == 48 and runs.samples.empty
    assert runs.metas[0]["imported_from"][0]["tool_version"] == "nccl-tests 2.13.8"


@pytest.mark.parametrize("argv, message", [
    (["osu", str(OSU / "osu_allreduce.txt")], "--nranks"),
    (["nccl-tests", str(DATA / "osu" / "osu_allreduce.txt")], "collective"),
    (["nccl-tests", str(NCCL / "nothing.txt")], "cannot read"),
    (["iperf", str(OSU / "osu_allreduce.txt")], "unknown tool"),
])
def test_bad_import_input(tmp_path, capsys, argv, message):
    with pytest.raises(SystemExit) as done:
        main(["import", *argv, "--out", str(tmp_path / "x")])
    err = capsys.readouterr().err
    assert done.value.code == 2 and message in err and len(err.strip().splitlines()) == 1


def test_write_import_refuses_to_overwrite(tmp_path):
    results, meta = import_files("osu", [OSU / "osu_allreduce.txt"], ImportOptions(nranks=2))
    write_import(tmp_path, results, meta)
    with pytest.raises(BadInput, match="already holds a run"):
        write_import(tmp_path, results, meta)
