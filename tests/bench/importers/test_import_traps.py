"""Issue 53: the logs an expert reads with care. A table that does not tell its rank count (rows with
nranks empty, said on stderr; plot and gate of that file work, a gate across runs refuses), N separate
1-rank tests of an nccl-tests built without MPI, two runs interleaved in one file (split by their size
sequence, or refused naming the line), clock and CI-runner prefixes, partial OSU and IMB logs."""

from __future__ import annotations

import pandas as pd
from conftest import DATA
from hostile import assert_bad_input, run_in_process

CORPUS = DATA / "corpus"
PASTE = CORPUS / "nccl_2.19_all_reduce_small_paste.txt"


def imported(tmp_path, *argv: object, name: str = "out") -> tuple[pd.DataFrame, str]:
    code, _, stderr = run_in_process("import", *argv, "--out", tmp_path / name)
    assert code == 0, stderr
    return pd.read_parquet(tmp_path / name / "results.parquet"), stderr


# -- a rank count nothing tells -------------------------------------------------------------------


def test_unknown_rank_count_imports_empty_and_says_why(tmp_path):
    """Every busbw printed as 0.00, no '#  Rank' lines, all-reduce sizes independent of the rank count:
    the rows as the table says them, nranks empty, one note on stderr."""
    results, stderr = imported(tmp_path, "nccl-tests", PASTE)
    assert results.nranks.isna().all() and results.ranks_per_node.isna().all() and results.nnodes.isna().all()
    assert set(results.collective) == {"allreduce"} and set(results.op) == {"sum"}
    out = results[results.placement == "out_of_place"]
    inplace = results[results.placement == "in_place"]
    assert out.count_per_rank.tolist() == [2, 4, 8, 16] and out.bytes_total.tolist() == [8, 16, 32, 64]
    assert out.time_us_mean.tolist() == [24.61, 24.17, 24.33, 24.8]
    assert inplace.time_us_mean.tolist() == [23.95, 24.02, 24.4, 24.51]
    assert set(results.busbw_gbps) == {0.0} and set(results.algbw_gbps) == {0.0}  # as printed
    note = [line for line in stderr.splitlines() if "nranks unknown" in line]
    assert len(note) == 1 and "every busbw is printed as 0.00 (8 values)" in note[0], stderr
    assert "--nranks N" in note[0]


def test_unknown_rank_count_plot_report_and_gate_of_that_file(tmp_path):
    imported(tmp_path, "nccl-tests", PASTE)
    run = tmp_path / "out"
    code, _, stderr = run_in_process("plot", run, "--out", tmp_path / "plots")
    assert code == 0, stderr
    assert sorted(path.name for path in (tmp_path / "plots").iterdir()) == [
        "allreduce-in_place-latency.png", "allreduce-out_of_place-latency.png"]
    code, _, stderr = run_in_process("report", run)
    assert code == 0, stderr
    code, stdout, stderr = run_in_process("gate", run, run)
    # judged like any imported cell (no samples: insufficient), matched with itself on the unknown count
    assert code == 1 and "Traceback" not in stdout + stderr and "8 insufficient of 8 cells" in stdout
    assert "? ranks" in stdout


def test_unknown_rank_count_gate_across_runs_refuses(tmp_path):
    imported(tmp_path, "nccl-tests", PASTE, name="a")
    imported(tmp_path, "nccl-tests", PASTE, name="b")
    for baseline, current in (("a", "b"), ("b", "a")):
        assert_bad_input(run_in_process("gate", tmp_path / baseline, tmp_path / current), str(tmp_path / baseline),
                         "8 cells", "no rank count", "--nranks N")
    known, _ = imported(tmp_path, "nccl-tests", PASTE, "--nranks", "2", name="c")
    assert set(known.nranks) == {2}
    assert_bad_input(run_in_process("gate", tmp_path / "c", tmp_path / "a"), str(tmp_path / "a"), "no rank count")


def test_unknown_rank_count_only_where_the_bytes_do_not_need_it(tmp_path):
    """An all-gather's bytes are count x ranks: its size/count gives the count, and a table that does not
    is refused (no row could be written)."""
    path = tmp_path / "all_gather.txt"
    path.write_text(PASTE.read_text().replace("sum", "none"))  # size/count = 1: a 1-rank all-gather
    results, stderr = imported(tmp_path, "nccl-tests", path, "--collective", "allgather")
    assert set(results.nranks) == {1} and "nranks=1 from size / (count * type size)" in stderr


def test_a_measured_table_still_needs_its_rank_count(tmp_path):
    """Only an imported table may leave nranks empty: a sweep's rows always have it."""
    from hostile import small_run
    run = small_run(tmp_path / "run")
    frame = pd.read_parquet(run / "results.parquet")
    frame["nranks"] = frame["nranks"].astype(float)
    frame.loc[frame.index[2], "nranks"] = float("nan")
    frame.to_parquet(run / "results.parquet", index=False)
    assert_bad_input(run_in_process("plot", run, "--out", tmp_path / "plots"), "column nranks", "row 2", "is empty")
