"""Issue 47: every format and generation the importers read, on a corpus of our own making
(tests/data/corpus, written from the tools' output code: NVIDIA/nccl-tests src/common.cu, ROCm/rccl-tests
src/common.cu, OMB c/util/osu_util_mpi.c, intel/mpi-benchmarks src_c/IMB_output.c, the PCCL reproducer's
benchmark_raw_collectives/*.py), each value checked; then hypothesis mutations of each (prefixes, blank
lines, CRLF, truncation): the same values, or a one-line refusal naming the line."""

from __future__ import annotations

import itertools
import math
import re
from pathlib import Path

import pandas as pd
import pytest
from conftest import DATA
from hostile import assert_bad_input, run_in_process
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bench.importers.frontend import clean, split_runs
from bench.importers.import_run import import_files
from bench.importers.imported_row import ImportOptions

CORPUS = DATA / "corpus"
REPRO = CORPUS / "pccl-reproducer"


def table(name: str | Path, **options) -> tuple[pd.DataFrame, dict]:
    results, meta, _ = import_files(None, [CORPUS / name], ImportOptions(**options))
    return results, meta


def cells(results: pd.DataFrame, placement: str = "out_of_place") -> pd.DataFrame:
    return results[results.placement == placement].reset_index(drop=True)


def nan_or(values: pd.Series) -> list:
    return [None if value is None or (isinstance(value, float) and math.isnan(value)) else value for value in values]


# -- nccl-tests / rccl-tests ------------------------------------------------------------------------


def test_nccl_current_generation_behind_tag_output():
    """2.13+ header (redop, root, #wrong), 'Group' rank lines on two hosts, '[1,0]<stdout>:' prefixes,
    the NCCL version from its INFO line."""
    results, meta = table("nccl_2.19_all_reduce_tagged.log")
    assert len(results) == 10 and set(results.collective) == {"allreduce"} and set(results.op) == {"sum"}
    assert set(results.nranks) == {4} and set(results.nnodes) == {2} and set(results.hosts) == {"gpu-a1,gpu-a2"}
    assert set(results.library) == {"NCCL"} and set(results.library_version) == {"2.19.3"}
    assert set(results.tool_version) == {"nccl-tests 2.13.9"} and set(results.dtype) == {"float32"}
    out, inplace = cells(results), cells(results, "in_place")
    assert out.count_per_rank.tolist() == [2, 4, 8, 16, 32] and (out.bytes_total == out.count_per_rank * 4).all()
    assert out.time_us_mean.tolist() == [20.0, 20.0, 16.0, 16.0, 16.0]
    assert inplace.time_us_mean.tolist() == [19.5, 20.1, 16.0, 16.0, 16.0]
    assert out.busbw_gbps.tolist() == [0.0, 0.0, 0.0, 0.01, 0.01]  # as printed
    assert out.algbw_gbps.tolist() == [0.0, 0.0, 0.0, 0.0, 0.01]
    assert set(results.status) == {"ok"} and set(results.n_wrong) == {0}
    assert "bandwidth_check" not in meta["imported_from"][0]


def test_nccl_old_generation_without_redop_root_and_its_error_column():
    """Before 2.13: '#   Rank N Pid' lines (no Group), no redop/root for all_gather, a float 'error'
    per placement: 0 is 0 wrong; 2e-06 is within nccl-tests' tolerance (float 1e-5 x (2-1)), an unknown
    count (not 0), ok; 3e-02 is above it: wrong, count unknown. The printed busbw 0.30 (0.10 from its
    time) is kept and flagged."""
    results, meta = table("nccl_2.11_all_gather_old.txt")
    assert set(results.collective) == {"allgather"} and set(results.op) == {"none"}  # was "sum"
    assert set(results.nranks) == {2} and set(results.nnodes) == {1} and set(results.hosts) == {"dgx01"}
    out, inplace = cells(results), cells(results, "in_place")
    assert out.count_per_rank.tolist() == [128, 256, 512] and (out.bytes_total == out.count_per_rank * 8).all()
    assert out.time_us_mean.tolist() == [10.24, 12.8, 20.48] and inplace.time_us_mean.tolist() == [10.0, 12.0, 20.0]
    assert out.busbw_gbps.tolist() == [0.05, 0.08, 0.30] and inplace.busbw_gbps.tolist() == [0.05, 0.09, 0.10]
    assert out.n_wrong.tolist() == [0, 0, 0] and nan_or(inplace.n_wrong) == [0, None, None]
    assert inplace.status.tolist() == ["ok", "ok", "wrong"]
    assert inplace.error.tolist() == ["", "nccl-tests error 2e-06 within its tolerance 1e-05",
                                      "nccl-tests error 3e-02 above its tolerance 1e-05"]
    check = meta["imported_from"][0]["bandwidth_check"]
    assert check.startswith("1 cells'") and "line 13: busbw printed 0.3 GB/s, 0.1 from its time 20.48 us" in check


def test_old_generation_pasted_without_its_header(tmp_path):
    """The same old table pasted without any '#' line: its columns from each line's shape (no redop, no
    root, the error columns), nranks from size / (count x type size); was 'redop: ... not a reduction op'."""
    path = tmp_path / "paste.txt"
    path.write_text("".join(line + "\n" for line in (CORPUS / "nccl_2.11_all_gather_old.txt").read_text().splitlines()
                            if not line.startswith("#")))
    expected, _ = table("nccl_2.11_all_gather_old.txt")
    columns = ["collective", "op", "count_per_rank", "placement", "time_us_mean", "busbw_gbps", "status", "nranks"]
    # --auto: no header, but rows in nccl-tests' shape tell the tool (all_gather: no redop column in that format)
    for kind in (None, "nccl-tests"):
        results, _, _ = import_files(kind, [path], ImportOptions())
        assert results[columns].equals(expected[columns])


def test_rccl_multi_node_without_group_and_its_version_block():
    """rccl-tests: '#   Rank N Pid ... on host' without Group under srun --label; 2 nodes from the
    hosts; 'RCCL version : 2.20.5-HEAD' and 'rccl-tests: Version develop:...'."""
    results, _ = table("rccl_2node_all_reduce.txt")
    assert set(results.nranks) == {4} and set(results.nnodes) == {2}
    assert set(results.hosts) == {"frontier00001,frontier00002"} and set(results.ranks_per_node) == {2}
    assert set(results.library) == {"RCCL"} and set(results.library_version) == {"2.20.5"}
    assert set(results.device) == {"rocm"} and set(results.tool_version) == {"rccl-tests develop:4d8e1f2"}
    out, inplace = cells(results), cells(results, "in_place")
    assert out.count_per_rank.tolist() == [262144, 524288, 1048576]
    assert out.time_us_mean.tolist() == [100.0, 200.0, 400.0] and inplace.time_us_mean.tolist() == [104.9, 209.7, 419.4]
    assert out.busbw_gbps.tolist() == [15.73] * 3 and inplace.busbw_gbps.tolist() == [15.0] * 3


@pytest.mark.parametrize("program, collective, total", [
    ("broadcast_perf", "broadcast", 1), ("reduce_perf", "reduce", 1), ("alltoall_perf", "alltoall", 4),
    ("sendrecv_perf", "sendrecv", 1)])
def test_nccl_tests_other_collectives_keep_their_names(tmp_path, program, collective, total):
    """broadcast/reduce/alltoall/sendrecv rows under their own names, bytes and busbw by nccl-tests' formulas
    (broadcast, reduce, sendrecv: busbw = algbw; alltoall (n-1)/n), op none where the test reduces nothing."""
    op = "sum" if collective == "reduce" else "none"
    size = 1024 * total
    path = tmp_path / f"{program}.log"
    path.write_text(f"# Collective test starting: {program}\n"
                    "#  Rank  0 Group  0 Pid 1 on h1 device  0 [0x01] GPU\n"
                    "#  Rank  1 Group  0 Pid 2 on h1 device  1 [0x02] GPU\n"
                    "#  Rank  2 Group  0 Pid 3 on h2 device  0 [0x01] GPU\n"
                    "#  Rank  3 Group  0 Pid 4 on h2 device  1 [0x02] GPU\n"
                    "#       size         count      type   redop    root     time   algbw   busbw #wrong     time   "
                    "algbw   busbw #wrong\n"
                    f"{size:>12}           256     float  {op:>6}       0    10.24    0.10    0.10      0    10.24"
                    "    0.10    0.10      0\n")
    results, _, _ = import_files(None, [path], ImportOptions())
    assert set(results.collective) == {collective} and set(results.op) == {op}
    assert set(results.bytes_total) == {size} and set(results.count_per_rank) == {256}
    algbw = size / 10.24 / 1e3
    assert results.algbw_gbps.tolist() == [0.10, 0.10]  # as printed
    factor = 0.75 if collective == "alltoall" else 1.0
    assert abs(0.10 - algbw * factor) < 0.006 or collective == "alltoall"


# -- OSU ------------------------------------------------------------------------------------------


def test_osu_bcast_full_stats_ranks_from_the_launcher():
    results, meta = table("osu_7.4_bcast_full.txt")
    assert set(results.collective) == {"broadcast"} and set(results.nranks) == {8} and set(results.op) == {"none"}
    assert results.count_per_rank.tolist() == [1, 2, 4, 8, 16, 32, 64]
    assert (results.bytes_total == results.count_per_rank).all() and set(results.dtype) == {"char"}
    assert results.time_us_mean.tolist() == [2.5, 2.52, 2.55, 2.6, 2.71, 2.9, 3.2]
    assert results.time_us_min.tolist() == [1.2, 1.21, 1.25, 1.3, 1.41, 1.55, 1.8]
    assert results.time_us_max.tolist() == [3.8, 3.81, 3.9, 3.95, 4.02, 4.31, 4.75]
    assert set(results.iters) == {1000} and set(results.tool_version) == {"osu 7.4"}
    assert (results.busbw_gbps == results.algbw_gbps).all()  # broadcast: busbw = algbw
    assert "nranks=8 from the launcher, line 1" in "; ".join(meta["imported_from"][0]["inferred"])


def test_osu_point_to_point_latency_behind_timestamps():
    results, _ = table("osu_7.2_latency_cuda.txt")
    assert set(results.collective) == {"p2p_latency"} and set(results.nranks) == {2} and set(results.device) == {"cuda"}
    assert results.count_per_rank.tolist() == [1, 2, 4, 8, 16]
    assert results.time_us_mean.tolist() == [15.21, 15.3, 15.32, 15.4, 15.55]
    assert results.busbw_gbps.isna().all()  # no bus bandwidth is defined for a message


@pytest.mark.parametrize("name, collective, messages, rates", [
    ("osu_5.6_bw.txt", "p2p_bw", 1, [2.5, 5.0, 10.0, 2048.0, 10000.0]),
    ("osu_7.4_bibw_crlf.txt", "p2p_bibw", 2, [4.0, 32.0, 20000.0])])
def test_osu_bandwidth_tests(name, collective, messages, rates):
    """MB/s as printed (algbw = MB/s / 1000); the time per message it implies."""
    results, _ = table(name)
    assert set(results.collective) == {collective} and set(results.nranks) == {2}
    assert results.algbw_gbps.tolist() == pytest.approx([rate / 1e3 for rate in rates])
    assert results.time_us_mean.tolist() == pytest.approx(
        [messages * size / rate for size, rate in zip(results.count_per_rank, rates, strict=True)])
    assert results.busbw_gbps.isna().all()


def test_osu_reduce_behind_rank_tags():
    results, _ = table("osu_7.4_reduce_ranktag.txt", nranks=4)
    assert set(results.collective) == {"reduce"} and set(results.op) == {"sum"} and set(results.dtype) == {"float32"}
    assert results.count_per_rank.tolist() == [1, 2, 4, 256]
    assert results.time_us_mean.tolist() == [1.1, 1.15, 1.22, 3.4]


def test_osu_xccl_alltoall_with_validation():
    results, _ = table("osu_7.4_alltoall_xccl.txt", nranks=8)
    assert set(results.collective) == {"alltoall"} and set(results.library) == {"NCCL"}
    assert set(results.device) == {"cuda"} and results.count_per_rank.tolist() == [1, 1024, 65536]
    assert (results.bytes_total == results.count_per_rank * 8).all()
    assert results.time_us_mean.tolist() == [30.1, 31.5, 80.25] and results.time_us_max.tolist() == [30.4, 32.0, 81.0]
    assert results.busbw_gbps.tolist() == pytest.approx((results.algbw_gbps * 7 / 8).tolist())
    assert set(results.status) == {"ok"}


def test_osu_two_runs_in_one_file_each_its_own():
    results, meta = table("osu_5.6_two_runs.txt")
    assert results.run_id.nunique() == 2 and [entry["run"] for entry in meta["imported_from"]] == ["lines 1-7",
                                                                                                 "lines 8-14"]
    allreduce, allgather = results[results.collective == "allreduce"], results[results.collective == "allgather"]
    assert allreduce.count_per_rank.tolist() == [1, 2, 4] and set(allreduce.dtype) == {"float32"}  # OMB 5: MPI_FLOAT
    assert allreduce.time_us_mean.tolist() == [2.0, 2.1, 2.2]
    assert allgather.count_per_rank.tolist() == [1, 2, 4] and set(allgather.dtype) == {"char"}
    assert allgather.time_us_mean.tolist() == [1.5, 1.6, 1.7] and set(results.nranks) == {4}


# -- IMB ------------------------------------------------------------------------------------------


def test_imb_mpi1_every_block_its_process_count():
    results, meta = table("imb_2021.3_mpi1.txt")
    assert set(results.tool_version) == {"IMB 2021.3"} and results.run_id.nunique() == 1

    def block(collective: str, nranks: int, algorithm: str = "native") -> pd.DataFrame:
        rows = results[(results.collective == collective) & (results.nranks == nranks)
                       & (results.algorithm == algorithm)]
        return rows.reset_index(drop=True)

    pingpong = block("pingpong", 2)
    assert pingpong.count_per_rank.tolist() == [0, 4, 8] and pingpong.time_us_mean.tolist() == [0.21, 0.23, 0.24]
    assert set(pingpong.dtype) == {"uint8"} and pingpong.busbw_gbps.isna().all()
    two, four = block("allreduce", 2), block("allreduce", 4)
    assert two.count_per_rank.tolist() == [0, 1, 2] and set(two.dtype) == {"float32"} and set(two.op) == {"sum"}
    assert two.time_us_mean.tolist() == [0.03, 0.85, 0.87] and two.time_us_min.tolist() == [0.03, 0.8, 0.82]
    assert two.time_us_max.tolist() == [0.04, 0.9, 0.92] and set(two.iters) == {1000}
    assert four.time_us_mean.tolist() == [0.04, 1.6, 1.62]
    scatter = block("reduce_scatter", 4)  # #bytes is the whole vector: 4 B on 4 ranks is uneven, skipped
    assert scatter.count_per_rank.tolist() == [0, 1] and scatter.time_us_mean.tolist() == [0.11, 2.3]
    blocked = block("reduce_scatter", 4, "native:Reduce_scatter_block")  # #bytes is each rank's part
    assert blocked.count_per_rank.tolist() == [0, 1, 2] and blocked.time_us_mean.tolist() == [0.05, 1.9, 1.95]
    allgather = block("allgather", 4)
    assert allgather.count_per_rank.tolist() == [0, 4, 8]
    assert (allgather.bytes_total == allgather.count_per_rank * 4).all()
    assert allgather.time_us_mean.tolist() == [0.04, 1.3, 1.35] and set(allgather.op) == {"none"}
    assert block("broadcast", 4).time_us_mean.tolist() == [0.03, 1.0, 1.02]
    barrier = block("barrier", 4)
    assert barrier.count_per_rank.tolist() == [0] and barrier.time_us_mean.tolist() == [1.2]
    assert barrier.time_us_min.tolist() == [1.1] and barrier.time_us_max.tolist() == [1.3]
    assert len(results) == 3 + 3 + 3 + 2 + 3 + 3 + 3 + 1
    assert "Uniband: prints rates only" in meta["imported_from"][0]["skipped"]


def test_imb_3_2_with_check_defects():
    results, _ = table("imb_3.2.4_allreduce_check.txt")
    assert set(results.tool_version) == {"IMB 3.2.4"} and set(results.nranks) == {8}
    assert results.count_per_rank.tolist() == [0, 1, 2] and results.time_us_mean.tolist() == [0.05, 3.3, 3.4]
    assert results.status.tolist() == ["ok", "ok", "wrong"] and nan_or(results.n_wrong) == [0, 0, None]
    assert results.error.tolist() == ["", "", "IMB -check defects 1.00"]


# -- pccl-reproducer (issue 46) ---------------------------------------------------------------------


def test_reproducer_current_log_time_library():
    results, meta = table(REPRO / "perlmutter_all_gather_current.out")
    assert meta["machine"]["name"] == "perlmutter"
    assert set(results.impl) == {"pccl-hier"} and set(results.inter) == {"mpi"} and set(results.intra) == {"xccl"}
    assert results.bytes_total.tolist() == [1 << 20, 2 << 20, 4 << 20] and set(results.dtype) == {"bfloat16"}
    assert results.time_us_mean.tolist() == [450.0, 620.0, 980.0]
    assert set(results.nranks) == {8} and set(results.nnodes) == {2}


def test_reproducer_current_csv():
    results, meta = table(REPRO / "data" / "all_gather" / "perlmutter" / "gpus_8_slurm_4242.csv")
    assert meta["machine"]["name"] == "perlmutter" and set(results.impl) == {"xccl"}
    assert results.time_us_mean.tolist() == [312.5, 500.0, 875.0] and set(results.nranks) == {8}
    scatter, meta = table(REPRO / "data" / "reduce_scatter" / "frontier" / "gpus_16_slurm_777.csv")
    assert meta["machine"]["name"] == "frontier" and set(scatter.impl) == {"mpi"}
    assert set(scatter.dtype) == {"float32"} and scatter.count_per_rank.tolist() == [(1 << 20) // 64, (2 << 20) // 64]
    assert scatter.time_us_mean.tolist() == [1250.0, 2500.0]


# -- the front end --------------------------------------------------------------------------------


@pytest.mark.parametrize("line, cleaned", [
    ("[1,0]<stdout>:# nThread 1", "# nThread 1"), ("[0] # OSU MPI", "# OSU MPI"), ("  0: 8 2 float", "8 2 float"),
    ("2024-01-02T03:04:05.123Z # Size", "# Size"), ("[10:00:01] 1  2.0", "1  2.0"),
    ("user@host:~/omb$ srun -n 2", "srun -n 2"),
    ("$ mpirun -np 4", "mpirun -np 4"), ("[2024-03-01 10:00:00] [1,3]<stderr>: x", "x"),
    ("[user@login2 ~]$ mpirun -np 2 ./osu_bw", "mpirun -np 2 ./osu_bw"),
    ("[Mon Jan  1 10:00:00 2024][1,0]<stdout>:# OSU MPI", "# OSU MPI"),
    ("        1024           128   float", "        1024           128   float"), ("# Size", "# Size")])
def test_prefixes_stripped(line, cleaned):
    assert clean(line) == cleaned


def test_a_log_starting_with_a_bracket_is_not_json(tmp_path):
    path = tmp_path / "job.out"
    path.write_text("".join(f"[1,0]<stdout>:{line}\n" for line in
                            (CORPUS / "osu_7.4_bcast_full.txt").read_text().splitlines()))
    runs = split_runs(path)
    assert [run.format for run in runs] == ["OSU micro-benchmarks output"]


def test_auto_says_which_importer(tmp_path):
    code, stdout, stderr = run_in_process("import", str(CORPUS / "imb_3.2.4_allreduce_check.txt"),
                                          str(CORPUS / "rccl_2node_all_reduce.txt"), "--out", tmp_path / "out")
    assert code == 0, stderr
    assert "imb_3.2.4_allreduce_check.txt lines 1-19: read as imb: an IMB" in stderr
    assert "rccl_2node_all_reduce.txt lines 1-20: read as rccl-tests" in stderr
    assert stdout.startswith("9 cells (allreduce on 4 ranks, allreduce on 8 ranks)")


def test_report_plot_and_gate_take_collectives_the_sweep_does_not_run(tmp_path):
    """Point-to-point, barrier, broadcast and IMB rows beside all-gathers: report and plot show them
    (zero-byte calls off the size axis), the gate judges what it can (no traceback)."""
    out = tmp_path / "run"
    code, _, stderr = run_in_process("import", *(CORPUS / name for name in (
        "imb_2021.3_mpi1.txt", "osu_5.6_bw.txt", "osu_7.4_bcast_full.txt", "nccl_2.11_all_gather_old.txt")),
        "--out", out)
    assert code == 0, stderr
    code, stdout, stderr = run_in_process("report", out)
    assert code == 0 and "Traceback" not in stderr, stderr
    code, stdout, stderr = run_in_process("plot", out, "--out", tmp_path / "plots")
    assert code == 0 and "Traceback" not in stderr, stderr
    assert any(path.name.startswith("p2p_bw") for path in (tmp_path / "plots").iterdir())
    code, stdout, stderr = run_in_process("gate", out, out)
    assert code == 1 and "Traceback" not in stdout + stderr  # imported cells have no samples: insufficient


def test_a_run_that_stopped_before_its_table_is_skipped_and_said(tmp_path):
    """A job that crashed in its first run and was run again: the second run's rows, the first named."""
    text = (CORPUS / "nccl_2.19_all_reduce_tagged.log").read_text().splitlines()
    path = tmp_path / "slurm.out"
    path.write_text("\n".join([*text[:10], "srun: error: gpu-a1: task 0: Killed", *text]) + "\n")
    code, stdout, stderr = run_in_process("import", path, "--out", tmp_path / "out")
    assert code == 0, stderr
    assert "lines 1-11: skipped, " in stderr and "no nccl-tests result lines" in stderr
    assert stdout.startswith("10 cells (allreduce on 4 ranks)")
    alone = tmp_path / "alone.out"
    alone.write_text("\n".join(text[:10]) + "\n")  # the only run has no table: refused
    assert_bad_input(run_in_process("import", alone, "--out", tmp_path / "out2"), str(alone), "no nccl-tests result")


def test_side_by_side_logs_are_refused_naming_the_line(tmp_path):
    left = (CORPUS / "osu_5.6_bw.txt").read_text().splitlines()
    path = tmp_path / "paste.txt"
    path.write_text("\n".join(f"{line:<40}{line}" for line in left) + "\n")
    assert_bad_input(run_in_process("import", path, "--out", tmp_path / "out"), f"{path}:1", "side by side")
    assert not (tmp_path / "out").exists()


def test_unknown_format_under_auto_is_one_line(tmp_path):
    path = tmp_path / "notes.txt"
    path.write_text("hello\n[0] world\n")
    assert_bad_input(run_in_process("import", "--auto", path, "--out", tmp_path / "out"), str(path),
                     "no importer recognises it")


# -- hypothesis mutations -------------------------------------------------------------------------

#: (file, options) of every text format above
TEXTS = [("nccl_2.19_all_reduce_tagged.log", {}), ("nccl_2.11_all_gather_old.txt", {}),
         ("rccl_2node_all_reduce.txt", {}), ("osu_7.4_bcast_full.txt", {}), ("osu_7.2_latency_cuda.txt", {}),
         ("osu_5.6_bw.txt", {}), ("osu_7.4_bibw_crlf.txt", {}), ("osu_7.4_reduce_ranktag.txt", {"nranks": 4}),
         ("osu_7.4_alltoall_xccl.txt", {"nranks": 8}), ("osu_5.6_two_runs.txt", {}), ("imb_2021.3_mpi1.txt", {}),
         ("imb_3.2.4_allreduce_check.txt", {}), ("pccl-reproducer/perlmutter_all_gather_current.out", {})]
#: what the mutations compare: a cell's identity and every value read from the file
VALUES = ["collective", "nranks", "dtype", "op", "placement", "count_per_rank", "bytes_total", "time_us_mean",
          "time_us_min", "time_us_max", "algbw_gbps", "busbw_gbps", "status", "iters"]
PREFIXES = ["[1,0]<stdout>:", "[0] ", "  0: ", "2024-05-01T10:00:00.5Z ", "[12:00:01] "]
EXPECTED = {name: table(name, **options)[0][VALUES] for name, options in TEXTS}


def _frame(results: pd.DataFrame) -> list[tuple]:
    return sorted(tuple(None if isinstance(v, float) and math.isnan(v) else v for v in row)
                  for row in results[VALUES].itertuples(index=False))


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(choice=st.sampled_from(TEXTS), prefix=st.sampled_from(["", *PREFIXES]), crlf=st.booleans(),
       blanks=st.lists(st.integers(0, 400), max_size=4))
def test_mutations_keep_every_value(tmp_path_factory, choice, prefix, crlf, blanks):
    """A launcher's prefix on every line, blank lines anywhere, CRLF: the same rows, every value."""
    name, options = choice
    lines = (CORPUS / name).read_text().splitlines()
    for at in sorted(blanks, reverse=True):
        lines.insert(min(at, len(lines)), "")
    text = ("\r\n" if crlf else "\n").join(f"{prefix}{line}" for line in lines) + "\n"
    folder = tmp_path_factory.mktemp("mutated")
    path = folder / Path(name).name
    path.write_bytes(text.encode())
    results, _, _ = import_files(None, [path], ImportOptions(**options))
    assert _frame(results) == _frame(EXPECTED[name])


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(choice=st.sampled_from(TEXTS), cut=st.floats(0.05, 0.999))
def test_truncation_keeps_the_values_it_has_or_names_the_line(tmp_path_factory, choice, cut):
    """A log cut anywhere (a job killed mid-write): the rows it still holds with their right values, or
    one line naming the file (and the line, where one is at fault); never a wrong value."""
    name, options = choice
    data = (CORPUS / name).read_bytes()
    folder = tmp_path_factory.mktemp("cut")
    path = folder / Path(name).name
    path.write_bytes(data[:max(1, int(len(data) * cut))])
    flags = [item for key, value in options.items() for item in (f"--{key}", value)]
    code, _, stderr = run_in_process("import", path, *flags, "--out", folder / "out")
    if code == 2:
        assert_bad_input((code, "", stderr), str(path))
        return
    assert code == 0, stderr
    results = pd.read_parquet(folder / "out" / "results.parquet")
    assert set(_frame(results)) <= set(_frame(EXPECTED[name]))


# -- issue 53: what an expert reads from a partial or odd log (corpus files *_old*, *_cut*, *_paste*) ------


def test_nccl_old_all_reduce_header_and_one_process_of_eight_gpus():
    """Before 2.13 the header differs per test: all_reduce prints redop (no root) and a float error;
    the collective from the row shape (no 'Collective test starting' line), 8 ranks from the rank lines."""
    results, meta = table("nccl_2.10_all_reduce_old.txt")
    assert set(results.collective) == {"allreduce"} and set(results.op) == {"sum"} and set(results.dtype) == {"float32"}
    assert set(results.nranks) == {8} and set(results.nnodes) == {1} and set(results.hosts) == {"dgx-a100"}
    out, inplace = cells(results), cells(results, "in_place")
    assert out.count_per_rank.tolist() == [262144, 1048576, 4194304, 16777216]
    assert out.bytes_total.tolist() == [1048576, 4194304, 16777216, 67108864]
    assert out.time_us_mean.tolist() == [22.05, 48.9, 141.2, 489.77]
    assert inplace.time_us_mean.tolist() == [21.87, 48.31, 140.75, 488.1]
    assert out.algbw_gbps.tolist() == [47.55, 85.77, 118.82, 137.02]
    assert out.busbw_gbps.tolist() == [83.22, 150.1, 207.93, 239.79]
    assert inplace.busbw_gbps.tolist() == [83.91, 151.94, 208.6, 240.61]
    assert set(results.status) == {"ok"} and set(results.n_wrong) == {0} and set(results.iters) == {20}
    said = "; ".join(meta["imported_from"][0]["inferred"])
    assert "collective=allreduce from the row shape" in said and "nranks=8 from 8 '#  Rank N" in said


def test_nccl_old_broadcast_pasted_without_any_header():
    """Rows only (root column, error columns): broadcast from the row shape (ratio 1, root 0, no redop);
    its busbw is its algbw at any rank count, so nranks stays empty."""
    results, meta, _ = import_files("nccl-tests", [CORPUS / "nccl_2.10_broadcast_old_paste.txt"], ImportOptions())
    assert set(results.collective) == {"broadcast"} and set(results.op) == {"none"} and results.nranks.isna().all()
    out, inplace = cells(results), cells(results, "in_place")
    assert out.count_per_rank.tolist() == [16384, 65536, 262144]
    assert out.bytes_total.tolist() == [65536, 262144, 1048576]
    assert out.time_us_mean.tolist() == [16.42, 21.77, 40.12] and inplace.time_us_mean.tolist() == [16.3, 21.5, 39.8]
    assert out.algbw_gbps.tolist() == [3.99, 12.04, 26.14] and (results.busbw_gbps == results.algbw_gbps).all()
    assert set(results.status) == {"ok"}
    assert "nranks unknown" in "; ".join(meta["imported_from"][0]["inferred"])


def test_nccl_old_reduce_header_with_redop_and_root():
    results, _ = table("nccl_2.10_reduce_old.txt")
    assert set(results.collective) == {"reduce"} and set(results.nranks) == {4} and set(results.nnodes) == {2}
    assert set(results.hosts) == {"nodeA,nodeB"} and set(results.ranks_per_node) == {2}
    out, inplace = cells(results), cells(results, "in_place")
    assert out.count_per_rank.tolist() == [1024, 16384] and out.bytes_total.tolist() == [4096, 65536]
    assert out.time_us_mean.tolist() == [18.3, 25.6] and inplace.time_us_mean.tolist() == [18.11, 25.32]
    assert out.busbw_gbps.tolist() == [0.22, 2.56] and inplace.busbw_gbps.tolist() == [0.23, 2.59]
    assert inplace.status.tolist() == ["ok", "wrong"] and nan_or(inplace.n_wrong) == [0, None]
    assert inplace.error.tolist() == ["", "nccl-tests error 4e-02 above its tolerance 3e-05"]  # 1e-5 x (4-1)


def test_rccl_job_killed_mid_row_keeps_the_rows_before():
    """rccl-tests under srun --label on two Frontier nodes, the file ending inside a row: the rows
    before it, the cut one left out and said."""
    results, meta = table("rccl_2.13_all_gather_cut.txt")
    assert set(results.collective) == {"allgather"} and set(results.nranks) == {16} and set(results.nnodes) == {2}
    assert set(results.library) == {"RCCL"} and set(results.library_version) == {"2.18.3"}
    assert set(results.tool_version) == {"rccl-tests 2.13.0"} and set(results.device) == {"rocm"}
    out, inplace = cells(results), cells(results, "in_place")
    assert out.count_per_rank.tolist() == [16384, 65536, 262144]
    assert out.bytes_total.tolist() == [1048576, 4194304, 16777216]
    assert out.time_us_mean.tolist() == [60.21, 120.4, 380.55]
    assert inplace.time_us_mean.tolist() == [59.8, 119.73, 379.02]
    assert out.busbw_gbps.tolist() == [16.33, 32.66, 41.33] and inplace.algbw_gbps.tolist() == [17.53, 35.03, 44.26]
    assert "line 31 left out: the file's last line, cut inside it" in "; ".join(meta["imported_from"][0]["inferred"])


def test_osu_table_without_banner_cut_in_its_last_row():
    """'# Size  Avg Latency(us) ...' and rows only, no title, no launcher line, the last row cut: the
    collective from the file name, nranks empty (all-reduce sizes do not depend on it), the cut row out."""
    results, meta = table("osu_7.3_allreduce_paste_cut.txt")
    assert set(results.collective) == {"allreduce"} and set(results.dtype) == {"float32"}
    assert results.nranks.isna().all()
    assert results.count_per_rank.tolist() == [1, 2, 4, 256, 16384]
    assert results.bytes_total.tolist() == [4, 8, 16, 1024, 65536]
    assert results.time_us_mean.tolist() == [3.21, 3.25, 3.3, 5.92, 41.87]
    assert results.time_us_min.tolist() == [2.95, 3.01, 3.04, 5.4, 40.12]
    assert results.time_us_max.tolist() == [3.48, 3.52, 3.6, 6.33, 43.5]
    assert results.iters.tolist() == [10000, 10000, 10000, 10000, 1000] and results.busbw_gbps.isna().all()
    said = "; ".join(meta["imported_from"][0]["inferred"])
    assert "collective=allreduce from the file name" in said and "nranks unknown" in said
    assert "line 7 left out" in said


def test_imb_blocks_behind_a_loggers_timestamps():
    results, _ = table("imb_2019_allgather_bcast_timestamps.txt")
    assert set(results.tool_version) == {"IMB 2019 Update 6"} and set(results.nranks) == {4}
    allgather, bcast = (results[results.collective == name].reset_index(drop=True)
                        for name in ("allgather", "broadcast"))
    assert allgather.count_per_rank.tolist() == [0, 1024, 65536]
    assert allgather.bytes_total.tolist() == [0, 4096, 262144]
    assert allgather.time_us_mean.tolist() == [0.05, 3.25, 43.05]
    assert allgather.time_us_min.tolist() == [0.05, 3.1, 41.2]
    assert allgather.time_us_max.tolist() == [0.06, 3.4, 44.9] and allgather.iters.tolist() == [1000, 1000, 640]
    assert bcast.count_per_rank.tolist() == [0, 1024, 65536] and bcast.time_us_mean.tolist() == [0.03, 2.11, 19.77]
    assert set(results.dtype) == {"uint8"} and set(results.op) == {"none"}


def test_nccl_reduce_scatter_from_a_github_actions_log():
    """Each line behind `gh run view --log`'s job, step and runner timestamp; ##[group] markers."""
    results, _ = table("nccl_2.19_reduce_scatter_gh_actions.log")
    assert set(results.collective) == {"reduce_scatter"} and set(results.nranks) == {2}
    assert set(results.library_version) == {"2.19.3"} and set(results.tool_version) == {"nccl-tests 2.13.10"}
    out, inplace = cells(results), cells(results, "in_place")
    assert out.count_per_rank.tolist() == [1048576, 4194304] and out.bytes_total.tolist() == [8388608, 33554432]
    assert out.time_us_mean.tolist() == [101.22, 312.4] and inplace.time_us_mean.tolist() == [100.87, 311.95]
    assert out.busbw_gbps.tolist() == [41.44, 53.7] and inplace.busbw_gbps.tolist() == [41.58, 53.78]


def test_osu_non_blocking_keeps_its_overlap_columns():
    """osu_ialltoall (OMB 5.6, the launcher's rank count): each cell's time is OSU's Pure Comm. (post +
    wait, as a sweep's non-blocking cell), Overall, Compute and Overlap(%) in their own columns."""
    results, meta = table("osu_5.6_ialltoall_nonblocking.txt")
    assert set(results.collective) == {"alltoall"} and set(results["mode"]) == {"nonblocking"}
    assert set(results.nranks) == {4} and set(results.dtype) == {"char"}
    assert results.count_per_rank.tolist() == [1, 2, 4, 8] and results.bytes_total.tolist() == [4, 8, 16, 32]
    assert results.time_us_mean.tolist() == [5.18, 5.1, 4.93, 3.97]
    assert results.pure_us.tolist() == [5.18, 5.1, 4.93, 3.97]
    assert results.overall_us.tolist() == [11.09, 10.87, 9.98, 9.1]
    assert results.compute_us.tolist() == [6.1, 6.04, 5.87, 4.76]
    assert results.overlap_pct.tolist() == [3.46, 5.46, 16.62, 0.0]
    assert "mode=nonblocking" in "; ".join(meta["imported_from"][0]["inferred"])


def test_osu_non_blocking_full_output():
    """-f prints Coll. Init, MPI_Test and MPI_Wait too: the same columns kept, the others read past."""
    results, _ = table("osu_7.4_iallreduce_full.txt")
    assert set(results.collective) == {"allreduce"} and set(results["mode"]) == {"nonblocking"}
    assert set(results.nranks) == {8} and set(results.dtype) == {"float32"} and set(results.op) == {"sum"}
    assert results.count_per_rank.tolist() == [1, 4, 16]
    assert results.time_us_mean.tolist() == [7.2, 7.35, 8.02] and results.overall_us.tolist() == [14.02, 14.33, 15.9]
    assert results.compute_us.tolist() == [7.41, 7.58, 8.3] and results.overlap_pct.tolist() == [8.19, 8.16, 5.24]


def test_imb_nbc_non_blocking_and_its_pure_block():
    """IMB-NBC: Iallreduce's t_pure is the cell's time (t_ovrl, t_CPU, overlap[%] kept); the
    Iallreduce_pure block (the call alone, min/max/avg) is another measurement: algorithm native:pure."""
    results, _ = table("imb_2021.3_nbc_iallreduce.txt")
    assert set(results.collective) == {"allreduce"} and set(results["mode"]) == {"nonblocking"}
    assert set(results.nranks) == {4} and set(results.dtype) == {"float32"} and results.cell_key.is_unique
    main, pure = (results[results.algorithm == name].reset_index(drop=True) for name in ("native", "native:pure"))
    assert main.count_per_rank.tolist() == [1, 256] and main.time_us_mean.tolist() == [2.12, 3.77]
    assert main.overall_us.tolist() == [3.91, 6.4] and main.compute_us.tolist() == [2.05, 3.71]
    assert main.overlap_pct.tolist() == [12.68, 29.11] and main.pure_us.tolist() == [2.12, 3.77]
    assert pure.time_us_mean.tolist() == [2.1, 3.75] and pure.time_us_min.tolist() == [2.01, 3.6]
    assert pure.time_us_max.tolist() == [2.2, 3.9] and pure.overlap_pct.isna().all()


def test_blocking_and_non_blocking_cells_are_not_one_cell():
    """An all-reduce and an iallreduce of the same sizes in one import: each its own cell key."""
    twice = [CORPUS / "osu_7.4_iallreduce_full.txt"] * 2
    results, _, _ = import_files(None, twice, ImportOptions())
    assert results.cell_key.is_unique and set(results["mode"]) == {"nonblocking"}
    blocking, _ = table("osu_7.4_bcast_full.txt")
    assert set(blocking["mode"]) == {"blocking"} and blocking.overlap_pct.isna().all()


# -- issue 53 mutations: cut the header, cut the footer, drop columns, interleave two runs ------------

#: (file, the tool to name, options): every format of the corpus, complete and partial
MUTATED = [("nccl_2.19_all_reduce_tagged.log", "nccl-tests", {}), ("nccl_2.11_all_gather_old.txt", "nccl-tests", {}),
           ("nccl_2.10_all_reduce_old.txt", "nccl-tests", {}), ("nccl_2.10_reduce_old.txt", "nccl-tests", {}),
           ("rccl_2node_all_reduce.txt", "rccl-tests", {}), ("rccl_2.13_all_gather_cut.txt", "rccl-tests", {}),
           ("nccl_2.19_reduce_scatter_gh_actions.log", "nccl-tests", {}), ("osu_7.4_bcast_full.txt", "osu", {}),
           ("osu_7.3_allreduce_paste_cut.txt", "osu", {}), ("osu_7.4_alltoall_xccl.txt", "osu", {"nranks": 8}),
           ("imb_3.2.4_allreduce_check.txt", "imb", {}), ("imb_2019_allgather_bcast_timestamps.txt", "imb", {}),
           ("osu_7.4_iallreduce_full.txt", "osu", {}), ("imb_2021.3_nbc_iallreduce.txt", "imb", {})]
#: what a mutation keeps: a cell's identity and the times read from the file
KEPT = ["collective", "dtype", "op", "placement", "count_per_rank", "time_us_mean", "time_us_min", "time_us_max"]
BASE = {name: import_files(tool, [CORPUS / name], ImportOptions(**options))[0] for name, tool, options in MUTATED}


def _rows_of(results: pd.DataFrame, columns: list[str]) -> list[tuple]:
    return sorted(tuple(None if isinstance(v, float) and math.isnan(v) else v for v in row)
                  for row in results[columns].itertuples(index=False))


def _is_row(line: str) -> bool:
    body = clean(line).strip()
    return body[:1].isdigit() and len(body.split()) > 2


def _import_mutated(folder: Path, name: str, tool: str, options: dict, lines: list[str]) -> pd.DataFrame | None:
    """The mutated log's rows, or None after a one-line refusal (exit 2, nothing written). It ends as the
    original does (a cut last line stays without its line break)."""
    path = folder / name
    path.write_text("\n".join(lines) + ("\n" if (CORPUS / name).read_bytes().endswith(b"\n") else ""))
    flags = [item for key, value in options.items() for item in (f"--{key}", value)]
    result = run_in_process("import", tool, path, *flags, "--out", folder / "out")
    if result[0] == 2:
        assert_bad_input(result, str(path))
        assert not (folder / "out").exists()
        return None
    assert result[0] == 0, result[2]
    return pd.read_parquet(folder / "out" / "results.parquet")


def _whole_lines(name: str) -> list[str]:
    """The lines of a corpus file but a last one cut without its line break (left as it is)."""
    lines = (CORPUS / name).read_text().splitlines()
    return lines if (CORPUS / name).read_bytes().endswith(b"\n") else lines[:-1]


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(choice=st.sampled_from(MUTATED), cut=st.sampled_from(["header", "footer", "both"]))
def test_cut_header_or_footer_keeps_the_values_or_refuses(tmp_path_factory, choice, cut):
    """Everything before the first result row (command line, banner, title, column header) or after the
    last one cut away: the same cells with the same times (nranks may be lost), or one line, exit 2."""
    name, tool, options = choice
    lines = (CORPUS / name).read_text().splitlines()
    rows = [index for index, line in enumerate(lines) if _is_row(line)]
    start = rows[0] if cut in ("header", "both") else 0
    end = rows[-1] + 1 if cut in ("footer", "both") else len(lines)
    results = _import_mutated(tmp_path_factory.mktemp("cut"), name, tool, options, lines[start:end])
    if results is not None:
        assert set(_rows_of(results, KEPT)) <= set(_rows_of(BASE[name], KEPT))
        if cut == "footer":
            assert _rows_of(results, KEPT) == _rows_of(BASE[name], KEPT)


def _drop(line: str, column: int) -> str:
    """``line`` without its ``column``-th value, where it is a table header (nccl-tests, IMB) or row."""
    body = clean(line)
    prefix, stripped = line[:len(line) - len(body)], body.strip()
    if re.match(r"#\s+size\s+count\s", stripped):
        tokens, lead = stripped.lstrip("#").split(), "#  "
    elif stripped.startswith("#bytes"):
        tokens, lead = stripped.split(), "  "
    elif _is_row(line):
        tokens, lead = stripped.split(), "  "
    else:
        return line
    if column >= len(tokens):
        return line
    return prefix + lead + "  ".join(tokens[:column] + tokens[column + 1:])


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(choice=st.sampled_from([m for m in MUTATED if m[1] != "osu"]), column=st.integers(0, 12))
def test_a_dropped_column_keeps_the_values_or_refuses(tmp_path_factory, choice, column):
    """One column removed from the table's header and every row (nccl-tests, IMB: one token a column):
    the cells it still describes with their times, or one line, exit 2; never a time read from the
    wrong column."""
    name, tool, options = choice
    mutated = [_drop(line, column) for line in _whole_lines(name)]
    results = _import_mutated(tmp_path_factory.mktemp("drop"), name, tool, options, mutated)
    if results is not None:
        identity = ["collective", "algorithm", "placement", "count_per_rank"]
        expected = {row[:4]: row for row in _rows_of(BASE[name], [*identity, "time_us_mean"])}
        for row in _rows_of(results, [*identity, "time_us_mean"]):
            assert row[:4] in expected and row == expected[row[:4]], row


def _woven(lines: list[str], offset: int) -> list[str]:
    """Each table's rows with a slower copy (every decimal doubled: another run of the same sizes) woven
    in from its row ``offset`` on, one row of each in turn."""
    out: list[str] = []
    index = 0
    while index < len(lines):
        if not _is_row(lines[index]):
            out.append(lines[index])
            index += 1
            continue
        end = index
        while end < len(lines) and _is_row(lines[end]):
            end += 1
        group, copy = lines[index:end], [_doubled(line) for line in lines[index:end]]
        start = min(offset, len(group) - 1)  # woven in, not after: rows one run after the other are its cycles
        out += group[:start]
        for first, second in itertools.zip_longest(group[start:], copy):
            out += [line for line in (second, first) if line is not None]
        index = end
    return out


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(choice=st.sampled_from(MUTATED), offset=st.integers(0, 4))
def test_two_runs_interleaved_split_or_refused(tmp_path_factory, choice, offset):
    """A second, slower run of the same sizes woven into each table from its row ``offset`` on: two runs,
    each with its own values, or one line naming the line; never repeats of one run."""
    name, tool, options = choice
    results = _import_mutated(tmp_path_factory.mktemp("weave"), name, tool, options,
                              _woven(_whole_lines(name), offset))
    if results is None:
        return
    assert results.run_id.nunique() == 2 * BASE[name].run_id.nunique(), "two runs read as one"
    runs = sorted((results[results.run_id == run] for run in results.run_id.unique()),
                  key=lambda frame: frame.time_us_mean.sum())
    columns = [*KEPT[:5], "time_us_mean"]
    assert _rows_of(runs[0], columns) == _rows_of(BASE[name], columns)
    doubled = _rows_of(BASE[name].assign(time_us_mean=BASE[name].time_us_mean * 2), columns)
    slower = _rows_of(runs[1], columns)
    assert [row[:5] for row in slower] == [row[:5] for row in doubled]
    assert [row[5] for row in slower] == pytest.approx([row[5] for row in doubled])


def _doubled(line: str) -> str:
    """A result row with every decimal doubled (a slower run of the same sizes), as many decimals, the
    row as wide (the tools print fixed-width rows: a narrower one reads as cut)."""
    def twice(found: re.Match) -> str:
        decimals = len(found.group(2).split(".")[1])
        return f"{float(found.group(2)) * 2:.{decimals}f}".rjust(len(found.group(0)))
    return re.sub(r"( *)(?<![\w.])(\d+\.\d+)(?![\w.])", twice, line)
