"""``pccl-bench tune RESULTS...``."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

from bench.files import output_file
from bench.judge.tune import derive
from bench.plan.sizes import format_size
from bench.results.read import read_results
from bench.text import console_text
from collectives.schedules import tuning


def tune(
    results: Annotated[list[Path], typer.Argument(help="Run folders or results.parquet files.")],
    out: Annotated[Path | None, typer.Option(
        "--out", "-o", help="Where to write (default: where `auto` reads, ~/.config/pccl-bench/tuning.json).")] = None,
) -> None:
    """Derive the ``algorithm: auto`` table from measured sweeps: fastest median per cell, with its margin."""
    target = output_file(out or tuning.user_table_path(), "--out")  # before reading a table
    frame = read_results(results)
    entries = derive(frame)
    tuning.write_table(entries, target, source=", ".join(str(path) for path in results))
    table = Table("collective", "impl", "ranks", "nodes", "size", "choice", "us p50", "runner-up", "margin")
    for e in entries:
        # names come from the results table: escaped, or `[/x]` would crash the print
        # an in-place entry says so after its collective (its own entry: bench.judge.tune keeps placements apart)
        collective = e["collective"] + (" (in place)" if e["placement"] == "in_place" else "")
        table.add_row(console_text(collective), console_text(e["impl"]), str(e["nranks"]), str(e["nnodes"]),
                      format_size(e["bytes_total"]), console_text(e["choice"]), f"{e['time_us_p50']:.2f}",
                      console_text(e["runner_up"] or "-"), f"{e['margin']:.2f}x" if e["margin"] else "-")
    console = Console()
    console.print(table)
    console.print(f"{len(entries)} entries -> {console_text(target)}" + ("" if out else " (read by algorithm: auto)"),
                  highlight=False)
