"""``pccl-bench import pccl-reproducer``: real excerpts of the PCCL authors' Slurm logs (tests/data/pccl-reproducer)."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import DATA

from bench.cli import main
from bench.importers import tools
from bench.importers.import_run import import_to_folder
from bench.importers.imported_row import ImportOptions
from bench.importers.pccl_reproducer import import_reproducer, parse_log
from bench.results.read import read_results

LOGS = DATA / "pccl-reproducer"
FRONTIER_AG = LOGS / "frontier_all_gather_2_slurm-2985168_head.out"
FRONTIER_AG_64 = LOGS / "frontier_all_gather_slurm-2981673_head.out"
FRONTIER_RS = LOGS / "frontier_fr_reduce_scatter_slurm-2990832_head.out"
PERLMUTTER_AG = LOGS / "perlmutter_pm_all_gather_2_nccl_nccl_4_head.out"


def run_cli(capsys, *args: object) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as exit_info:
        main([str(arg) for arg in args])
    captured = capsys.readouterr()
    return exit_info.value.code, captured.out, captured.err


def test_frontier_all_gather_log_rows() -> None:
    results, meta, samples = import_reproducer([FRONTIER_AG])
    assert meta["machine"]["name"] == "frontier" and samples.empty
    # "output size = 1 MB" ... "Method = nccl" ... "time = 0.158 ms"
    first = results[(results["impl"] == "xccl") & (results["bytes_total"] == 1 << 20)].iloc[0]
    assert first["time_us_p50"] == pytest.approx(158.0) and first["library"] == "RCCL"
    assert (first["nranks"], first["nnodes"], first["ranks_per_node"]) == (8, 1, 8)  # srun -N 1 -n 8
    assert first["device"] == "rocm" and first["dtype"] == "bfloat16" and first["count_per_rank"] == (1 << 20) // 16
    assert set(results["impl"]) == {"xccl", "mpi", "pccl-hier"}
    hier = results[results["impl"] == "pccl-hier"].iloc[0]
    assert (hier["intra"], hier["inter"]) == ("xccl", "mpi") and "Cray MPICH (inter)" in hier["library"]
    assert set(results[results["impl"] == "mpi"]["library"]) == {"Cray MPICH"}
    # 2 complete sizes x 3 methods; the cut-off third size has no time line
    assert len(results) == 6 and results["status"].eq("ok").all()


def test_nodes_from_srun_line_and_straggler_kept() -> None:
    results, _, _ = import_reproducer([FRONTIER_AG_64])
    assert set(results["nnodes"]) == {8} and set(results["ranks_per_node"]) == {8}  # srun -N 8 -n 64
    # the 241.867 ms straggler at 4 MB is imported as measured; the fit, not the importer, copes with it
    assert results["time_us_p50"].max() == pytest.approx(241867.0)


def test_reduce_scatter_sizes_are_the_announced_input() -> None:
    results, _, _ = import_reproducer([FRONTIER_RS])
    assert set(results["collective"]) == {"reduce_scatter"}
    row = results[results["impl"] == "xccl"].iloc[0]
    # "input size = 1 MB" is the whole input; the log's "output size 0.131 MB" is the per-rank output
    assert row["bytes_total"] == 1 << 20 and row["bytes_per_rank"] == (1 << 20) // 8
    hier = results[results["impl"] == "pccl-hier"].iloc[0]
    assert (hier["intra"], hier["inter"]) == ("xccl", "rd")


def test_perlmutter_methods_and_node_shape() -> None:
    results, meta, _ = import_reproducer([PERLMUTTER_AG])
    assert meta["machine"]["name"] == "perlmutter"
    assert set(results["nnodes"]) == {4} and set(results["ranks_per_node"]) == {4}
    labels = {(r.impl, r.inter) for r in results.itertuples()}
    assert labels == {("mpi", ""), ("xccl", ""), ("pccl-hier", "mpi"), ("pccl-hier", "xccl")}
    assert set(results[results["impl"] == "xccl"]["library"]) == {"NCCL"}


def test_each_job_is_a_repeat(tmp_path: Path) -> None:
    copy = tmp_path / "again.out"
    copy.write_text(FRONTIER_AG.read_text())
    results, _, _ = import_reproducer([FRONTIER_AG, copy])
    assert sorted(set(results["repeat"])) == [0, 1] and results["cell_key"].is_unique
    assert set(results["launch_id"]) == {str(FRONTIER_AG), str(copy)}


def test_shared_csv_layout(tmp_path: Path) -> None:
    csv = tmp_path / "measured.csv"
    csv.write_text("machine,dir,file,collective,method,gpus,busbw_gbps,size_mb_printed,buffer_mb,time_ms\n"
                   "perlmutter,pm_all_gather,slurm-1.out,all-gather,hybrid,16,3.0,1.049,1.0,0.3\n"
                   "perlmutter,pm_all_gather,slurm-2.out,all-gather,hybrid,16,3.0,1.049,1.0,0.5\n"
                   "frontier,fr_reduce_scatter,slurm-3.out,reduce-scatter,mpi,64,1.0,0.016,1.0,2.0\n")
    results, _, _ = import_reproducer([csv], machine="perlmutter")
    assert len(results) == 2 and sorted(results["repeat"]) == [0, 1]
    assert set(results["ranks_per_node"]) == {4} and set(results["nnodes"]) == {4}  # Perlmutter: 4 GPUs per node
    only, _, _ = import_reproducer([csv], machine="frontier", dirs=["fr_reduce_scatter"])
    assert only.iloc[0]["collective"] == "reduce_scatter" and only.iloc[0]["impl"] == "mpi"


def test_cli_writes_a_run_and_bad_files_exit_2(tmp_path: Path, capsys) -> None:
    code, out, _ = run_cli(capsys, "import", "pccl-reproducer", FRONTIER_AG, "--out", tmp_path / "run")
    assert code == 0 and "6 cells" in out
    assert len(read_results([tmp_path / "run"])) == 6
    empty = tmp_path / "empty.out"
    empty.write_text("srun -N 1 -n 8 -c7 python -u benchmark_all_gather.py\nnothing measured\n")
    code, _, err = run_cli(capsys, "import", "pccl-reproducer", empty, "--out", tmp_path / "bad")
    assert code == 2 and str(empty) in err and "bus bw" in err and "Traceback" not in err
    both = tmp_path / "both.csv"
    both.write_text("machine,dir,file,collective,method,gpus,busbw_gbps,size_mb_printed,buffer_mb,time_ms\n"
                    "perlmutter,d,f,all-gather,nccl,16,3.0,1.049,1.0,0.3\n"
                    "frontier,d,f,all-gather,nccl,16,3.0,1.049,1.0,0.3\n")
    code, _, err = run_cli(capsys, "import", "pccl-reproducer", both, "--out", tmp_path / "bad2")
    assert code == 2 and "--machine" in err


@pytest.mark.parametrize("first", ["--auto", None])
def test_auto_says_a_reproducer_file_was_read_as_one(tmp_path: Path, capsys, first) -> None:
    """docs/INPUTS.md: under --auto stderr names each file's importer; for pccl-reproducer files it said nothing."""
    csv = tmp_path / "measured.csv"
    csv.write_text("machine,dir,file,collective,method,gpus,busbw_gbps,size_mb_printed,buffer_mb,time_ms\n"
                   "frontier,fr_all_gather,slurm-1.out,all-gather,nccl,8,3.0,1.049,1.0,0.3\n")
    inputs = [FRONTIER_AG, FRONTIER_AG_64, csv]
    code, out, err = run_cli(capsys, "import", *([first] if first else []), *inputs, "--out", tmp_path / "run")
    assert code == 0 and "cells (frontier" in out
    for path, what in zip(inputs, ("a pccl-reproducer Slurm log", "a pccl-reproducer Slurm log",
                                   "the pccl-reproducer CSV"), strict=True):
        assert f"{path}: read as pccl-reproducer: {what} (line " in err, err
    code, _, err = run_cli(capsys, "import", "pccl-reproducer", FRONTIER_AG, "--out", tmp_path / "named")
    assert code == 0 and "read as" not in err  # a named tool is not said again


def test_time_without_method_is_a_problem() -> None:
    rows, problems = parse_log("output size = 1 MB\nAll-gather bus bw for 8 GPUs is 1.0 GBPS for message output "
                               "size 1.049 MB\ntime = 1.0 ms\n", "x.out", "frontier")
    assert not rows and problems and "line 3" in problems[0]


def test_mpi_reduce_scatter_states_the_reproducers_algorithm() -> None:
    """The reproducer's ``mpi`` reduce-scatter is its own recursive halving (partner XOR 1, 2, 4 ...):
    the rows say so (rh-dd), and the model runs that schedule rather than choosing one."""
    results, _, _ = import_reproducer([FRONTIER_RS])
    mpi = results[results["impl"] == "mpi"]
    assert len(mpi) and set(mpi["resolved_algorithm"]) == {"rh-dd"} and set(mpi["algorithm"]) == {"native"}
    ag, _, _ = import_reproducer([FRONTIER_AG])
    assert set(ag[ag["impl"] == "mpi"]["resolved_algorithm"]) == {"native"}  # MPI_Allgather: MPICH's choice


def test_the_reproducer_is_a_registered_importer_written_by_the_one_writer(tmp_path: Path) -> None:
    assert "pccl-reproducer" in tools()
    meta, counts = import_to_folder("pccl-reproducer", [FRONTIER_RS], ImportOptions(extra={"machine": "frontier"}),
                                    tmp_path / "run")
    direct, _, _ = import_reproducer([FRONTIER_RS], "frontier")
    table = read_results([tmp_path / "run"])
    assert counts.cells == len(table) == len(direct) and meta["machine"]["name"] == "frontier"
    same = ["cell_key", "collective", "impl", "nranks", "nnodes", "planned_nnodes", "planned_hosts_digest",
            "bytes_total", "time_us_p50", "status"]
    assert table[same].equals(direct[same].astype(table[same].dtypes.to_dict()))
