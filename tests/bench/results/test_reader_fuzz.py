"""Property: whatever a result folder, an importer's log or a machine description holds, the
commands that read it answer a verdict (exit 0, or 1 for a gate that finds a regression) or exit
2 with one line on stderr, never a traceback, and write nothing outside their output folder.

The inputs are real ones mutated: the committed ci baseline's tables (a column dropped, re-typed
or given hostile values in some rows), its meta.json (random JSON, truncated, deep), the logs in
tests/data (bytes inserted, deleted, replaced, lines repeated), suites/machines/*.yaml (fields
given hostile values). Everything runs in this process through the CLI's entry point; no MPI job
is started. PCCL_FUZZ_EXAMPLES raises the examples per property (default 8; CI runs the default).
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from datetime import timedelta
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml
from conftest import ROOT
from hostile import files_under, mutate_bytes, run_in_process, small_run

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

EXAMPLES = int(os.environ.get("PCCL_FUZZ_EXAMPLES", "8"))
FUZZ = settings(max_examples=EXAMPLES, deadline=timedelta(seconds=120), database=None,  # a hang guard
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])

GOOD = small_run(Path(tempfile.mkdtemp(prefix="pccl-fuzz-good-")) / "run", cells=6)
RESULTS = pd.read_parquet(GOOD / "results.parquet")
SAMPLES = pd.read_parquet(GOOD / "samples.parquet")
LOGS = {path: path.read_bytes() for path in sorted((ROOT / "tests" / "data").glob("*/*"))
        if path.suffix in (".txt", ".json", ".out")}
#: the importer of each folder's logs (tests/data/corpus: every format, read by --auto)
FORMAT = {"nccl-tests": "nccl-tests", "osu": "osu", "pccl-reproducer": "pccl-reproducer", "corpus": "auto"}
TOOLS = ("nccl-tests", "osu", "imb", "pccl-reproducer")
MACHINES = {path.name: yaml.safe_load(path.read_text())
            for path in sorted((ROOT / "suites" / "machines").glob("*.yaml"))}

HOSTILE = st.one_of(
    st.none(), st.booleans(), st.integers(-(2**63), 2**63 - 1), st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from([0, -1, 1e308, -1e308, 2**62, "", "[/nope]", "\x1b]8;;x\x07", "<script>", "../../x", "/abs",
                     "\x01\x0b", "ok", "nan"]),
    st.text(max_size=10),
)


def assert_contract(argv: tuple, out: Path, allowed: tuple[int, ...] = (0, 2)) -> int:
    before = files_under(out.parent)
    code, stdout, stderr = run_in_process(*argv)
    shown = f"{' '.join(map(str, argv))}\nexit {code}\nstdout: {stdout[-1500:]}\nstderr: {stderr[-1500:]}"
    assert code in allowed, shown
    assert "Traceback" not in stdout + stderr, shown
    if code == 2:
        lines = stderr.splitlines()
        assert len(lines) == 1 and lines[0].startswith("pccl-bench: error: ") and len(lines[0]) < 1000, shown
    outside = {path for path in files_under(out.parent) - before if out not in path.parents and path != out}
    assert not outside, f"written outside {out}: {sorted(outside)[:3]}\n{shown}"
    return code


def _column_values(values: list, dtype_of: pd.Series) -> pd.Series:
    """Hostile values as one column Parquet can hold (it refuses mixed kinds: fall back to text)."""
    series = pd.Series(values, index=dtype_of.index)
    try:
        import pyarrow as pa

        pa.array(series, from_pandas=True)
        return series
    except Exception:
        return series.map(lambda value: None if value is None else str(value))


@st.composite
def table_mutations(draw) -> tuple[pd.DataFrame, pd.DataFrame]:
    results, samples = RESULTS.copy(), SAMPLES.copy()
    for _ in range(draw(st.integers(1, 3))):
        frame = draw(st.sampled_from(["results", "samples"]))
        table = results if frame == "results" else samples
        column = draw(st.sampled_from(list(table.columns)))
        kind = draw(st.sampled_from(["drop", "rows", "all", "scale"]))
        if kind == "drop":
            table = table.drop(columns=column)
        elif kind == "scale" and pd.api.types.is_numeric_dtype(table[column]):
            table[column] = table[column] * draw(st.sampled_from([-1, 0, 1e300, 1.25, 2**40]))
        else:
            value = draw(HOSTILE)
            rows = draw(st.integers(1, len(table))) if kind == "rows" else len(table)
            values = list(table[column].astype(object))
            for position in draw(st.lists(st.integers(0, len(table) - 1), min_size=1, max_size=rows)):
                values[position] = value
            table[column] = _column_values(values, table[column])
        results, samples = (table, samples) if frame == "results" else (results, table)
    return results, samples


def _write(folder: Path, results: pd.DataFrame, samples: pd.DataFrame, meta: bytes) -> Path:
    folder.mkdir(parents=True)
    results.to_parquet(folder / "results.parquet", index=False)
    samples.to_parquet(folder / "samples.parquet", index=False)
    (folder / "meta.json").write_bytes(meta)
    return folder


@FUZZ
@given(tables=table_mutations())
def test_mutated_tables_keep_the_contract(tables):
    with tempfile.TemporaryDirectory(prefix="pccl-fuzz-") as scratch:
        run = _write(Path(scratch) / "run", *tables, (GOOD / "meta.json").read_bytes())
        out = Path(scratch) / "out"
        assert_contract(("gate", GOOD, run, "--resamples", "100", "--junit", out / "g.xml"), out, (0, 1, 2))
        assert_contract(("gate", run, GOOD, "--resamples", "100", "--markdown", out / "g.md"), out, (0, 1, 2))
        assert_contract(("tune", run, "-o", out / "tuning.json"), out)
        assert_contract(("report", run, "-o", out / "report"), out, (0, 1, 2))


META_VALUES = st.recursive(HOSTILE, lambda inner: st.one_of(st.lists(inner, max_size=3),
                                                            st.dictionaries(st.text(max_size=6), inner, max_size=3)),
                           max_leaves=10)


@st.composite
def meta_mutations(draw) -> bytes:
    meta = json.loads((GOOD / "meta.json").read_text())
    kind = draw(st.sampled_from(["field", "replace", "truncate", "deep"]))
    if kind == "field":
        key = draw(st.one_of(st.sampled_from(sorted(meta)), st.text(max_size=6)))
        meta[key] = draw(META_VALUES)
        return json.dumps(meta, allow_nan=True).encode()
    if kind == "replace":
        return json.dumps(draw(META_VALUES), allow_nan=True).encode()
    text = json.dumps(meta).encode()
    if kind == "truncate":
        return text[: draw(st.integers(0, len(text) - 1))]
    depth = draw(st.integers(50, 100_000))
    return b'{"schema_version": 1, "x": ' + b"[" * depth + b"]" * depth + b"}"


@FUZZ
@given(meta=meta_mutations())
def test_mutated_meta_keeps_the_contract(meta):
    with tempfile.TemporaryDirectory(prefix="pccl-fuzz-") as scratch:
        run = _write(Path(scratch) / "run", RESULTS, SAMPLES, meta)
        out = Path(scratch) / "out"
        assert_contract(("report", run, "-o", out / "report"), out, (0, 1, 2))
        assert_contract(("gate", GOOD, run, "--resamples", "100"), out, (0, 1, 2))


SPECIALS = [b" ", b"#", b"\n", b"-1", b"0", b"nan", b"inf", b"1e999", b"99999999999999999999999", b"{", b"[",
            b'"', b"\x00", b"\xff", b"N/A", b"# nThread 0", b"for 0 GPUs", b"srun -N 0"]


@st.composite
def log_mutations(draw) -> tuple[Path, bytes]:
    path = draw(st.sampled_from(sorted(LOGS)))
    return path, mutate_bytes(draw, LOGS[path], SPECIALS, edits=5, longest_delete=40, most_copies=3)


@FUZZ
@given(log=log_mutations(), other_format=st.booleans())
def test_mutated_logs_keep_the_contract(log, other_format):
    path, data = log
    tool = FORMAT[path.parent.name]
    if other_format:  # a log given to the wrong importer
        tool = sorted(set(TOOLS) - {tool})[len(data) % 3]
    with tempfile.TemporaryDirectory(prefix="pccl-fuzz-") as scratch:
        source = Path(scratch) / path.name
        source.write_bytes(data)
        out = Path(scratch) / "out"
        assert_contract(("import", tool, source, "--out", out), out)


@st.composite
def machine_mutations(draw) -> tuple[str, dict]:
    name = draw(st.sampled_from(sorted(MACHINES)))
    machine = json.loads(json.dumps(MACHINES[name]))
    for _ in range(draw(st.integers(1, 3))):
        node, key = machine, None
        path = []
        while isinstance(node, dict) and node:
            key = draw(st.sampled_from(sorted(node, key=str)))
            path.append(key)
            if not isinstance(node[key], dict) or draw(st.booleans()):
                break
            node = node[key]
        if key is not None and isinstance(node, dict):
            node[key] = draw(HOSTILE)
    return name, machine


@FUZZ
@given(machine=machine_mutations())
def test_mutated_machines_keep_the_contract(machine):
    name, description = machine
    with tempfile.TemporaryDirectory(prefix="pccl-fuzz-") as scratch:
        file = Path(scratch) / name
        try:
            file.write_text(yaml.safe_dump(description, allow_unicode=True))
        except (UnicodeEncodeError, ValueError):
            return  # a text YAML cannot write (a lone surrogate): not an input a file can hold
        out = Path(scratch) / "out"
        assert_contract(("model", "run", file, "-n", "8,64", "--sizes", "1KiB:1MiB", "-f", "32", "-o", out), out)


def teardown_module() -> None:
    shutil.rmtree(GOOD.parent, ignore_errors=True)


def test_the_fuzz_inputs_are_real():
    """The properties above mutate real inputs: the unmutated ones pass."""
    assert np.isfinite(RESULTS["time_us_p50"]).all() and len(LOGS) >= 10 and len(MACHINES) >= 4
    with tempfile.TemporaryDirectory(prefix="pccl-fuzz-") as scratch:
        out = Path(scratch) / "out"
        assert assert_contract(("gate", GOOD, GOOD, "--resamples", "100"), out) == 0
        for path in sorted(LOGS)[:3]:
            assert assert_contract(("import", FORMAT[path.parent.name], path, "--out", out / path.stem), out) == 0
