"""The hierarchy across the lab: suites/lab-hier.yaml (2 namespace hosts x 2 ranks: the MPI library,
pccl-flat ring/rd/bruck/direct/rdfull, pccl-hier with ring/bruck/rdfull between hosts and ring/shm/rdfull/tree
within) at every link setting, in rounds (docs/LAB-RESULTS.md, "Cell after cell").

    python benchmarks/lab_hier.py [--rounds 2] [--hosts 2] [--mode sync|window] [--links "50 us,200 us"]
                                  [--set sizes.max=4KiB ...] [--out-runs DIR]
                                  [--json benchmarks/data/lab/hier.json]   # as root

``--hosts 4`` runs the suite on 4 hosts x 1 rank (the model's held-out shape); ``--out-runs DIR``
keeps every sweep's result folder (DIR/<round>-<link>/run) for ``pccl-bench model fit/check``.

Each round runs the link settings in turn (the order reversed every other round), one sweep each:
every cell of a sweep is in one launch, so a ratio between two of its cells is same-job. Quoted per
link, collective and size: the MPI library's median time, the best pccl variant's, their ratio
(mpi / best pccl: >= 1 means pccl is as fast or faster), and at <= 4 KiB the best pccl-hier against
pccl-flat ring; each ratio the median over rounds of the per-round (same-job) ratio, with its range.
With a rate limit, every cell of >= 2 MiB also against the bound of its own schedule: the bytes the
busiest host link carries one way (walked from the schedule, bench/model/steps.py) over the rate.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
from pathlib import Path

import pandas as pd
from in_lab import ROOT, arguments, link_slug, own_lab, sweep_on_login  # beside this script

from bench.lab import lab as lab_ops
from bench.lab.state import Link
from bench.model.impls import variant_of_row
from bench.model.mpich import mpich_algorithm
from bench.model.steps import mpi_phase_choices, rank_rows
from collectives.dtypes import DTYPES
from collectives.schedules.topology import Grid

LAB = "hier"
LINKS = {"bridge": Link(), "50 us": Link(delay_us=50), "200 us": Link(delay_us=200),
         "50 us + 1 Gbit/s": Link(delay_us=50, rate_gbit=1)}
SUITE = ROOT / "suites" / "lab-hier.yaml"
SMALL_BYTES = 4096
BANDWIDTH_BYTES = 2 * 1024 * 1024


def sweep(folder: Path, hosts: int, mode: str, overrides: list[str]) -> pd.DataFrame:
    names = ",".join(f"h{number}" for number in range(1, hosts + 1))
    out = sweep_on_login(LAB, SUITE, names, folder, ["--set", f"ranks_per_node={4 // hosts}", "--set",
                                                     f"timing.mode={mode}", *(f"--set={item}" for item in overrides)])
    return pd.read_parquet(out / "results.parquet")


def label(row) -> str:
    if row.impl == "pccl-hier":
        return f"hier:{row.inter}/{row.intra}"
    return "mpi" if row.impl == "mpi" else f"flat:{row.algorithm}"


def link_bound_us(row, rate_gbit: float) -> float:
    """Bytes over the busiest host link, one way, for the schedule this row ran, over the rate (us)."""
    variant = variant_of_row(row)
    grid = Grid(int(row.nranks), int(row.ranks_per_node))
    itemsize = DTYPES[row.dtype][0].itemsize
    count = int(row.count_per_rank)
    resolved = mpich_algorithm(row.collective, grid.nranks, int(row.bytes_total)) if row.impl == "mpi" \
        else variant.candidates(row.collective, grid.nranks, int(row.bytes_total))[0]
    out = [0] * grid.nnodes
    into = [0] * grid.nnodes
    for rank in range(grid.nranks):
        schedule = variant.schedule(row.collective, grid, rank, count, row.placement == "in_place", resolved)
        choices = mpi_phase_choices(schedule, grid, rank, 1.0, itemsize)
        fields = rank_rows(schedule, grid, rank, itemsize, choices)
        out[grid.node(rank)] += int(fields["send_bytes_inter"].sum())
        into[grid.node(rank)] += int(fields["recv_bytes_inter"].sum())
    return max(out + into) * 8 / (rate_gbit * 1e3)


def figures(frame: pd.DataFrame, link: Link) -> dict:
    """Per (collective, bytes_total): every variant's median time; the same-job ratios."""
    ok = frame[frame["status"] == "ok"]
    wrong = int(frame["n_wrong"].fillna(0).sum())
    cells: dict[str, dict] = {}
    for (collective, size), group in ok.groupby(["collective", "bytes_total"]):
        times = {label(row): float(row.time_us_p50) for row in group.itertuples()}
        pccl = {name: time for name, time in times.items() if name != "mpi"}
        best = min(pccl, key=pccl.get)
        hier = {name: time for name, time in pccl.items() if name.startswith("hier:")}
        best_hier = min(hier, key=hier.get)
        cell = {"times": times, "best": best, "best_hier": best_hier,
                "mpi_over_best": times["mpi"] / pccl[best],
                "ring_over_hier": times["flat:ring"] / hier[best_hier]}
        if link.rate_gbit and size >= BANDWIDTH_BYTES:
            cell["over_bound"] = {label(row): float(row.time_us_p50) / link_bound_us(row, link.rate_gbit)
                                  for row in group.itertuples()}
        cells[f"{collective} {int(size)}"] = cell
    return {"cells": cells, "wrong": wrong, "failed": int((frame["status"] != "ok").sum() -
                                                          (frame["status"] == "unsupported").sum())}


def main() -> None:
    def options(parser: argparse.ArgumentParser) -> None:
        parser.add_argument("--hosts", type=int, choices=(2, 4), default=2, help="2 hosts x 2 ranks or 4 x 1")
        parser.add_argument("--out-runs", type=Path, help="keep every sweep's result folder here")
        parser.add_argument("--mode", choices=("sync", "window"), default="sync", help="timing.mode of the sweeps")
        parser.add_argument("--links", default=",".join(LINKS), help=f"link settings, of: {', '.join(LINKS)}")
        parser.add_argument("--set", action="append", default=[], dest="overrides",
                            help="a suite override for every sweep, as pccl-bench's --set (repeatable)")

    args = arguments(__doc__, rounds=2, extra=options)
    links = [name.strip() for name in args.links.split(",")]
    unknown = [name for name in links if name not in LINKS]
    if unknown:
        raise SystemExit(f"--links: unknown setting {unknown[0]!r} (known: {', '.join(LINKS)})")
    measured: dict[str, list[dict]] = {link: [] for link in links}
    with own_lab(LAB, args.hosts):
        with tempfile.TemporaryDirectory() as temporary:
            scratch = args.out_runs or Path(temporary)
            for index in range(args.rounds):
                order = links if index % 2 == 0 else list(reversed(links))
                for link_name in order:
                    lab_ops.set_link(LAB, LINKS[link_name])
                    folder = scratch / f"{index}-{link_slug(link_name)}"
                    folder.mkdir(parents=True)
                    measured[link_name].append(figures(sweep(folder, args.hosts, args.mode, args.overrides),
                                                             LINKS[link_name]))
                    print(f"round {index + 1}/{args.rounds}: {link_name} done", file=sys.stderr, flush=True)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(measured, indent=1) + "\n")
    print(summary(measured))
    print(report(measured))


def summary(measured: dict[str, list[dict]]) -> str:
    """Per link and collective: the lowest same-job ratios over sizes (median over rounds), with their size."""
    lines = ["| link | collective | mpi / best pccl, lowest (size) | median over sizes | flat ring / best hier at "
             f"<= {SMALL_BYTES} B, lowest (size) |", "|---|---|---|---|---|"]
    for link, runs in measured.items():
        for collective in ("allgather", "reduce_scatter", "allreduce"):
            keys = [key for key in runs[0]["cells"] if key.split()[0] == collective]
            if not keys:  # a sweep narrowed with --set collectives=...
                continue

            def ratio(key: str, name: str, runs: list[dict] = runs) -> float:
                return statistics.median(run["cells"][key][name] for run in runs if key in run["cells"])
            versus_mpi = {key: ratio(key, "mpi_over_best") for key in keys}
            small = {key: ratio(key, "ring_over_hier") for key in keys if int(key.split()[1]) <= SMALL_BYTES}
            low, low_small = min(versus_mpi, key=versus_mpi.get), min(small, key=small.get)
            lines.append(f"| {link} | {collective} | {versus_mpi[low]:.2f} ({low.split()[1]} B) | "
                         f"{statistics.median(versus_mpi.values()):.2f} | {small[low_small]:.2f} "
                         f"({low_small.split()[1]} B) |")
    return "\n".join(lines)


def _spread(values: list[float]) -> str:
    middle = statistics.median(values)
    return f"{middle:.2f}" if len(values) == 1 else f"{middle:.2f} ({min(values):.2f}-{max(values):.2f})"


def report(measured: dict[str, list[dict]]) -> str:
    lines = []
    for link, runs in measured.items():
        lines += [f"\n### {link} ({len(runs)} rounds; wrong {sum(r['wrong'] for r in runs)}, "
                  f"failed {sum(r['failed'] for r in runs)})", "",
                  "| collective | bytes | mpi us | best pccl | its us | mpi / best pccl | best hier | "
                  "flat ring / best hier |", "|---|---|---|---|---|---|---|---|"]
        for key in runs[0]["cells"]:
            collective, size = key.split()
            per_round = [run["cells"][key] for run in runs if key in run["cells"]]
            mpi_us = statistics.median(cell["times"]["mpi"] for cell in per_round)
            best = statistics.mode(cell["best"] for cell in per_round)
            best_us = statistics.median(cell["times"][best] for cell in per_round)
            hier = statistics.mode(cell["best_hier"] for cell in per_round)
            ratio = _spread([cell["mpi_over_best"] for cell in per_round])
            small = _spread([cell["ring_over_hier"] for cell in per_round]) if int(size) <= SMALL_BYTES else ""
            lines.append(f"| {collective} | {size} | {mpi_us:.0f} | {best} | {best_us:.0f} | {ratio} | {hier} | "
                         f"{small} |")
        bounded = [key for key in runs[0]["cells"] if "over_bound" in runs[0]["cells"][key]]
        if bounded:
            lines += ["", "time / bound of its own schedule (bytes over the busiest host link, one way, / rate), "
                      "median over rounds:", "", "| collective | bytes | variant: time / bound |", "|---|---|---|"]
            for key in bounded:
                names = runs[0]["cells"][key]["over_bound"]
                values = {name: statistics.median(run["cells"][key]["over_bound"][name] for run in runs
                                                  if name in run["cells"][key].get("over_bound", {}))
                          for name in names}
                text = ", ".join(f"{name} {value:.2f}" for name, value in sorted(values.items(), key=lambda i: i[1]))
                lines.append(f"| {key.split()[0]} | {key.split()[1]} | {text} |")
    return "\n".join(lines)


if __name__ == "__main__":
    main()
