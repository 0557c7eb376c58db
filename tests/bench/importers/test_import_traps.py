"""Issue 53: the logs an expert reads with care. A table that does not tell its rank count (rows with
nranks empty, said on stderr; plot and gate of that file work, a gate across runs refuses), N separate
1-rank tests of an nccl-tests built without MPI, two runs interleaved in one file (split by their size
sequence, or refused naming the line), clock and CI-runner prefixes, partial OSU and IMB logs."""

from __future__ import annotations

import functools

import pandas as pd
import pytest
from conftest import DATA
from hostile import assert_bad_input, run_in_process

from bench.importers.import_run import import_files
from bench.importers.imported_row import ImportOptions

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


# -- N separate 1-rank tests (nccl-tests without MPI=1 under mpirun) ------------------------------


@pytest.mark.parametrize("name, line", [("nccl_2.13_all_reduce_nompi_blocks.txt", 21),
                                        ("nccl_2.13_all_reduce_nompi_interleaved.txt", 7)])
def test_separate_one_rank_tests_are_said_as_what_they_are(tmp_path, name, line):
    """Two processes each ran a 1-rank test of its own, their outputs one after the other or line by line:
    refused (neither the 2-rank result meant nor clean 1-rank ones: they shared the node), never 2 repeats."""
    path = CORPUS / name
    message = assert_bad_input(run_in_process("import", path, "--out", tmp_path / "out"), f"{path}:{line}",
                               "2 separate 1-rank tests", "nccl-tests built without MPI=1 and started under mpirun",
                               "#27, #213", "--nranks 1")
    assert not (tmp_path / "out").exists(), message


def test_separate_one_rank_tests_import_with_nranks_1_as_runs_of_their_own(tmp_path):
    results, stderr = imported(tmp_path, CORPUS / "nccl_2.13_all_reduce_nompi_blocks.txt", "--nranks", "1")
    assert results.run_id.nunique() == 2 and set(results.nranks) == {1}
    first, second = (results[results.run_id == run] for run in sorted(results.run_id.unique()))
    out = first[first.placement == "out_of_place"]
    assert out.time_us_mean.tolist() == [4.51, 4.48, 4.6, 4.55] and out.count_per_rank.tolist() == [2, 4, 8, 16]
    assert second[second.placement == "in_place"].time_us_mean.tolist() == [0.22, 0.21, 0.21, 0.22]
    # line by line, in step: which row is whose, nothing tells
    path = CORPUS / "nccl_2.13_all_reduce_nompi_interleaved.txt"
    assert_bad_input(run_in_process("import", path, "--nranks", "1", "--out", tmp_path / "inter"), f"{path}:24",
                     "reach size 16 together")


def test_one_rank_tests_of_different_headers_are_runs(tmp_path):
    """Two 1-rank runs that differ (another size range): a user's loop, imported as two runs."""
    text = (CORPUS / "nccl_2.13_all_reduce_nompi_blocks.txt").read_text().splitlines()
    text[22] = text[22].replace("maxBytes 64", "maxBytes 128")
    path = tmp_path / "loop.log"
    path.write_text("\n".join(text) + "\n")
    results, _ = imported(tmp_path, path)
    assert results.run_id.nunique() == 2 and set(results.nranks) == {1}


# -- two runs interleaved in one file -------------------------------------------------------------

INTERLEAVED = CORPUS / "nccl_2.13_all_reduce_two_runs_interleaved.txt"


def test_interleaved_runs_split_by_their_size_sequence(tmp_path):
    """Two 2-rank jobs started with '&' into one log: every header and rank line twice, rows out of
    order; each run its own run_id and launch, every value in the right one."""
    results, stderr = imported(tmp_path, INTERLEAVED)
    assert "2 runs interleaved" in stderr and "from lines 20, 22" in stderr
    assert "each printed by 2 processes" in stderr and set(results.nranks) == {2}
    runs = sorted(results.run_id.unique())
    assert len(runs) == 2 and runs[0].endswith(".1") and runs[1].endswith(".2")
    first, second = (results[results.run_id == run] for run in runs)
    assert set(first.launch_id) == {f"{INTERLEAVED.name}#1"} and set(second.launch_id) == {f"{INTERLEAVED.name}#2"}
    for rows, times, busbw in ((first, [20.61, 31.22, 52.48, 95.33], [50.88, 67.17, 79.92, 88.0]),
                               (second, [41.1, 62.05, 104.77, 190.4], [25.51, 33.8, 40.03, 44.06])):
        for placement in ("out_of_place", "in_place"):
            cells = rows[rows.placement == placement]
            assert cells.count_per_rank.tolist() == [262144, 524288, 1048576, 2097152]
            assert cells.time_us_mean.tolist() == times and cells.busbw_gbps.tolist() == busbw


def test_interleaved_runs_that_reach_a_size_together_are_refused_naming_the_line(tmp_path):
    lines = INTERLEAVED.read_text().splitlines()
    rows = {line.split()[5]: line for line in lines if line.strip()[:1].isdigit()}
    order = ["20.61", "41.10", "31.22", "62.05"]  # both runs at 1 MiB, then a 2 MiB row: whose?
    path = tmp_path / "both.log"
    path.write_text("\n".join([*lines[:19], *(rows[time] for time in order)]) + "\n")
    assert_bad_input(run_in_process("import", path, "--out", tmp_path / "out"), f"{path}:22",
                     "second from line 21", "reach size 2097152 together")
    assert not (tmp_path / "out").exists()


def test_a_row_no_run_continues_is_refused_naming_the_line(tmp_path):
    lines = INTERLEAVED.read_text().splitlines()
    rows = {line.split()[5]: line for line in lines if line.strip()[:1].isdigit()}
    order = ["20.61", "31.22", "52.48", "41.10", "104.77"]  # 4 MiB right after a restart at 1 MiB
    path = tmp_path / "gap.log"
    path.write_text("\n".join([*lines[:19], *(rows[time] for time in order)]) + "\n")
    assert_bad_input(run_in_process("import", path, "--out", tmp_path / "out"), f"{path}:24",
                     "size 4194304 follows no run's last size", "a second from line 23")


def test_cycles_one_after_the_other_stay_one_run(tmp_path):
    """nccl-tests -N 2 prints its table twice: repeats of one run, as before."""
    text = (CORPUS / "nccl_2.19_all_reduce_tagged.log").read_text().splitlines()
    rows = [line for line in text if line.split(":", 1)[-1].strip()[:1].isdigit()]
    at = text.index(rows[-1]) + 1
    path = tmp_path / "cycles.log"
    path.write_text("\n".join([*text[:at], *rows, *text[at:]]) + "\n")
    results, stderr = imported(tmp_path, path)
    assert results.run_id.nunique() == 1 and "interleaved" not in stderr
    assert sorted(results.repeat.unique()) == [0, 1] and len(results) == 20


# -- clocks and CI runners before every line ------------------------------------------------------

#: what terminals, loggers and CI runners put before a tool's line (each as a printf format of the line)
RUNNER_PREFIXES = {
    "bare clock": "00:55:22  {}",
    "bracketed date": "[2024-11-05 10:02:03] {}",
    "ISO milliseconds": "2024-11-05T10:02:03.123Z {}",
    "GitHub Actions": "2024-11-05T10:02:03.1234567Z {}",
    "gh run view --log": "build (ubuntu-22.04)\tRun nccl-tests\t2024-11-05T10:02:03.1234567Z {}",
    "GitLab": "\x1b[0K{}\x1b[0;m",
    "srun --label": "3: {}",
    "kubectl/CRI log": "2024-11-05T10:02:03.123456789Z stdout F {}",
}


def prefixed(tmp_path, source, prefix: str):
    lines = source.read_text().splitlines()
    text = "\n".join(prefix.format(line) for line in lines) + "\n"
    if "\x1b" in prefix:  # GitLab opens a section before the step's output
        text = "section_start:1730800923:step_script\r\x1b[0Ksection_header\n" + text + \
            "section_end:1730800999:step_script\r\x1b[0K\n"
    path = tmp_path / source.name
    path.write_text(text)
    return path


@pytest.mark.parametrize("prefix", RUNNER_PREFIXES.values(), ids=RUNNER_PREFIXES.keys())
@pytest.mark.parametrize("name", ["imb_2021.3_mpi1.txt", "nccl_2.19_all_reduce_tagged.log", "osu_7.4_bcast_full.txt"])
def test_runner_prefixes_keep_every_value(tmp_path, name, prefix):
    """IMB's '# Benchmarking X' headers, nccl-tests' and OSU's behind every prefix: the same rows."""
    results, _, _ = import_files(None, [prefixed(tmp_path, CORPUS / name, prefix)], ImportOptions())
    assert results[VALUES].equals(plain(name))


VALUES = ["collective", "nranks", "count_per_rank", "placement", "time_us_mean", "time_us_min", "busbw_gbps"]


@pytest.mark.parametrize("name", ["imb_2021.3_mpi1.txt", "nccl_2.19_all_reduce_tagged.log"])
def test_pdsh_host_names_before_headers_and_rows(tmp_path, name):
    """pdsh/clush put the host's name before each line: stripped before a header or a row, where a
    tool's line cannot start with a word and a colon."""
    results, _, _ = import_files(None, [prefixed(tmp_path, CORPUS / name, "gpu-node17: {}")], ImportOptions())
    assert results[VALUES].equals(plain(name))


@functools.cache
def plain(name: str) -> pd.DataFrame:
    return import_files(None, [CORPUS / name], ImportOptions())[0][VALUES]


def test_sizes_printed_twice_by_rounding_are_one_run(tmp_path):
    """nccl-tests prints 0 B for each requested size below ranks x type size (all-gather on 16 ranks):
    rows of one size one after the other are one run's, not two runs."""
    path = tmp_path / "ag16.txt"
    row = "{:>12} {:>13}     float    none      -1    {}    0.00    0.00      0    {}    0.00    0.00      0\n"
    path.write_text("# Collective test starting: all_gather_perf\n" + HEADER_2_13
                    + row.format(0, 0, "0.20", "0.19") + row.format(0, 0, "0.21", "0.18")
                    + row.format(64, 1, "30.10", "29.90") + row.format(128, 2, "30.20", "29.95"))
    results, stderr = imported(tmp_path, "nccl-tests", path)
    assert results.run_id.nunique() == 1 and "interleaved" not in stderr and set(results.nranks) == {16}
    out = results[results.placement == "out_of_place"]
    assert out.count_per_rank.tolist() == [0, 0, 1, 2] and out.repeat.tolist() == [0, 1, 0, 0]
    assert out.time_us_mean.tolist() == [0.2, 0.21, 30.1, 30.2]


HEADER_2_13 = ("#       size         count      type   redop    root     time   algbw   busbw #wrong     time   "
               "algbw   busbw #wrong\n")


def test_runs_in_step_are_refused_not_read_as_rounding(tmp_path):
    """Every size twice in a row (two runs in step): not nccl-tests' rounding, which repeats only the
    sizes that round alike; which row is whose, nothing tells."""
    lines = INTERLEAVED.read_text().splitlines()
    rows = {line.split()[5]: line for line in lines if line.strip()[:1].isdigit()}
    order = ["20.61", "41.10", "31.22", "62.05", "52.48", "104.77", "95.33", "190.40"]  # A, B, A, B ...
    body = [rows[time] for time in order]
    path = tmp_path / "step.log"
    path.write_text("\n".join([lines[16], *body]) + "\n")
    assert_bad_input(run_in_process("import", "nccl-tests", path, "--collective", "allreduce", "--out",
                                    tmp_path / "out"), f"{path}:3", "every size printed 2 times in a row")


def test_another_title_after_a_crash_opens_a_new_run(tmp_path):
    """Only the very header line printed again stays one run (two processes on one terminal): another
    test's title after a crashed one opens its own run, with its own collective."""
    path = tmp_path / "osu_crash.txt"
    path.write_text("# OSU MPI Allreduce Latency Test v7.4\n[node:1] *** Process received signal ***\n"
                    "# OSU MPI Broadcast Latency Test v7.4\n# Size       Avg Latency(us)\n"
                    "1                       2.50\n2                       2.52\n")
    results, stderr = imported(tmp_path, path, "--nranks", "4")
    assert set(results.collective) == {"broadcast"} and results.time_us_mean.tolist() == [2.5, 2.52]
    assert "lines 1-2: skipped" in stderr
