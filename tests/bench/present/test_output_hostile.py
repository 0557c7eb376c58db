"""Names from data are data: hostile collective, implementation, algorithm and error strings in a
result table, and odd meta.json fields, reach every output safely.

- ``plot``: every file it writes lies inside ``-o`` (names go through bench.files.slug; two names
  that slug alike get distinct files), and a name with ``$`` is not parsed as mathtext;
- ``gate``/``tune``/the sweep's summary: Rich markup (``[/nope]``) and escape sequences are printed as text;
- ``gate --junit``: well-formed XML without the characters XML 1.0 forbids;
- ``gate --markdown`` and report.md: no raw HTML from the data;
- ``report``: meta.json ``started`` (and the other fields it reads) of any JSON type;
- ``plot -o``, ``report -o``, ``tune -o``: checked (exit 2, one line) before any work.

Runs are written as a sweep writes them (tests/bench/judge/test_gate.py's ``make_run``) with the hostile names
in their cells, so results and samples agree; the CLI runs in this process.
"""

from __future__ import annotations

import io
import json
import time
import xml.etree.ElementTree as ET
from dataclasses import replace
from pathlib import Path

import pandas as pd
import pytest
from hostile import run_in_process
from rich.console import Console
from synthetic_runs import cell, make_run
from test_console import row

from bench.present import console as screen
from bench.present import plot as plots

MARKUP = "[/nope]"
ESCAPES = "\x1b[31mred\x1b]0;title\x07"
SCRIPT = "<script>alert(1)</script>"
IMG = '<img src=x onerror="alert(1)">'
XML_ILLEGAL = "a\x01b\x0bc"
#: a hang or a runaway guard, not a speed test: one command takes 1-6 s here, 11 s once beside a
#: second test worker and other load
SECONDS = 60




def timed(*argv: object) -> tuple[int, str, str]:
    started = time.monotonic()
    code, stdout, stderr = run_in_process(*argv)
    assert time.monotonic() - started < SECONDS, f"{argv} took {time.monotonic() - started:.1f} s"
    assert "Traceback" not in stdout + stderr, stderr[-3000:]
    return code, stdout, stderr


def one_error_line(code: int, stderr: str, *needed: str) -> str:
    assert code == 2, stderr
    lines = stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("pccl-bench: error: "), stderr
    for text in needed:
        assert text in lines[0], lines[0]
    return lines[0]


def files_under(folder: Path) -> set[Path]:
    return {path for path in folder.rglob("*") if path.is_file()}


def pair(algorithm: str = "ring", sizes: tuple[int, ...] = (64, 4096), op: str = "sum") -> dict:
    """mpi and pccl-flat:<algorithm> all-reduce at ``sizes``: {Cell: median us}; ``op`` tags the cells
    for ``rename_collectives``."""
    return {replace(cell("allreduce", impl, name, size), op=op): 10.0 + size / 1000 * (1 if impl == "mpi" else 0.8)
            for impl, name in (("mpi", "native"), ("pccl-flat", algorithm)) for size in sizes}


def rename_collectives(run: Path, names: dict[str, str]) -> None:
    """Cells tagged with op ``tag`` become collective ``names[tag]`` (op sum) in results and samples
    alike, so the two tables still agree (a table is written with known collectives: bandwidth needs one)."""
    for file in (run / "results.parquet", run / "samples.parquet"):
        frame = pd.read_parquet(file)
        for tag, name in names.items():
            frame.loc[frame["op"].eq(tag), ["collective", "op"]] = [name, "sum"]
        frame.to_parquet(file, index=False)


def set_errors(run: Path, error: str) -> None:
    """Give the rows that did not run an error string (make_run writes "")."""
    table = run / "results.parquet"
    frame = pd.read_parquet(table)
    frame.loc[frame["status"].ne("ok"), "error"] = error
    frame.to_parquet(table, index=False)


# ------------------------------------------------------------------ plot: file names

def test_plot_writes_every_file_inside_out_and_keeps_names_apart(tmp_path):
    absolute = str(tmp_path / "absolute")
    collectives = ["../../escaped", absolute, "a/b", "a_b", "a b"]  # the last three slug alike
    cells = {spec: us for index in range(len(collectives)) for spec, us in pair(MARKUP, op=f"tag{index}").items()}
    run = make_run(tmp_path / "run", cells, "hostile-plot", launches=1, iters=8)
    rename_collectives(run, {f"tag{index}": name for index, name in enumerate(collectives)})
    out = tmp_path / "deep" / "er" / "out"  # ../../ from here is still inside tmp_path: nothing leaks
    before = files_under(tmp_path)
    code, stdout, stderr = timed("plot", run, "-o", out)
    assert code == 0, stderr
    written = files_under(tmp_path) - before
    assert written and all(path.parent == out for path in written), sorted(map(str, written))
    printed = [Path(line) for line in stdout.splitlines()]
    assert {path.resolve() for path in printed} == {path.resolve() for path in written}
    latency = sorted(path.name for path in written if path.name.endswith("-latency.png"))
    assert len(latency) == len(collectives), latency  # none overwrote another
    assert not (tmp_path / "deep" / "escaped-latency.png").exists() and not Path(absolute + "-latency.png").exists()


def test_plot_names_with_dollars_are_text_not_mathtext(tmp_path):
    run = make_run(tmp_path / "run", pair("$\\frac{$", op="tag"), "dollars", launches=1, iters=8)
    rename_collectives(run, {"tag": "$\\nope$"})
    code, stdout, stderr = timed("plot", run, "-o", tmp_path / "out", "--format", "svg")
    assert code == 0, stderr
    svg = "".join(path.read_text() for path in (tmp_path / "out").glob("*.svg"))
    assert "$\\nope$" in svg and "pccl-flat:$\\frac{$" in svg  # shown as written


def test_save_never_overwrites_a_figure_given_twice(tmp_path):
    figures = [plots.plt.figure(figsize=(1, 1)) for _ in range(2)]
    written = plots.save([("same", figures[0]), ("same", figures[1])], tmp_path, ["png"])
    assert [path.name for path in written] == ["same.png", "same-2.png"]
    with pytest.raises(ValueError, match="plain file name"):
        plots.save([("../out", plots.plt.figure(figsize=(1, 1)))], tmp_path, ["png"])
    plots.plt.close("all")


@pytest.mark.parametrize("where", ["file", "under-file"])
def test_plot_and_report_check_out_before_any_work(tmp_path, where):
    run = make_run(tmp_path / "run", pair(), "ok-run", launches=1, iters=8)
    blocker = tmp_path / "blocker"
    blocker.write_text("keep me")
    out = blocker if where == "file" else blocker / "sub"
    for command in ("plot", "report"):
        before = {path: path.read_bytes() for path in files_under(tmp_path)}
        code, _, stderr = timed(command, run, "-o", out)
        one_error_line(code, stderr, "--out", str(blocker))
        assert {path: path.read_bytes() for path in files_under(tmp_path)} == before


def test_report_refuses_a_folder_where_report_md_goes(tmp_path):
    run = make_run(tmp_path / "run", pair(), "ok-run", launches=1, iters=8)
    (tmp_path / "out" / "report.md").mkdir(parents=True)
    code, _, stderr = timed("report", run, "-o", tmp_path / "out")
    one_error_line(code, stderr, "--out", "report.md")
    assert not (tmp_path / "out" / "report.html").exists()


# ------------------------------------------------------------------ gate: console, JUnit, Markdown

@pytest.fixture(scope="module")
def gate_runs(tmp_path_factory) -> tuple[Path, Path]:
    """A baseline and a current run whose cells carry hostile names; two current cells failed with a
    hostile error string, so that the gate prints them (verdict failed, the error in the note)."""
    folder = tmp_path_factory.mktemp("gate")
    markup, script = cell(impl="pccl-flat", algorithm=MARKUP), cell(impl="pccl-flat", algorithm=SCRIPT)
    illegal = replace(cell(impl="mpi"), op="tag")
    cells = {markup: 12.0, script: 11.0, illegal: 10.0, cell(): 10.0}
    base = make_run(folder / "base", cells, "base", seed=1)
    current = make_run(folder / "cur", cells, "cur", seed=2, status={markup: "failed", illegal: "failed"})
    set_errors(current, f"{ESCAPES} {IMG} {XML_ILLEGAL} {MARKUP}")
    for run in (base, current):
        rename_collectives(run, {"tag": XML_ILLEGAL + "&<"})
    return base, current


def test_gate_prints_markup_and_escape_sequences_as_text(gate_runs, tmp_path):
    base, current = gate_runs
    code, stdout, stderr = timed("gate", base, current)
    assert code == 1, stderr  # failed cells: a verdict, not a crash
    assert f"pccl-flat:{MARKUP}" in stdout and "FAIL" in stdout
    assert "\x1b" not in stdout + stderr and "\x07" not in stdout + stderr
    assert "\\x1b[31mred" in stdout  # the error string, shown escaped


def test_gate_junit_is_well_formed_without_illegal_characters(gate_runs, tmp_path):
    base, current = gate_runs
    code, _, stderr = timed("gate", base, current, "--junit", tmp_path / "g.xml")
    assert code == 1, stderr
    text = (tmp_path / "g.xml").read_text(encoding="utf-8")
    assert "\x01" not in text and "\x0b" not in text
    suite = ET.fromstring(text).find("testsuite")
    names = [case.get("name") for case in suite.iter("testcase")]
    assert len(names) == 4 and any(name.startswith("abc&<") for name in names), names
    assert any(f"pccl-flat:{SCRIPT}" in name for name in names)  # escaped by the writer, read back as given
    failures = [failure.get("message") for failure in suite.iter("failure")]
    assert len(failures) == 2 and all(IMG in message and "abc" in message for message in failures), failures


def test_gate_markdown_and_report_md_hold_no_raw_html(gate_runs, tmp_path):
    base, current = gate_runs
    code, _, stderr = timed("gate", base, current, "--markdown", tmp_path / "g.md")
    assert code == 1, stderr
    report = tmp_path / "report"
    code, _, stderr = timed("report", current, "--baseline", base, "-o", report)
    assert code == 0, stderr
    for file in (tmp_path / "g.md", report / "report.md", report / "report.html"):
        text = file.read_text(encoding="utf-8")
        assert "<script" not in text and "<img src=x" not in text, file
        assert "&lt;script&gt;" in text and "onerror" in text, file  # shown, as text
    assert "\x1b" not in (report / "report.md").read_text(encoding="utf-8")


# ------------------------------------------------------------------ tune

def test_tune_prints_names_as_text_and_checks_out_first(tmp_path):
    cells = {**pair(MARKUP), **{spec: us * 1.1 for spec, us in pair(ESCAPES).items()
                                          if spec.impl == "pccl-flat"}}
    run = make_run(tmp_path / "run", cells, "tune-run", launches=1, iters=8)
    code, stdout, stderr = timed("tune", run, "-o", tmp_path / "tuning.json")
    assert code == 0, stderr
    assert MARKUP in stdout and "\x1b" not in stdout + stderr and "\x07" not in stdout
    entries = json.loads((tmp_path / "tuning.json").read_text())["entries"]
    assert {entry["choice"] for entry in entries} == {MARKUP}  # data kept as data in the table itself
    (tmp_path / "folder").mkdir()
    code, _, stderr = timed("tune", tmp_path / "nowhere", "-o", tmp_path / "folder")
    one_error_line(code, stderr, "--out", "folder")  # the output is checked before the results are read


# ------------------------------------------------------------------ report: meta.json of any type

def test_report_shows_odd_meta_fields_as_unknown(tmp_path):
    """``started`` as text, out of any calendar, NaN, a list or null: the report is still written,
    with the value shown as unknown; fields that should be objects and are not are left out."""
    cases = [("yesterday", "unknown (yesterday)"), (1e20, "unknown (1e+20)"), (float("nan"), "unknown (nan)"),
             ([1, 2], "unknown ([1, 2])"), (None, "-")]
    runs = []
    for index, (started, _) in enumerate(cases):
        run = make_run(tmp_path / f"run{index}", pair(sizes=(64,)), f"odd-{index}", launches=1, iters=8)
        meta = json.loads((run / "meta.json").read_text())
        meta["started"] = started
        if index == 0:  # the other fields the report reads, of the wrong JSON type
            meta.update(machine="a string", versions=["x"], env=[1], launches={"l": 3})
        (run / "meta.json").write_text(json.dumps(meta))
        runs.append(run)
    code, _, stderr = timed("report", *runs, "-o", tmp_path / "report")
    assert code == 0, stderr
    markdown = (tmp_path / "report" / "report.md").read_text()
    rows = {line.split(" | ")[0][2:]: line.split(" | ") for line in markdown.splitlines() if line.startswith("| odd-")}
    assert [rows[f"odd-{index}"][2] for index in range(len(cases))] == [shown for _, shown in cases]


# ------------------------------------------------------------------ the sweep's summary (bench.present.console)

def test_summary_tables_reasons_and_progress_print_names_as_text():
    results = pd.DataFrame([
        row("mpi", collective=MARKUP),
        row("pccl-flat", algorithm=MARKUP + ESCAPES, collective=MARKUP),
        row("pccl-flat", status="failed", algorithm="[bold]x", error=f"{ESCAPES} {MARKUP}", collective=MARKUP,
            count_per_rank=512),
    ])
    out = Console(width=200, record=True, file=io.StringIO())
    for table in screen.summary_tables(results):
        out.print(table)
    for line in screen.reasons(results):
        out.print(line, markup=False, highlight=False)
    with screen.progress_bar(out) as bar:
        task = bar.add_task(MARKUP, total=2, current=f"{MARKUP} [bold]x")
        bar.advance(task)
    text = out.export_text()
    assert f"pccl-flat:{MARKUP}" in text and "pccl-flat:[bold]x" in text and f"{MARKUP} [bold]x" in text
    assert "\x1b" not in text and "\x07" not in text
    assert all("\x1b" not in line for line in screen.reasons(results))
