"""``pccl-bench plot RESULTS...``."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from bench.errors import BadInput
from bench.files import output_folder
from bench.results.runset import load_runs

FORMAT_HELP = "Comma-separated image formats: png, svg, pdf."


def parse_formats(text: str) -> list[str]:
    from bench.present.plot import FORMATS

    formats = [part.strip().lower() for part in text.split(",") if part.strip()]
    unknown = [name for name in formats if name not in FORMATS]
    if unknown or not formats:
        raise BadInput("--format", f"{text!r}: expected a comma-separated list of {', '.join(FORMATS)}")
    return formats


def plot(
    results: Annotated[list[Path], typer.Argument(help="Run folders, results.parquet files or folders of runs "
                                                       "(pooled; imported nccl-tests/OSU runs too).",
                                                  metavar="RESULTS...")],
    out: Annotated[Path | None, typer.Option("--out", "-o", help="Folder for the figures "
                                                                  "(default: <first run>/plots).")] = None,
    formats: Annotated[str, typer.Option("--format", "-f", help=FORMAT_HELP)] = "png",
    baseline: Annotated[str, typer.Option(help="Implementation label the speedup heatmaps compare against "
                                               "(mpi, xccl, pccl-flat:ring, ...).")] = "mpi",
    impl: Annotated[list[str] | None, typer.Option("--impl", help="Plot only implementations whose label matches "
                                                                  "this shell pattern ('pccl-hier:*'); "
                                                                  "repeatable.")] = None,
) -> None:
    """Latency and bus bandwidth against size, speedup heatmaps and scaling, per collective."""
    from bench.present import plot as plots

    chosen = parse_formats(formats)
    first = results[0] if results[0].is_dir() else results[0].parent
    folder = output_folder(out or first / "plots", "--out")  # before reading a table
    runs = load_runs(results)
    frame = plots.select_impls(plots.plot_frame(runs.results, runs.samples), impl or [])
    if frame.empty:
        raise BadInput(" ".join(map(str, results)), "no ok cells to plot")
    written = plots.save(plots.figures(frame, baseline), folder, chosen)
    for path in written:
        print(path)
