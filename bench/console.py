"""Terminal output: progress over cells while a sweep runs, a summary table at the end."""

from __future__ import annotations

import pandas as pd
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from bench.sizes import format_size

BASELINE_IMPL = "mpi"


def progress_bar(console: Console) -> Progress:
    return Progress(
        TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
        TextColumn("{task.fields[current]}"), TimeElapsedColumn(), console=console, transient=False,
    )


def _label(row) -> str:
    name = row.impl if row.impl == "mpi" else f"{row.impl}:{row.algorithm}"
    return name if row.placement == "out_of_place" else f"{name} (in place)"


def summary_tables(results: pd.DataFrame) -> list[Table]:
    """Per collective and rank count: time p50, busbw and #wrong per implementation, speedup over mpi."""
    tables = []
    if results.empty:
        return tables
    frame = results.assign(label=[_label(row) for row in results.itertuples()])
    for (collective, nranks, nnodes, dtype, op), group in frame.groupby(
        ["collective", "nranks", "nnodes", "dtype", "op"], sort=False
    ):
        labels = list(dict.fromkeys(group["label"]))
        table = Table(title=f"{collective}  {nranks} ranks / {nnodes} nodes  {dtype} {op}", title_justify="left")
        table.add_column("size", justify="right")
        table.add_column("count", justify="right")
        for label in labels:
            table.add_column(f"{label}\nus p50 | busbw GB/s", justify="right")
            if not label.startswith(BASELINE_IMPL):
                table.add_column("vs mpi", justify="right")
        for (size, count), cells in group.groupby(["bytes_total", "count_per_rank"], sort=True):
            by_label = {row.label: row for row in cells.itertuples()}
            baseline = by_label.get(BASELINE_IMPL)
            line = [format_size(int(size)), str(count)]
            for label in labels:
                row = by_label.get(label)
                line.append(_cell_text(row))
                if not label.startswith(BASELINE_IMPL):
                    line.append(_speedup(baseline, row))
            table.add_row(*line)
        tables.append(table)
    return tables


def _cell_text(row) -> str:
    if row is None:
        return ""
    if row.status != "ok":
        wrong = f" #wrong={row.n_wrong}" if row.n_wrong else ""
        return f"[red]{row.status}{wrong}[/red]" if row.status != "unsupported" else "[dim]unsupported[/dim]"
    return f"{row.time_us_p50:9.2f} | {row.busbw_gbps:6.3f}"


def _speedup(baseline, row) -> str:
    if baseline is None or row is None or baseline.status != "ok" or row.status != "ok":
        return ""
    ratio = baseline.time_us_p50 / row.time_us_p50
    colour = "green" if ratio >= 1.1 else "red" if ratio <= 0.9 else "white"
    return f"[{colour}]{ratio:.2f}x[/{colour}]"


def status_line(results: pd.DataFrame) -> str:
    counts = results["status"].value_counts().to_dict() if len(results) else {}
    return ", ".join(f"{count} {status}" for status, count in sorted(counts.items())) or "no cells"
