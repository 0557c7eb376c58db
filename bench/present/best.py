"""The end-of-sweep verdict: per shape and size, the fastest pccl variant against the MPI library.

One table per shape (ranks, nodes, device, dtype, placement), one line per size, one column per
collective: the fastest implementation that is not ``mpi`` among the cells that gave a time, and its
speedup over ``mpi`` at the same size (marked ``?`` where unsure, bench.results.speedup). It answers
"which of this project's paths should I use here, and does it beat the library?" without reading
every line of the per-collective tables above it.
"""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd
from rich.table import Table

from bench.plan.sizes import format_size
from bench.results.labels import impl_label
from bench.results.speedup import CELL_UNSURE_NOTE, Intervals, speedup
from bench.text import console_text

BASELINE_IMPL = "mpi"
SHAPE = ["nranks", "nnodes", "device", "dtype", "placement", "buffers"]


@dataclass(frozen=True)
class Best:
    """The fastest non-baseline cell of one collective and size, and how it compares with ``mpi``."""

    label: str
    time_us: float
    ratio_text: str  # "" where there is no ok mpi cell to compare with
    ratio: float | None
    sure: bool


def best_variants(results: pd.DataFrame, intervals: Intervals) -> dict[tuple, dict[tuple[int, str], Best]]:
    """{shape: {(bytes_total, collective): Best}} over the cells that gave a time (one line per cell:
    console._one_line_per_cell has merged repeats)."""
    ok = results[results["status"] == "ok"]
    # plain records: slicing a wide Arrow-backed frame per size costs seconds on a smoke sweep
    cells: dict[tuple, dict[tuple[int, str], list[dict]]] = {}
    for record in ok.to_dict("records"):
        shape = tuple(record.get(name, "warm" if name == "buffers" else None) for name in SHAPE)
        cells.setdefault(shape, {}).setdefault((int(record["bytes_total"]), record["collective"]), []).append(record)
    found: dict[tuple, dict[tuple[int, str], Best]] = {}
    for shape, by_size in cells.items():
        table: dict[tuple[int, str], Best] = {}
        for key, records in sorted(by_size.items()):
            mine = [record for record in records if record["impl"] != BASELINE_IMPL]
            if not mine:
                continue
            fastest = min(mine, key=lambda record: float(record["time_us_p50"]))
            baseline = next((record for record in records if record["impl"] == BASELINE_IMPL), None)
            label, time_us = impl_label(fastest), float(fastest["time_us_p50"])
            if baseline is None:
                table[key] = Best(label, time_us, "", None, True)
                continue
            estimate = speedup(baseline, fastest, intervals)
            table[key] = Best(label, time_us, estimate.text(), estimate.ratio, estimate.sure)
        if table:
            found[shape] = table
    return found


def best_tables(results: pd.DataFrame, intervals: Intervals) -> list[Table]:
    """The verdict tables (none where no shape has both a pccl variant and a time)."""
    tables = []
    for shape, table in best_variants(results, intervals).items():
        nranks, nnodes, device, dtype, placement, buffers = shape
        collectives = sorted({collective for _, collective in table})
        where = f"{nranks} ranks / {nnodes} nodes" + ("" if placement == "out_of_place" else " (in place)")
        where += "" if buffers in (None, "warm") else f" ({buffers} buffers)"
        title = "best pccl vs mpi  " + "  ".join(map(console_text, (where, str(device), str(dtype))))
        unsure = any(not best.sure for best in table.values())
        caption = "fastest non-mpi implementation, median us, speedup over mpi"
        view = Table(title=title, title_justify="left", caption=caption + (f"\n{CELL_UNSURE_NOTE}" if unsure else ""),
                     caption_justify="left")
        view.add_column("size", justify="right")
        for collective in collectives:
            view.add_column(console_text(collective), justify="left")
        for size in sorted({size for size, _ in table}):
            view.add_row(format_size(size), *(_text(table.get((size, collective))) for collective in collectives))
        tables.append(view)
    return tables


def _text(best: Best | None) -> str:
    if best is None:
        return ""
    text = f"{console_text(best.label)} {best.time_us:.2f}"
    if not best.ratio_text:
        return text
    if not best.sure or best.ratio is None:
        return f"{text} [dim]{best.ratio_text}[/dim]"
    colour = "green" if best.ratio >= 1.1 else "red" if best.ratio <= 0.9 else "white"
    return f"{text} [{colour}]{best.ratio_text}[/{colour}]"
