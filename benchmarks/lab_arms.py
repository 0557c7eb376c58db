"""The lab's comparisons timed in turns: suites/lab-arms.yaml (2 namespace hosts x 2 ranks; the MPI
library, pccl-flat ring, pccl-flat auto and pccl-hier auto as four arms of every cell, timed in turns)
at each link setting, in rounds (docs/LAB-RESULTS.md, "The comparisons in turns").

    python benchmarks/lab_arms.py [--rounds 3] [--links "50 us,200 us"] [--mode sync|window] [--queue-kib 512]
                                  [--tuning benchmarks/data/lab/tuning]
                                  [--json benchmarks/data/lab/arms.json]   # as root

``auto`` picks from ``--tuning``/<link>.json (PCCL_BENCH_TUNING of the sweep; ``pccl-bench tune`` of
the lab's own lab-hier runs at that link, docs/LAB-RESULTS.md). Every ratio is taken turn by turn
(bench.results.stats.turn_ratio: the arms' i-th calls ran one after the other, so whatever slowed the
machine then slowed all of them), per round; quoted is the median over rounds with the range, and
the pooled interval of every round's turns. Per link, collective and size: mpi / best pccl (the
faster of flat auto and hier auto by that ratio; >= 1: pccl as fast or faster), flat ring / hier
auto at <= 4 KiB, what auto chose, and with a rate the best pccl arm against the bytes-over-rate
bound of its schedule (benchmarks/lab_hier.py link_bound_us), and the frames the emulator dropped
at its queue limit (``--queue-kib`` per link; tail drop) during the sweep.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from dataclasses import replace
from functools import lru_cache
from pathlib import Path

import numpy as np
import pandas as pd
from in_lab import ROOT, arguments, link_slug, own_lab, sweep_on_login  # beside this script
from lab_hier import BANDWIDTH_BYTES, LINKS, SMALL_BYTES, link_bound_us

from bench.lab import lab as lab_ops
from bench.lab.state import Link
from bench.results.stats import turn_ratio

LAB = "arms"
SUITE = ROOT / "suites" / "lab-arms.yaml"
#: the pccl arms that compete for "best pccl"; ring is the flat baseline of the hierarchy's claim
PCCL_ARMS = ("flat", "hier")


def sweep(folder: Path, mode: str, tuning: Path, overrides: list[str]) -> Path:
    return sweep_on_login(LAB, SUITE, "h1,h2", folder, ["--set", f"timing.mode={mode}",
                                                        *(f"--set={item}" for item in overrides)],
                          env={"PCCL_BENCH_TUNING": tuning})


def dropped_frames() -> int | None:
    """Frames the emulator dropped since the link was set (None: the bridge)."""
    time.sleep(1.5)  # it writes its counters once a second
    stats = lab_ops.status(LAB)["emulator"]
    return None if stats is None else sum(int(port["dropped"]) for port in stats["ports"].values())


@lru_cache(maxsize=64)  # the pooled intervals read every round's run once per cell otherwise
def arm_samples(run: Path) -> tuple[pd.DataFrame, dict[str, np.ndarray]]:
    """The run's rows and each cell's iteration times in iteration order (one launch: one array)."""
    rows = pd.read_parquet(run / "results.parquet")
    samples = pd.read_parquet(run / "samples.parquet", columns=["cell_key", "iteration", "time_us"])
    samples = samples.sort_values(["cell_key", "iteration"], kind="stable")
    return rows, {str(key): group["time_us"].to_numpy() for key, group in samples.groupby("cell_key", observed=True)}


def ratio_of(times: dict[str, np.ndarray], by_arm: dict, slower: str, faster: str) -> list[float] | None:
    """slower / faster, turn by turn: [ratio, low, high] (> 1: ``faster`` is faster)."""
    estimate = turn_ratio([(times[by_arm[slower].cell_key], times[by_arm[faster].cell_key])])
    return None if estimate is None else [estimate.ratio, estimate.low, estimate.high]


def as_run(row):
    """The row with what ``auto`` resolved to in place of ``auto`` (for the schedule's bound)."""
    if row.impl == "pccl-hier":
        inter, _, intra = row.resolved_algorithm.partition("/")
        return row._replace(inter=inter, intra=intra)
    return row._replace(algorithm=row.resolved_algorithm) if row.impl == "pccl-flat" else row


def figures(run: Path, rate_gbit: float | None) -> dict:
    """Per (collective, bytes_total): each arm's median, what auto chose, the turn-by-turn ratios."""
    rows, times = arm_samples(run)
    cells: dict[str, dict] = {}
    for (collective, size), group in rows.groupby(["collective", "bytes_total"]):
        by_arm = {row.arm: row for row in group.itertuples()}
        ok = {arm for arm, row in by_arm.items() if row.status == "ok" and row.turns == "iteration"}
        if "mpi" not in ok or not ok & set(PCCL_ARMS):
            continue
        over = {arm: ratio_of(times, by_arm, "mpi", arm) for arm in PCCL_ARMS if arm in ok}
        best = max(over, key=lambda arm: over[arm][0] if over[arm] else 0.0)
        cell = {"median_us": {arm: float(by_arm[arm].time_us_p50) for arm in ok},
                "chose": {arm: str(by_arm[arm].resolved_algorithm) for arm in PCCL_ARMS if arm in by_arm},
                "mpi_over": over, "best": best, "mpi_over_best": over[best]}
        if size <= SMALL_BYTES and {"ring", "hier"} <= ok:
            cell["ring_over_hier"] = ratio_of(times, by_arm, "ring", "hier")
        if rate_gbit and size >= BANDWIDTH_BYTES:
            cell["over_bound"] = {arm: float(by_arm[arm].time_us_p50) / link_bound_us(as_run(by_arm[arm]), rate_gbit)
                                  for arm in ok}
        cells[f"{collective} {int(size)}"] = cell
    bad = rows[~rows["status"].isin(["ok", "unsupported"])]
    return {"cells": cells, "wrong": int(rows["n_wrong"].fillna(0).sum()), "failed": int(len(bad)),
            "unsupported": int((rows["status"] == "unsupported").sum())}


def pooled(runs: list[Path], slower: str, faster: str, collective: str, size: int) -> list[float] | None:
    """slower / faster turn by turn over every round's launch of the cell (each round one launch)."""
    launches = []
    for run in runs:
        rows, times = arm_samples(run)
        cell = rows[(rows["collective"] == collective) & (rows["bytes_total"] == size)].set_index("arm")
        if {slower, faster} <= set(cell.index) and (cell.loc[[slower, faster], "status"] == "ok").all():
            launches.append((times[cell.loc[slower, "cell_key"]], times[cell.loc[faster, "cell_key"]]))
    estimate = turn_ratio(launches) if launches else None
    return None if estimate is None else [estimate.ratio, estimate.low, estimate.high]


def table(link: str, rounds: list[dict], runs: list[Path]) -> list[str]:
    """The per-size table of one link: medians over rounds, ranges, pooled intervals."""
    lines = [f"### {link} ({len(rounds)} rounds; wrong {sum(r['wrong'] for r in rounds)}, failed "
             f"{sum(r['failed'] for r in rounds)})", "",
             "| collective | bytes | mpi us | flat auto | hier auto | mpi / best pccl, median (range) | pooled "
             "interval | flat ring / hier auto (<= 4 KiB) | pooled interval |", "|---|---|---|---|---|---|---|---|---|"]
    for key in rounds[0]["cells"]:
        present = [r["cells"][key] for r in rounds if key in r["cells"]]
        collective, size = key.split()[0], int(key.split()[1])
        best = statistics.mode(cell["best"] for cell in present)
        ratios = [cell["mpi_over_best"][0] for cell in present]
        chose = {arm: "/".join(sorted({cell["chose"].get(arm, "-") for cell in present})) for arm in PCCL_ARMS}
        row = (f"| {collective} | {size} | {statistics.median(c['median_us']['mpi'] for c in present):.0f} | "
               f"{chose['flat']} | {chose['hier']} | "
               f"{statistics.median(ratios):.2f} ({min(ratios):.2f}-{max(ratios):.2f}, {best}) | "
               f"{_interval(pooled(runs, 'mpi', best, collective, size))} |")
        small = [cell["ring_over_hier"][0] for cell in present if cell.get("ring_over_hier")]
        row += (f" {statistics.median(small):.2f} ({min(small):.2f}-{max(small):.2f}) | "
                f"{_interval(pooled(runs, 'ring', 'hier', collective, size))} |" if small else " | |")
        lines.append(row)
    return lines


def bound_lines(link: str, rounds: list[dict]) -> list[str]:
    """With a rate: each arm's median time over the bytes-over-rate bound of its schedule (median over rounds)."""
    keys = [key for key in rounds[0]["cells"] if "over_bound" in rounds[0]["cells"][key]]
    if not keys:
        return []
    arms = ["mpi", "ring", *PCCL_ARMS]
    drops = [r["dropped"] for r in rounds if r.get("dropped") is not None]
    lines = [f"{link}: time / the bytes-over-rate bound of the arm's schedule (median over rounds; frames dropped "
             f"at the emulator's queue per sweep: {', '.join(map(str, drops)) or '-'})", "",
             "| collective | bytes | " + " | ".join(arms) + " |", "|---|---|" + "---|" * len(arms)]
    for key in keys:
        bounds = [r["cells"][key]["over_bound"] for r in rounds if key in r["cells"]]
        values = [statistics.median(b[arm] for b in bounds if arm in b) if any(arm in b for b in bounds) else None
                  for arm in arms]
        lines.append(f"| {key.split()[0]} | {key.split()[1]} | " + " | ".join(
            "-" if value is None else f"{value:.2f}" for value in values) + " |")
    return [*lines, ""]


def _interval(values: list[float] | None) -> str:
    return "-" if values is None else f"{values[0]:.2f} [{values[1]:.2f}, {values[2]:.2f}]"


def main() -> None:
    def options(parser: argparse.ArgumentParser) -> None:
        parser.add_argument("--mode", choices=("sync", "window"), default="sync", help="timing.mode of the sweeps")
        parser.add_argument("--links", default=",".join(LINKS), help=f"link settings, of: {', '.join(LINKS)}")
        parser.add_argument("--tuning", type=Path, default=ROOT / "benchmarks" / "data" / "lab" / "tuning",
                            help="folder of the lab's tuning tables, <link slug>.json")
        parser.add_argument("--out-runs", type=Path, help="keep every sweep's result folder here")
        parser.add_argument("--queue-kib", type=int, default=Link().queue_bytes // 1024,
                            help="the emulated links' queue (KiB; a deeper one drops fewer frames)")
        parser.add_argument("--markdown", type=Path, help="write the per-size tables here")
        parser.add_argument("--set", action="append", default=[], dest="overrides",
                            help="a suite override for every sweep, as pccl-bench's --set (repeatable)")

    args = arguments(__doc__, rounds=3, extra=options)
    links = [name.strip() for name in args.links.split(",")]
    unknown = [name for name in links if name not in LINKS]
    missing = [name for name in links if not (args.tuning / f"{link_slug(name)}.json").exists()]
    if unknown or missing:
        raise SystemExit(f"--links: unknown setting {unknown[0]!r}" if unknown else
                         f"--tuning: no {args.tuning / (link_slug(missing[0]) + '.json')} (pccl-bench tune)")
    measured: dict[str, list[dict]] = {link: [] for link in links}
    runs: dict[str, list[Path]] = {link: [] for link in links}
    with own_lab(LAB, 2), tempfile.TemporaryDirectory() as temporary:
        scratch = args.out_runs or Path(temporary)
        for index in range(args.rounds):
            for link in links if index % 2 == 0 else list(reversed(links)):
                lab_ops.set_link(LAB, replace(LINKS[link], queue_bytes=args.queue_kib * 1024))
                folder = scratch / f"{index}-{link_slug(link)}"
                folder.mkdir(parents=True)
                run = sweep(folder, args.mode, (args.tuning / f"{link_slug(link)}.json").resolve(), args.overrides)
                runs[link].append(run)
                measured[link].append({**figures(run, LINKS[link].rate_gbit), "dropped": dropped_frames()})
                print(f"round {index + 1}/{args.rounds}: {link} done", file=sys.stderr, flush=True)
        text = [f"# benchmarks/lab_arms.py --rounds {args.rounds} --mode {args.mode} (2 hosts x 2 ranks; arms "
                f"in turns)", ""]
        for link in links:
            text += [*table(link, measured[link], runs[link]), "", *bound_lines(link, measured[link])]
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(measured, indent=1) + "\n")
    if args.markdown:
        args.markdown.write_text("\n".join(text))
    print("\n".join(text))


if __name__ == "__main__":
    main()
