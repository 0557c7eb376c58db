"""Markdown tables of a run: median time per implementation side by side, ratio to ``mpi``.

    python benchmarks/side_by_side.py results/<run>      # one table per collective and shape

Ratios are mpi_time / impl_time (> 1: faster than the MPI library), from cells measured
in the same run, interleaved in the same MPI job; a cell run in several launches (suite
``repeats``) is the median of their medians.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pandas as pd

from bench.plan.sizes import format_size


def label(row) -> str:
    if row.impl == "pccl-hier":
        return f"hier {row.inter}/{row.intra}"
    if row.algorithm == "native":  # a library's or transport's own collective: mpi, shm, xccl
        return row.impl
    return f"{row.impl.removeprefix('pccl-')} {row.algorithm}"


def tables(results: pd.DataFrame) -> str:
    ok = results[results["status"] == "ok"]
    ok = ok.assign(label=[label(row) for row in ok.itertuples()])
    out = []
    for (collective, nranks, nnodes, placement), group in ok.groupby(
            ["collective", "nranks", "nnodes", "placement"], sort=False):
        times = group.pivot_table(index="bytes_total", columns="label", values="time_us_p50", aggfunc="median")
        labels = ["mpi", *[c for c in times.columns if c != "mpi"]] if "mpi" in times else list(times.columns)
        out.append(f"\n**{collective}, {nranks} ranks / {nnodes} nodes, {placement}** — median us (ratio vs mpi)\n")
        out.append("| size | " + " | ".join(labels) + " |")
        out.append("|---:|" + "---:|" * len(labels))
        for size, row in times.iterrows():
            cells = []
            for name in labels:
                value = row.get(name)
                if pd.isna(value):
                    cells.append("")
                elif name == "mpi" or "mpi" not in times:
                    cells.append(f"{value:.2f}")
                else:
                    cells.append(f"{value:.2f} ({row['mpi'] / value:.2f}x)")
            out.append(f"| {format_size(int(size))} | " + " | ".join(cells) + " |")
    return "\n".join(out)


if __name__ == "__main__":
    folder = Path(sys.argv[1])
    print(tables(pd.read_parquet(folder / "results.parquet")))
