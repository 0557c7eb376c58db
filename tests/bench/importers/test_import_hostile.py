"""``pccl-bench import`` against hostile input: every bad file or flag is exit 2 with one line on
stderr naming the file (and the line of a bad number), before anything is written; nothing is left
half-written; a file of another tool's format is named for what it looks like; a FIFO never blocks;
a log of many runs streams into the same table the old in-memory import built.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import socket
import time
from pathlib import Path

import pandas as pd
import pytest
from conftest import DATA, ROOT, run_cli
from hostile import assert_bad_input, run_in_process

from bench.importers.column_writer import CHUNK_ROWS
from bench.plan.cells import Cell
from bench.plan.hosts import hosts_digest

NCCL = DATA / "nccl-tests"
OSU = DATA / "osu"
REPRO = DATA / "pccl-reproducer"
#: every in-process import here must answer within this (a FIFO or a 1e6-deep JSON once hung or crashed)
LIMIT_S = 10.0

IMB_LOG = """#------------------------------------------------------------
#    Intel(R) MPI Benchmarks 2021.3, MPI-1 part
#------------------------------------------------------------
# Benchmarking Allreduce
# #processes = 4
#----------------------------------------------------------------
       #bytes #repetitions  t_min[usec]  t_max[usec]  t_avg[usec]
            0         1000         0.03         0.04         0.03
            4         1000         1.10         1.40         1.25
         1024          640         3.20         3.90         3.55
"""




def listing(folder: Path) -> set[Path]:
    return {path.relative_to(folder) for path in folder.rglob("*")}


def refused(tmp_path: Path, tool: str, *args: object, out: Path | None = None, contains: tuple[str, ...] = ()) -> str:
    """Run the import in this process; it must be exit 2, one 'pccl-bench: error:' line holding
    every string of ``contains``, no traceback, within LIMIT_S, and write nothing (no run folder,
    nothing else under tmp_path)."""
    out = out or tmp_path / "out"
    before = listing(tmp_path)
    started = time.monotonic()
    code, stdout, stderr = run_in_process("import", tool, *map(str, args), "--out", str(out))
    elapsed = time.monotonic() - started
    line = assert_bad_input((code, stdout, stderr), *contains)
    assert elapsed < LIMIT_S, f"{elapsed:.1f} s: {line}"
    assert listing(tmp_path) == before, f"written: {listing(tmp_path) - before}"
    return line


def edited(tmp_path: Path, source: Path, old: str, new: str, name: str | None = None) -> tuple[Path, int]:
    """``source`` with the first line holding ``old`` changed (``old`` -> ``new``): (path, that line's number)."""
    lines = source.read_text().splitlines()
    number = next(i for i, line in enumerate(lines, 1) if old in line)
    lines[number - 1] = lines[number - 1].replace(old, new, 1)
    path = tmp_path / (name or source.name)
    path.write_text("\n".join(lines) + "\n")
    return path, number


# -- the format is recognised, not guessed --------------------------------------------------------


@pytest.mark.parametrize("tool, make, words", [
    ("osu", lambda d: NCCL / "all_reduce_perf.txt", ("looks like an nccl-tests", "not osu output")),
    ("osu", lambda d: _write(d / "osu_allreduce_imb.log", IMB_LOG), ("looks like an IMB", "not osu output")),
    ("nccl-tests", lambda d: OSU / "osu_allreduce.txt", ("looks like OSU", "pccl-bench import osu")),
    ("rccl-tests", lambda d: OSU / "osu_allgather_full.txt", ("looks like OSU",)),
    ("nccl-tests", lambda d: REPRO / "frontier_all_gather_slurm-2981673_head.out",
     ("looks like a pccl-reproducer Slurm log",)),
    ("pccl-reproducer", lambda d: NCCL / "all_gather_perf.txt", ("looks like an nccl-tests", "pccl-bench import")),
    ("osu", lambda d: _write(d / "results.parquet", "PAR1\0\0\0"), ("looks like a Parquet file",)),
])
def test_another_tools_output_is_named_and_refused(tmp_path, tool, make, words):
    """OSU's importer once read an nccl-tests log's count column, or IMB's #repetitions, as latencies (exit 0)."""
    path = make(tmp_path)
    refused(tmp_path, tool, path, "--nranks", "8", "--collective", "allreduce", contains=(str(path), *words))


def _write(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


@pytest.mark.parametrize("tool", ["nccl-tests", "rccl-tests", "osu", "pccl-reproducer"])
def test_a_file_without_recognisable_data_is_refused(tmp_path, tool):
    path = _write(tmp_path / "notes.txt", "the cluster was down\n1 2 3\nsize count type\n")
    flags = ("--machine", "frontier") if tool == "pccl-reproducer" else ("--nranks", "4", "--collective", "allreduce")
    refused(tmp_path, tool, path, *flags, contains=(str(path),))


def test_osu_rows_count_only_under_osu_s_own_table_header(tmp_path):
    """Size/latency pairs without '# Size  Avg Latency(us)' are not OSU's (the old importer took them)."""
    path = _write(tmp_path / "osu_allreduce.txt", "\n".join(f"{4 << i}  {2.0 + i:.2f}" for i in range(8)) + "\n")
    refused(tmp_path, "osu", path, "--nranks", "4", contains=("no OSU table header",))


# -- every number is checked, with its file:line -----------------------------------------------------

#: one result line of tests/data/nccl-tests/all_gather_perf.txt (8 ranks: size = count x 4 B x 8)
AG_LINE = ("        2048            64     float    none      -1     22.11    0.09    0.08      0     22.77    0.09"
           "    0.08      0")


@pytest.mark.parametrize("new, message", [
    (AG_LINE.replace("22.11", " 1e999"), "is not a time"),
    (AG_LINE.replace("22.11", "   inf"), "is not a time"),
    (AG_LINE.replace("22.11", "   nan"), "is not a time"),
    (AG_LINE.replace("22.11", " -5.00"), "is not a time"),
    (AG_LINE.replace("22.11", "  0.00"), "is not a time"),
    (AG_LINE.replace("22.77", "  fast"), "not a number"),
    (AG_LINE[:-1] + "1e999", "is not a count of wrong elements"),
    (AG_LINE.replace("        2048            64", "99999999999999999999            64"), "beyond a 64-bit"),
    (AG_LINE.replace("        2048            64", "        2048 9999999999999999999999"), "beyond a 64-bit"),
    (AG_LINE.replace("        2048", "        2049"), "is not count 64 x 4 B (float) x 8 ranks"),
    (AG_LINE.replace("        2048", "        ²048"), "not a whole number"),
    (AG_LINE.replace("none", "a\"b,c"), "is not a reduction op"),
])
def test_bad_numbers_in_an_nccl_tests_line_name_the_line(tmp_path, new, message):
    path, number = edited(tmp_path, NCCL / "all_gather_perf.txt", AG_LINE, new)
    refused(tmp_path, "nccl-tests", path, contains=(f"{path}:{number}", message))


@pytest.mark.parametrize("old, new, what", [
    ("nThread 1 nGpus 1", "nThread 0 nGpus 1", "nThread: 0: must be at least 1"),
    ("nThread 1 nGpus 1", "nThread 1 nGpus 0", "nGpus: 0: must be at least 1"),
    ("warmup iters: 5", "warmup iters: 99999999999999999999", "beyond a 64-bit"),
])
def test_bad_header_numbers_name_the_line(tmp_path, old, new, what):
    path, number = edited(tmp_path, NCCL / "all_gather_perf.txt", old, new)
    refused(tmp_path, "nccl-tests", path, contains=(f"{path}:{number}", what))


def test_per_iteration_columns_are_times_too(tmp_path):
    path, number = edited(tmp_path, NCCL / "all_reduce_perf_iter.txt", "10.02    11.64", "10.02      inf")
    refused(tmp_path, "nccl-tests", path, contains=(f"{path}:{number}", "out_of_place i_max"))


OSU_LINE = "16384                    50.73               49.10               52.35         100"


@pytest.mark.parametrize("new, message", [
    (OSU_LINE.replace("50.73", "  inf"), "Avg Latency: 'inf' is not a time"),
    (OSU_LINE.replace("50.73", "  nan"), "Avg Latency: 'nan' is not a time"),
    (OSU_LINE.replace("50.73", "1e999"), "is not a time"),
    (OSU_LINE.replace("49.10", "-1.00"), "Min Latency: '-1.00' is not a time"),
    (OSU_LINE.replace("52.35", " 0.00"), "Max Latency: '0.00' is not a time"),
    (OSU_LINE.replace("16384", "99999999999999999999"), "Size: 99999999999999999999 is beyond a 64-bit"),
    (OSU_LINE.replace(" 100", "   0"), "Iterations: 0: must be at least 1"),
    (OSU_LINE[:40], "values, but the header has 5 columns"),
])
def test_bad_numbers_in_an_osu_row_name_the_line(tmp_path, new, message):
    path, number = edited(tmp_path, OSU / "osu_allgather_full.txt", OSU_LINE, new)
    refused(tmp_path, "osu", path, "--nranks", "4", contains=(f"{path}:{number}", message))


PM_LOG = REPRO / "perlmutter_pm_all_gather_2_nccl_nccl_4_head.out"


@pytest.mark.parametrize("old, new, message", [
    ("for 16 GPUs is 3.702", "for 0 GPUs is 3.702", "GPUs: 0: must be at least 1"),
    ("srun -C gpu -N 4", "srun -C gpu -N 0", "srun -N: 0: must be at least 1"),
    ("srun -C gpu -N 4 -n 16", "srun -C gpu -N 32 -n 16", "more nodes than tasks"),
    ("time = 0.266 ms", "time = 1e999 ms", "time: '1e999' is not a finite number above 0"),
    ("time = 0.266 ms", "time = 0 ms", "time: '0' is not a finite number above 0"),
    ("output size = 1 MB", "output size = 1.2.3 MB", "size: not a number: '1.2.3'"),
    ("for 16 GPUs is 3.702", "for 99999999999999999999 GPUs is 3.702", "beyond a 64-bit"),
])
def test_bad_numbers_in_a_reproducer_log_name_the_line(tmp_path, old, new, message):
    path, number = edited(tmp_path, PM_LOG, old, new)
    refused(tmp_path, "pccl-reproducer", path, contains=(f"{path}:{number}", message))


CSV_HEADER = "machine,dir,file,collective,method,gpus,busbw_gbps,size_mb_printed,buffer_mb,time_ms\n"


@pytest.mark.parametrize("row, message", [
    ("summit,d,f,all-gather,nccl,16,3.0,1.049,1.0,0.3", "machine: 'summit' is not frontier or perlmutter"),
    ("perlmutter,d,f,all-gather,nccl,16,3.0,1.049,inf,0.3", "buffer_mb: 'inf' is not a finite number"),
    ("perlmutter,d,f,all-gather,nccl,16,3.0,1.049,1.0,nan", "time_ms: 'nan' is not a finite number"),
    ("perlmutter,d,f,all-gather,nccl,0,3.0,1.049,1.0,0.3", "GPUs: 0: must be at least 1"),
    ("perlmutter,d,f,broadcast,nccl,16,3.0,1.049,1.0,0.3", "collective: 'broadcast'"),
    ("perlmutter,d,f,all-gather", "fewer fields than the header"),
])
def test_bad_values_in_the_reproducer_csv_name_the_line(tmp_path, row, message):
    path = _write(tmp_path / "measured.csv", CSV_HEADER + "perlmutter,d,f,all-gather,nccl,16,3.0,1.049,1.0,0.3\n"
                  + row + "\n")
    refused(tmp_path, "pccl-reproducer", path, contains=(f"{path}:3", message))


def _json(tmp_path: Path, edit) -> Path:
    doc = json.loads((NCCL / "all_reduce_perf.json").read_text())
    edit(doc)
    return _write(tmp_path / "all_reduce_perf.json", json.dumps(doc))


@pytest.mark.parametrize("edit, message", [
    (lambda doc: doc["results"][0].update(count=1e30), "results[0]: count: not an element count"),
    (lambda doc: doc["results"][1]["out_of_place"].update(time=float("inf")), "results[1]: out_of_place: time"),
    (lambda doc: doc["results"][1]["in_place"].update(time=-3.0), "results[1]: in_place: time: '-3.0' is not a time"),
    (lambda doc: doc["results"][0]["in_place"].update(nwrong=1e999), "nwrong"),
    (lambda doc: doc["config"].update(nthreads=0), "config: nthreads: '0' is not a whole number >= 1"),
    (lambda doc: doc["config"].update(ngpus=1e999), "config: ngpus"),
    (lambda doc: doc["config"].update(iterations=-1), "config: iterations"),
    (lambda doc: doc["results"][2].update(size=999), "results[2]: size 999 is not count 4194304 x 4 B"),
])
def test_bad_numbers_in_nccl_tests_json_name_the_record(tmp_path, edit, message):
    path = _json(tmp_path, edit)
    refused(tmp_path, "nccl-tests", path, contains=(str(path), message))


def test_deep_json_is_refused_without_recursion(tmp_path):
    """json.loads recursed into 200,000 nested lists and died with RecursionError (exit 1)."""
    path = _write(tmp_path / "all_reduce_perf.json", '{"results": ' + "[" * 200_000 + "]" * 200_000 + "}")
    refused(tmp_path, "nccl-tests", path, contains=(str(path), "JSON nested 200001 deep"))
    brackets_in_strings = _json(tmp_path, lambda doc: doc.update(env=["[" * 5000]))
    code, _, stderr = run_in_process("import", "nccl-tests", str(brackets_in_strings), "--out", str(tmp_path / "ok"))
    assert code == 0, stderr  # brackets inside strings are not nesting


def test_oversized_json_is_refused_unread(tmp_path):
    path = tmp_path / "all_reduce_perf.json"
    with path.open("w") as handle:
        handle.write('{"results": [], "pad": "')
        for _ in range(33):  # beyond the 32 MiB any nccl-tests JSON stays under
            handle.write("x" * 2**20)
    refused(tmp_path, "nccl-tests", path, contains=(str(path), "larger than 32 MiB"))


# -- only regular files are read ------------------------------------------------------------------------


def test_a_fifo_never_blocks(tmp_path):
    """The old importer opened a FIFO and waited for a writer forever."""
    fifo = tmp_path / "all_gather_perf.txt"
    os.mkfifo(fifo)
    started = time.monotonic()
    done = run_cli("import", "nccl-tests", fifo, "--out", tmp_path / "out", timeout=60)
    assert done.returncode == 2 and "FIFO" in done.stderr and str(fifo) in done.stderr, done.stderr
    assert len(done.stderr.splitlines()) == 1 and "Traceback" not in done.stderr
    assert time.monotonic() - started < 30 and not (tmp_path / "out").exists()


@pytest.mark.parametrize("make, words", [
    (lambda d: d, ("a folder, not a regular file",)),
    (lambda d: Path("/dev/null"), ("a character device, not a regular file",)),
    (lambda d: d / "missing.txt", ("cannot read: no such file",)),
    (lambda d: _symlink(d / "link.txt", _fifo(d / "pipe")), ("a FIFO",)),
    (lambda d: _socket(d / "s.sock"), ("a socket, not a regular file",)),
])
def test_only_regular_files_are_read(tmp_path, make, words):
    inputs = tmp_path / "inputs"
    inputs.mkdir()
    path = make(inputs)
    refused(tmp_path, "nccl-tests", path, contains=(str(path), *words))


def _fifo(path: Path) -> Path:
    os.mkfifo(path)
    return path


def _symlink(path: Path, target: Path) -> Path:
    path.symlink_to(target)
    return path


def _socket(path: Path) -> Path:
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(str(path))
    server.close()  # the socket file stays
    return path


def test_a_bad_later_file_is_found_before_the_first_is_parsed(tmp_path):
    """Every FILE is checked (regular, of this tool) before any is read: no work is wasted."""
    refused(tmp_path, "nccl-tests", NCCL / "all_gather_perf.txt", OSU / "osu_allreduce.txt",
            contains=("osu_allreduce.txt", "looks like OSU"))


# -- runs in one log ---------------------------------------------------------------------------------


def test_a_log_of_several_tests_is_two_runs(tmp_path):
    """Issue 47: the old importer refused a log of two tests (before that, labelled every line with the
    first test's collective); each run is now read on its own, its collective from its own header."""
    path = _write(tmp_path / "job.log", (NCCL / "all_gather_perf.txt").read_text()
                  + (NCCL / "reduce_scatter_perf.txt").read_text())
    code, _, stderr = run_in_process("import", "nccl-tests", str(path), "--out", str(tmp_path / "out"))
    assert code == 0, stderr
    table = pd.read_parquet(tmp_path / "out" / "results.parquet")
    by_run = table.groupby("run_id").collective.unique().map(list).tolist()
    assert sorted(by_run) == [["allgather"], ["reduce_scatter"]]
    assert table.launch_id.nunique() == 2 and all(launch.startswith("job.log:") for launch in table.launch_id)


def test_runs_of_different_rank_counts_are_two_runs(tmp_path):
    """Issue 47: was refused; each run has its own rank count (its own '#  Rank' lines)."""
    eight = (NCCL / "all_gather_perf.txt").read_text()
    four = [line for line in eight.splitlines() if not any(f"Rank  {r}" in line for r in range(4, 8))]
    # an all_gather on 4 ranks: size = count x 4 B x 4
    four = [re.sub(r"^\s*\d+", f"{int(line.split()[1]) * 16:>12}", line)
            if len(line.split()) > 3 and line.split()[2] == "float" else line for line in four]
    path = _write(tmp_path / "job.log", eight + "\n".join(four) + "\n")
    code, _, stderr = run_in_process("import", "nccl-tests", str(path), "--out", str(tmp_path / "out"))
    assert code == 0, stderr
    table = pd.read_parquet(tmp_path / "out" / "results.parquet")
    assert sorted(table.groupby("run_id").nranks.unique().map(list).tolist()) == [[4], [8]]


def _generator():
    spec = importlib.util.spec_from_file_location("import_large", ROOT / "benchmarks" / "import_large.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_a_log_of_many_runs_streams_into_one_table(tmp_path):
    """300 runs (18,600 cells, more than one chunk): each run a repeat of the same 62 cells, every
    value as printed, results.csv the same table as results.parquet, cell keys those of Cell.key."""
    generator = _generator()
    log = tmp_path / "slurm.out"
    runs = 300
    facts = generator.generate(log, runs=runs)
    assert facts["runs"] == runs and facts["cells"] > CHUNK_ROWS
    out = tmp_path / "run"
    started = time.monotonic()
    code, stdout, stderr = run_in_process("import", "nccl-tests", str(log), "--out", str(out))
    assert code == 0, stderr
    assert time.monotonic() - started < 60
    # each run its own run_id (issue 47: runs were one), said on stderr for the first 20, the rest in meta.json
    assert stderr.count("nranks=16 from 16 '#  Rank N ... device' lines") == 20
    assert f"{runs - 20} more runs, each in meta.json imported_from" in stderr
    assert stdout.startswith(f"{facts['cells']} cells (allreduce on 16 ranks), 0 with per-iteration samples")
    table = pd.read_parquet(out / "results.parquet")
    assert len(table) == facts["cells"] and table.cell_key.is_unique
    assert table.groupby(["count_per_rank", "placement"]).repeat.agg(sorted).map(list).eq(
        [list(range(runs))] * 62).all()
    assert table.run_id.nunique() == runs
    # the printed times, in file order: out-of-place then in-place of each line
    printed = [float(token) for line in log.read_text().splitlines() if line.strip() and line.split()[0].isdigit()
               for token in (line.split()[5], line.split()[9])]
    assert table.time_us_mean.tolist() == printed and table.time_us_p50.tolist() == printed
    assert (table.bytes_total == table.count_per_rank * 4).all() and set(table.nnodes) == {2}
    assert set(table.hosts) == {"nid000001,nid000002"} and set(table.status) == {"ok"}
    csv = pd.read_csv(out / "results.csv")
    assert list(csv.columns) == list(table.columns) and len(csv) == len(table)
    assert csv.cell_key.tolist() == table.cell_key.tolist()
    assert csv.busbw_gbps.tolist() == table.busbw_gbps.tolist()  # repr: exact
    for row in table.sample(5, random_state=1).itertuples():
        cell = Cell(collective=row.collective, impl=row.impl, algorithm=row.algorithm, intra=row.intra,
                    inter=row.inter, device=row.device, nranks=row.nranks, nnodes=row.nnodes,
                    ranks_per_node=row.ranks_per_node, virtual_nodes=False, dtype=row.dtype, op=row.op,
                    placement=row.placement, count_per_rank=row.count_per_rank, bytes_per_rank=row.bytes_per_rank,
                    bytes_total=row.bytes_total, timing_mode=row.timing_mode, repeat=row.repeat,
                    hosts_digest=row.planned_hosts_digest,  # schema 2: the key holds the placement
                    buffers=row.buffers)  # nccl-tests' rotate: in the key
        assert cell.key == row.cell_key and row.planned_hosts_digest == hosts_digest(row.hosts.split(","))


def test_a_bad_line_deep_in_a_large_log_leaves_nothing(tmp_path):
    """Rows stream to temp files while the log is read: a bad line near its end removes them all."""
    log = tmp_path / "slurm.out"
    _generator().generate(log, runs=200)
    lines = log.read_text().splitlines()
    number = len(lines) - 20
    assert lines[number - 1].split()[0].isdigit()
    lines[number - 1] = lines[number - 1].replace("float", "half ", 1)
    log.write_text("\n".join(lines) + "\n")
    refused(tmp_path, "nccl-tests", log, contains=(f"{log}:{number}", "is not count"))
    empty = tmp_path / "empty"
    empty.mkdir()
    refused(tmp_path, "nccl-tests", log, out=empty, contains=(f"{log}:{number}",))
    assert list(empty.iterdir()) == []


# -- where the run goes ------------------------------------------------------------------------------


def test_out_is_checked_before_any_input_is_read(tmp_path):
    """--out a file, and the input a FIFO: the answer is about --out, at once (the FIFO is never opened)."""
    target = _write(tmp_path / "taken.txt", "mine\n")
    fifo = _fifo(tmp_path / "all_gather_perf.txt")
    done = run_cli("import", "nccl-tests", fifo, "--out", target, timeout=60)
    assert done.returncode == 2 and "--out" in done.stderr and "is a file" in done.stderr, done.stderr
    assert target.read_text() == "mine\n"


@pytest.mark.parametrize("make, words", [
    (lambda d: _write(d / "file", "x"), ("--out", "is a file, not a folder")),
    (lambda d: _write(d / "file", "x") / "run", ("--out", "is a file, not a folder")),
    (lambda d: d / ("n" * 300), ("--out", "longer than 255 bytes")),
    (lambda d: d / "results" / "baselines" / "nccl", ("--out", "inside results/baselines/")),
])
def test_bad_out_folders_are_refused(tmp_path, monkeypatch, make, words):
    monkeypatch.chdir(tmp_path)  # results/baselines/ is relative to the working directory
    out = make(tmp_path)
    (tmp_path / "results" / "baselines").mkdir(parents=True)
    refused(tmp_path, "nccl-tests", NCCL / "all_gather_perf.txt", out=out, contains=words)


def test_an_existing_run_is_never_overwritten(tmp_path):
    measured = tmp_path / "measured"
    code, _, stderr = run_in_process("import", "osu", str(OSU / "osu_allreduce.txt"), "--nranks", "2",
                                     "--out", str(measured))
    assert code == 0, stderr
    before = {path.name: path.read_bytes() for path in measured.iterdir()}
    refused(tmp_path, "nccl-tests", NCCL / "all_gather_perf.txt", out=measured,
            contains=("--out", "already holds a run", "results.parquet"))
    assert {path.name: path.read_bytes() for path in measured.iterdir()} == before
    # a sweep still running: its parts and meta.json, no table yet (the old import overwrote meta.json)
    running = tmp_path / "running"
    (running / "parts").mkdir(parents=True)
    _write(running / "meta.json", '{"run_id": "sweep"}\n')
    refused(tmp_path, "nccl-tests", NCCL / "all_gather_perf.txt", out=running,
            contains=("already holds a run", "meta.json", "parts"))
    assert (running / "meta.json").read_text() == '{"run_id": "sweep"}\n'


# -- flags -------------------------------------------------------------------------------------------


@pytest.mark.parametrize("flags, words", [
    (("--nranks", "0"), ("--nranks", "0: expected a count")),
    (("--nranks", "-5"), ("--nranks", "-5: expected a count")),
    (("--nranks", "8", "--nnodes", "9"), ("--nnodes", "9 nodes for 8 ranks")),
    (("--impl", "a\nb"), ("--impl", "printable name")),
    (("--library", "  "), ("--library",)),
])
def test_bad_flags_are_refused(tmp_path, flags, words):
    refused(tmp_path, "osu", OSU / "osu_allreduce.txt", *flags, contains=words)
