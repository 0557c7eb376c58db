"""Markdown table of a buffers run (suites/buffers.yaml): warm, rotate and cold side by side.

    python benchmarks/buffers_side_by_side.py results/<run> [time_us_p50|time_us_min]

Per implementation, collective and size: the time of each buffers (the median over launches of
the cells' median, or of their fastest call), and rotate/warm and cold/warm as the median of the
per-launch ratios (each of cells measured one after another in the same MPI job) with their range
over launches. The fastest call shows what the buffers cost where a loaded machine descheduled
most calls (the median then measures the load).
"""

from __future__ import annotations

import sys
from pathlib import Path

import pandas as pd

from bench.plan.sizes import format_size
from bench.results.read import read_results

BUFFERS = ("warm", "rotate", "cold")


def table(results: pd.DataFrame, statistic: str = "time_us_p50") -> str:
    ok = results[results["status"].eq("ok")]
    wide = ok.pivot_table(index=["impl", "collective", "bytes_total", "launch_id"], columns="buffers",
                          values=statistic, aggfunc="median")
    lines = ["| impl | collective | size | warm us | rotate us | cold us | rotate/warm | cold/warm | "
             "positions rotate, cold | launches |", "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    positions = ok.groupby(["impl", "collective", "bytes_total", "buffers"])["buffer_positions"].max()
    for (impl, collective, size), launches in wide.groupby(level=[0, 1, 2], sort=True):
        medians = launches.median()
        ratios = [launches[name] / launches["warm"] for name in ("rotate", "cold")]
        shown = [f"{ratio.median():.2f} ({ratio.min():.2f}-{ratio.max():.2f})" for ratio in ratios]
        walk = ", ".join(str(int(positions.get((impl, collective, size, name), 0))) for name in ("rotate", "cold"))
        lines.append(f"| {impl} | {collective} | {format_size(int(size))} | "
                     + " | ".join(f"{medians.get(name, float('nan')):.0f}" for name in BUFFERS)
                     + f" | {shown[0]} | {shown[1]} | {walk} | {len(launches)} |")
    return "\n".join(lines)


if __name__ == "__main__":
    folder = Path(sys.argv[1])
    print(table(read_results([folder]), *sys.argv[2:3]))
