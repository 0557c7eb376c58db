"""``pccl-bench plot RESULTS...``."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from bench.errors import BadInput
from bench.files import output_folder
from bench.results.runset import load_runs

FORMAT_HELP = "Comma-separated image formats: png, svg, pdf."
#: the speedup heatmaps' baseline when --baseline is not given (none are drawn where the runs lack it)
DEFAULT_BASELINE = "mpi"
#: labels named in a refusal: the first this many
LABELS_SHOWN = 12


def _labels(frame) -> str:
    labels = sorted(frame["label"].astype(str).unique())
    return ", ".join(labels[:LABELS_SHOWN]) + (f" and {len(labels) - LABELS_SHOWN} more"
                                               if len(labels) > LABELS_SHOWN else "")


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
    baseline: Annotated[str | None, typer.Option(help="Implementation label the speedup heatmaps compare against "
                                                      "(mpi, xccl, pccl-flat:ring, ...; one of the plotted ones). "
                                                      "Default: mpi, where the runs hold it.")] = None,
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
    every = plots.plot_frame(runs.results, runs.samples)
    if every.empty:
        raise BadInput(" ".join(map(str, results)), "no ok cells to plot")
    frame = plots.select_impls(every, impl or [])
    if frame.empty:
        raise BadInput("--impl", f"{' '.join(map(repr, impl or []))} matches no implementation of these runs "
                                 f"(they hold {_labels(every)})")
    if baseline is not None and not frame["label"].eq(baseline).any():
        # a heatmap needs its baseline among the plotted labels; without it none would be drawn, unsaid
        hint = ("; it is an implementation label: to compare with a baseline run, pccl-bench report RESULTS "
                "--baseline RUN") if Path(baseline).exists() else ""
        raise BadInput("--baseline", f"{baseline!r} is no implementation plotted here (plotted: {_labels(frame)})"
                                     f"{hint}")
    written = plots.save(plots.figures(frame, baseline or DEFAULT_BASELINE), folder, chosen)
    for path in written:
        print(path)
