"""Result folders that break the table contract, and gate/ab flags that would judge blind: every
command that reads results answers exit 2 with one line naming the file, the column and the bad
value, before any work, and writes nothing (issue: every reader hardened)."""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from conftest import ROOT
from hostile import assert_bad_input, files_under, run_in_process, small_run

#: every command that reads a results folder, with its output (all inside ``out``)
READERS = {
    "gate": lambda run, out: ("gate", run, run, "--resamples", "100", "--junit", out / "gate.xml"),
    "plot": lambda run, out: ("plot", run, "-o", out / "plots"),
    "report": lambda run, out: ("report", run, "-o", out / "report"),
    "tune": lambda run, out: ("tune", run, "-o", out / "tuning.json"),
    "model fit": lambda run, out: ("model", "fit", run, "-o", out / "fitted.yaml"),
    "model check": lambda run, out: ("model", "check", "local", run, "--errors", out / "errors.csv"),
}


@pytest.fixture(scope="module")
def good(tmp_path_factory) -> Path:
    return small_run(tmp_path_factory.mktemp("good") / "run")


def _mutated(good: Path, folder: Path, results=None, samples=None) -> Path:
    """A copy of ``good`` with its tables changed by ``results(frame)`` / ``samples(frame)``."""
    folder.mkdir()
    for name, change in (("results.parquet", results), ("samples.parquet", samples)):
        frame = pd.read_parquet(good / name)
        (change(frame) if change else frame).to_parquet(folder / name, index=False)
    (folder / "meta.json").write_bytes((good / "meta.json").read_bytes())
    return folder


def _assert_every_reader_refuses(run: Path, out: Path, *names: str, commands: tuple[str, ...] = tuple(READERS)) -> None:
    out.mkdir(exist_ok=True)
    before = files_under(run.parent)
    for command in commands:
        argv = READERS[command]
        line = assert_bad_input(run_in_process(*argv(run, out)), *names)
        assert str(run) in line, f"{command}: {line}"
        assert files_under(run.parent) == before, f"{command} wrote something"


def _set(column: str, value, rows=slice(None)):
    def change(frame: pd.DataFrame) -> pd.DataFrame:
        frame[column] = frame[column].astype(object)
        frame.loc[frame.index[rows], column] = value
        return frame
    return change


@pytest.mark.parametrize("column", ["status", "cell_key", "bytes_total", "nranks", "run_id", "impl"])
def test_a_missing_column_is_named(good, tmp_path, column):
    run = _mutated(good, tmp_path / "run", results=lambda frame: frame.drop(columns=column))
    _assert_every_reader_refuses(run, tmp_path / "out", "results.parquet", column)


@pytest.mark.parametrize(("column", "value"), [
    ("cell_key", None), ("impl", np.nan), ("nranks", 2.5),
    ("nranks", 0), ("bytes_total", -8), ("bytes_total", 2**63 - 1), ("time_us_p50", -1.0),
    ("time_us_p50", np.inf), ("time_us_p50", 1e308), ("status", "great"),
])
def test_a_bad_value_is_named_with_its_column(good, tmp_path, column, value):
    run = _mutated(good, tmp_path / "run", results=_set(column, value, slice(3, 4)))
    # one reader serves every command (the missing-column cases above run them all): three suffice
    _assert_every_reader_refuses(run, tmp_path / "out", "results.parquet", column, "row 3",
                                 commands=("gate", "plot", "model check"))


@pytest.mark.parametrize(("column", "value"), [("collective", 7), ("nranks", "four"), ("status", 1.5)])
def test_a_column_of_the_wrong_kind_is_named(good, tmp_path, column, value):
    run = _mutated(good, tmp_path / "run", results=lambda frame: frame.assign(**{column: value}))
    _assert_every_reader_refuses(run, tmp_path / "out", "results.parquet", column)


@pytest.mark.parametrize("value", [1e308, -5.0, 0.0, np.nan, np.inf])
def test_garbage_samples_never_pass_the_gate(good, tmp_path, value):
    """All 1e308 passed ("PASS: 126 unchanged": the median overflowed), all negative or zero
    samples were "improved", a zero baseline was a ZeroDivisionError."""
    current = _mutated(good, tmp_path / "cur", samples=_set("time_us", value))
    for argv in (("gate", good, current), ("gate", current, good)):
        assert_bad_input(run_in_process(*argv, "--resamples", "100"), "samples.parquet", "time_us")


@pytest.mark.parametrize("column", ["nnodes", "ranks_per_node", "count_per_rank"])
def test_an_empty_count_of_a_cell_key_is_unknown_not_a_traceback(good, tmp_path, column):
    """An imported table may leave nnodes empty; an empty key count made every reader's gate cast
    NaN to int (IntCastingNaNError, found by test_reader_fuzz): the gate takes it as a key of its own."""
    def one_empty(frame):
        frame[column] = frame[column].astype(float)
        frame.loc[frame.index[0], column] = np.nan
        return frame

    current = _mutated(good, tmp_path / "cur", results=one_empty)
    for argv in (("gate", good, current), ("gate", current, good)):
        code, stdout, stderr = run_in_process(*argv, "--resamples", "100")
        assert code in (0, 1) and "Traceback" not in stdout + stderr, (code, stdout[-500:], stderr[-500:])
        assert "missing" in stdout or "new" in stdout  # the cell of the unknown count is a cell of its own


def test_a_nan_median_in_the_gate_is_not_a_pass():
    """Defence behind the reader: an estimate that is not finite is never 'unchanged'."""
    from bench.judge.gate import CellVerdict, GateOptions, _judge_pair

    cell = CellVerdict((), "x", {}, "unchanged", threshold=0.1)
    huge = {"r": {"l": np.full(40, 1e308)}}
    _judge_pair(cell, huge, huge, None, GateOptions(resamples=100))
    assert cell.verdict == "insufficient" and "no finite ratio" in cell.reason


@pytest.mark.parametrize(("flags", "named"), [
    (("--threshold", "nan"), "--threshold"), (("--small-threshold", "nan"), "--small-threshold"),
    (("--threshold", "-0.5"), "--threshold"), (("--threshold", "inf"), "--threshold"),
    (("--confidence", "nan"), "--confidence"), (("--seed", "-1"), "--seed"),
    (("--resamples", "1000000000"), "--resamples"), (("--min-samples", "0"), "--min-samples"),
])
def test_gate_flags_are_checked(good, tmp_path, flags, named):
    assert_bad_input(run_in_process("gate", good, good, *flags), named)


@pytest.mark.parametrize(("flags", "named"), [
    (("--confirm", "1000000000000"), "--confirm"), (("--threshold=-0.5",), "--threshold"),
    (("--small-threshold", "nan"), "--small-threshold"), (("--arms", "base", "nosuch"), "nosuch"),
    (("--junit", "{out}"), "--junit"),
])
def test_ab_flags_are_checked_before_measuring(tmp_path, flags, named):
    suite = ROOT / "suites" / "ci-ab.yaml"
    out = tmp_path / "ab"
    flags = tuple(flag.replace("{out}", str(tmp_path)) for flag in flags)
    assert_bad_input(run_in_process("ab", suite, "--out", out, *flags), named)
    assert not out.exists(), "ab measured before checking its flags"


@pytest.mark.parametrize("flag", ["--junit", "--markdown", "--json"])
def test_gate_outputs_are_checked_before_judging(good, tmp_path, flag):
    (tmp_path / "file").write_text("x")
    for target in (tmp_path, tmp_path / "file" / "x.xml", tmp_path / ("n" * 300)):
        assert_bad_input(run_in_process("gate", good, good, flag, target), flag)
    assert_bad_input(run_in_process("gate", good, good, flag, Path("results/baselines/ci/x.md")), "baseline")


def test_deep_or_huge_meta_json_is_one_line(good, tmp_path):
    deep = _mutated(good, tmp_path / "deep")
    (deep / "meta.json").write_text("[" * 200_000 + "]" * 200_000)
    assert_bad_input(run_in_process("gate", good, deep, "--resamples", "100"), "meta.json", "deeper")
    nested = _mutated(good, tmp_path / "nested")
    (nested / "meta.json").write_text(json.dumps({"schema_version": 1, "y": json.loads("[" * 90 + "]" * 90)}))
    assert_bad_input(run_in_process("report", nested, "-o", tmp_path / "report"), "meta.json", "deeper")
    listed = _mutated(good, tmp_path / "listed")
    (listed / "meta.json").write_text("[1, 2]")
    assert_bad_input(run_in_process("report", listed, "-o", tmp_path / "report"), "meta.json", "object")


@pytest.mark.parametrize("name", ["meta.json", "results.parquet", "samples.parquet"])
def test_a_fifo_in_a_run_folder_does_not_block(good, tmp_path, name):
    run = _mutated(good, tmp_path / "run")
    (run / name).unlink()
    os.mkfifo(run / name)
    done: list = []
    worker = threading.Thread(target=lambda: done.append(run_in_process("gate", good, run, "--resamples", "100")),
                              daemon=True)
    worker.start()
    worker.join(10)
    if not done:  # unblock the reader so that the thread ends, then fail
        with open(run / name, "wb") as fifo:
            fifo.write(b"x")
        worker.join(5)
        pytest.fail(f"gate blocked on a FIFO {name}")
    assert_bad_input(done[0], name, "FIFO")


def test_a_symlink_loop_is_one_line(good, tmp_path):
    run = _mutated(good, tmp_path / "run")
    (run / "samples.parquet").unlink()
    (run / "samples.parquet").symlink_to(run / "samples.parquet")
    assert_bad_input(run_in_process("gate", good, run, "--resamples", "100"), "samples.parquet")


def test_categorical_samples_keep_their_verdicts(good, tmp_path):
    """The reader's categorical samples (bounded memory) judge as the plain strings did."""
    slower = _mutated(good, tmp_path / "slow", samples=lambda frame: frame.assign(time_us=frame["time_us"] * 2))
    code, stdout, _ = run_in_process("gate", good, slower, "--resamples", "200", "--all")
    assert code == 1 and "regressed" in stdout
    code, stdout, _ = run_in_process("gate", good, good, "--resamples", "200")
    assert code == 0 and "unchanged" in stdout
