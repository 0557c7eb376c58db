"""What the ``pccl-bench model`` commands print: modelled times, errors per cell, fitted terms and
replays as rich tables."""

from __future__ import annotations

import math

import pandas as pd
from rich.console import Console
from rich.table import Table

from bench.model.check import error_summary
from bench.plan.sizes import format_size
from bench.results.labels import impl_label


def make_console() -> Console:
    """The terminal's console; elsewhere (a pipe, a file) one 140 columns wide, so tables keep their columns."""
    console = Console()
    return console if console.is_terminal else Console(width=140)


def print_speedups(results: pd.DataFrame, console: Console) -> None:
    frame = results.assign(label=results.apply(impl_label, axis=1))
    for (collective, nranks), group in frame.groupby(["collective", "nranks"]):
        pivot = group.pivot_table(index="bytes_total", columns="label", values="time_us_p50")
        table = Table(title=f"{collective} on {nranks} GPUs: modelled time (ms)", title_justify="left")
        table.add_column("size", justify="right")
        for name in pivot.columns:
            table.add_column(name, justify="right")
        for size, values in pivot.iterrows():
            table.add_row(format_size(int(size)), *(f"{value / 1e3:.3f}" for value in values))
        console.print(table)


def print_errors(errors: pd.DataFrame, console: Console, title: str) -> None:
    summary = error_summary(errors)
    table = Table(*summary.columns, title=title, title_justify="left")
    for row in summary.itertuples(index=False):
        table.add_row(*(f"{value:.1f}" if isinstance(value, float) else str(value) for value in row))
    console.print(table)


def print_terms(fits: list, console: Console) -> None:
    table = Table("library", "term", "value", "+- sd", title="fitted terms (sd from the log-space covariance)",
                  title_justify="left")
    for item in fits:
        for name, value in item.values.items():
            sd = item.sd.get(name)
            shown, spread = (value, sd) if "per_byte" not in name else (
                1e-3 / value if value > 0 else float("inf"), (1e-3 * sd / value**2) if sd and value > 0 else None)
            unit = "GB/s" if "per_byte" in name else "us"
            label = name.replace("us_per_byte", "bandwidth") if "per_byte" in name else name
            table.add_row(item.library, f"{label} ({unit})", f"{shown:.4g}",
                          "-" if spread is None else f"{spread:.2g}" if sd else "at bound / unseen")
        for collective, algorithm in item.algorithms.items():
            table.add_row(item.library, f"{collective} algorithm", algorithm, "stated by the rows or chosen by fit")
        if item.band_bytes:
            table.add_row(item.library, "band (inter-node message bytes)",
                          f"{item.band_bytes[0] >> 10}-{item.band_bytes[1] >> 10} KiB", "chosen by fit")
        if item.protocol_bytes:
            table.add_row(item.library, "protocol switch (Simple from, per-step message)",
                          f"{item.protocol_bytes >> 10} KiB", "chosen by fit")
        for switch, size in item.switches.items():
            shown = f"{size} ranks" if switch.endswith("_ranks") else f"{size >> 10} KiB"
            table.add_row(item.library, f"selection {switch} below", shown, "chosen by fit")
    console.print(table)
    for item in fits:
        for note in item.selection:
            console.print(f"{item.library}: {note}", highlight=False)


def print_factors(table: pd.DataFrame, console: Console, title: str) -> None:
    out = Table(*table.columns, title=title + ": |log(predicted / measured)| as a factor", title_justify="left")
    for row in table.itertuples(index=False):
        out.add_row(*(f"{v:.2f}" if isinstance(v, float) else str(v) for v in row))
    console.print(out)


def print_replay(table: pd.DataFrame, console: Console) -> None:
    shown = ["nranks", "implementation", "calls", "allgather_ms", "reduce_scatter_ms", "allreduce_ms",
             "comm_ms_per_step", "speedup_vs_baseline", "cost_per_step_usd"]
    first = table.iloc[0]
    out = Table(*shown, title=f"{first['workload']} ({first['strategy']}), {first['source']} on {first['machine']}",
                title_justify="left")
    for row in table[shown].itertuples(index=False):
        out.add_row(*("-" if pd.isna(v) else f"{v:.4g}" if isinstance(v, float) else str(v) for v in row))
    console.print(out)


def print_band(table: pd.DataFrame, console: Console, title: str, baseline: str, level: float | None) -> None:
    """``model band``'s table: times and speedups over ``baseline`` with their bands (and the calibrated band
    at ``level`` where given)."""
    shown = Table("size", "implementation", "ms", "ms 5-95%", f"speedup over {baseline}", "5-95%", title=title,
                  title_justify="left")
    if level is not None:
        shown.add_column(f"calibrated {level:.0%}: ms")
        shown.add_column("speedup")
    for row in table.itertuples(index=False):
        cells = [format_size(int(row.bytes_total)), row.implementation, f"{row.time_ms:.3g}",
                 f"{row.time_ms_p5:.3g}-{row.time_ms_p95:.3g}", f"{row.speedup:.3g}",
                 f"{row.speedup_p5:.3g}-{row.speedup_p95:.3g}"]
        if level is not None:
            cells.append(f"{row.time_ms_cal_low:.3g}-{row.time_ms_cal_high:.3g}")
            low, high = row.speedup_cal_low, row.speedup_cal_high
            cells.append("-" if math.isnan(low) else f"{low:.3g}-{high:.3g}")
        shown.add_row(*cells)
    console.print(shown)
