"""``pccl-bench report RESULTS... [--baseline B]``."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from bench.files import output_file, output_folder
from bench.judge.gate import GateOptions, gate
from bench.judge.gate_output import write_text
from bench.results.runset import load_runs


def report(
    results: Annotated[list[Path], typer.Argument(help="Run folders, results.parquet files or folders of runs "
                                                       "(pooled; imported nccl-tests/OSU runs too).",
                                                  metavar="RESULTS...")],
    baseline: Annotated[list[Path] | None, typer.Option(
        "--baseline", "-b", help="Baseline run(s) to gate against (default gate options); repeatable.")] = None,
    out: Annotated[Path | None, typer.Option("--out", "-o", help="Folder for report.md and report.html "
                                                                  "(default: <first run>/report).")] = None,
    baseline_impl: Annotated[str, typer.Option(help="Implementation label the speedups compare against.")] = "mpi",
) -> None:
    """One self-contained Markdown and one self-contained HTML file (plots embedded as base64):
    provenance, summary tables, plots and, with --baseline, the gate's verdicts.

    The report is a document: it exits 0 whatever the verdicts (use `pccl-bench gate` to gate).
    """
    from bench.present.report import build
    from bench.present.report_doc import markdown, to_html

    first = results[0] if results[0].is_dir() else results[0].parent
    folder = output_folder(out or first / "report", "--out")  # before reading a table
    files = [output_file(folder / name, "--out") for name in ("report.md", "report.html")]
    runs = load_runs(results)
    verdicts = gate(load_runs(baseline), runs, GateOptions()) if baseline else None
    document = build(runs, baseline_impl, verdicts)
    folder.mkdir(parents=True, exist_ok=True)
    for file, text in zip(files, (markdown(document), to_html(document)), strict=True):
        write_text(file, text)
        print(file)
