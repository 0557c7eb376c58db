"""What a barrier's start costs across a slow link, and what a common start on synchronised clocks
tells apart: all-gather through pccl-flat ring (3 steps on 4 hosts) and recursive doubling (2
steps) and the MPI library on 4 namespace hosts x 1 rank (and 2 x 1 for the skew alone), timed
with ``sync`` (a barrier before every call; clocks synchronised only to measure its skew) and
``window`` (every call started at the same time), for each link setting (docs/LAB.md, "Timing
across a slow link").

    python benchmarks/lab_skew.py [--rounds 2] [--links "50 us,200 us"]
                                  [--json benchmarks/data/lab/skew.json]   # as root

Each round runs every link setting, and for each the two modes in alternating order, as sweeps
of their own on the lab's login host; within a sweep ring, rd and the MPI library are three arms of
each cell, timed in turns. Quoted per setting and mode: the start skew (the latest start minus the
earliest over ranks, p50 and p95 over a cell's calls, median over cells and rounds), the median
times of ring, rd and the MPI library at 16 B and 1 KiB (all-gather totals), and rd / ring turn
by turn (bench.results.stats.turn_ratio; median over rounds), against the 2 / 3 of their steps.
"""

from __future__ import annotations

import json
import statistics
import sys
import tempfile
from pathlib import Path

import numpy as np
import pandas as pd
import yaml
from in_lab import arguments, own_lab, sweep_on_login  # beside this script

from bench.lab import lab as lab_ops
from bench.lab.state import Link
from bench.results.stats import turn_ratio

LAB = "skew"
LINKS = {"bridge": Link(), "50 us": Link(delay_us=50), "200 us": Link(delay_us=200),
         "50 us + 1 Gbit/s": Link(delay_us=50, rate_gbit=1)}
MODES = {"sync": {"mode": "sync", "clock_sync": True}, "window": {"mode": "window"}}
SUITE = {
    "name": "lab-skew",
    "collectives": ["allgather"],
    "implementations": ["mpi"],
    "ranks": [2, 4],
    "sizes": {"min": "8B", "max": "1KiB", "factor": 128},
    "timing": {"warmup": 5, "iters": 200, "min_iters": 60, "budget_s": 0.3},
    "timeout_s": 300,
    "arms": [{"name": "ring", "impl": "pccl-flat", "algorithm": "ring"},
             {"name": "rd", "impl": "pccl-flat", "algorithm": "rd"}, {"name": "mpi"}],
}


def sweep(folder: Path, mode: dict) -> Path:
    suite = {**SUITE, "timing": {**SUITE["timing"], **mode}}
    path = folder / "suite.yaml"
    path.write_text(yaml.safe_dump(suite, sort_keys=False))
    return sweep_on_login(LAB, path, "h1,h2,h3,h4", folder, timeout=900)


def rd_over_ring(run: Path, cells: pd.DataFrame) -> float | None:
    """rd / ring turn by turn in one cell (its two arms' rows)."""
    samples = pd.read_parquet(run / "samples.parquet", columns=["cell_key", "iteration", "time_us"])
    by_arm = cells.set_index("arm")["cell_key"]
    times = {arm: samples[samples["cell_key"] == by_arm[arm]].sort_values("iteration")["time_us"].to_numpy()
             for arm in ("rd", "ring")}
    estimate = turn_ratio([(np.asarray(times["rd"]), np.asarray(times["ring"]))])
    return None if estimate is None else estimate.ratio


def figures(run: Path) -> dict:
    frame = pd.read_parquet(run / "results.parquet")
    pair = frame[frame["nranks"] == 2]
    frame = frame[frame["nranks"] == 4]
    out = {"skew_p50_us": float(frame["start_skew_us_p50"].median()),
           "skew_p95_us": float(frame["start_skew_us_p95"].median()),
           "pair_skew_p50_us": float(pair["start_skew_us_p50"].median()),
           "pair_skew_p95_us": float(pair["start_skew_us_p95"].median())}
    sizes = sorted(set(frame["bytes_total"]))
    for row in frame.itertuples():
        out[f"{row.arm}_{'small' if row.bytes_total == sizes[0] else 'large'}_us"] = float(row.time_us_p50)
    for size, cells in frame.groupby("bytes_total"):
        out[f"rd_over_ring_{'small' if size == sizes[0] else 'large'}"] = rd_over_ring(run, cells)
    out["sizes"] = [int(size) for size in sizes]
    missed = frame["window_missed"].dropna() if "window_missed" in frame else []
    out["missed_share"] = float(missed.sum() / (missed.sum() + frame["iters"].sum())) if len(missed) else 0.0
    return out


def main() -> None:
    def options(parser) -> None:
        parser.add_argument("--links", default=",".join(LINKS), help=f"link settings, of: {', '.join(LINKS)}")

    args = arguments(__doc__, rounds=3, extra=options)
    names = [name.strip() for name in args.links.split(",")]
    if any(name not in LINKS for name in names):
        raise SystemExit(f"--links: unknown setting among {names} (known: {', '.join(LINKS)})")
    links = {name: LINKS[name] for name in names}
    measured: dict[str, dict[str, list[dict]]] = {link: {mode: [] for mode in MODES} for link in links}
    with own_lab(LAB, 4):
        with tempfile.TemporaryDirectory() as scratch:
            for index in range(args.rounds):
                for number, (link_name, link) in enumerate(links.items()):
                    lab_ops.set_link(LAB, link)
                    order = list(MODES) if index % 2 == 0 else list(reversed(MODES))
                    for mode in order:
                        folder = Path(scratch) / f"{index}-{number}-{mode}"
                        folder.mkdir()
                        measured[link_name][mode].append(figures(sweep(folder, MODES[mode])))
                print(f"round {index + 1}/{args.rounds} done", file=sys.stderr, flush=True)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(measured, indent=1) + "\n")
    print(table(measured))


def table(measured: dict) -> str:
    sizes = next(run["sizes"] for modes in measured.values() for runs in modes.values() for run in runs)
    lines = [f"| link | mode | start skew p50 / p95, us (2 x 1) | (4 x 1) | {sizes[0]} B: ring / rd / mpi, us | "
             f"rd / ring in turns | {sizes[-1]} B: ring / rd / mpi, us | rd / ring in turns |",
             "|---|---|---|---|---|---|---|---|"]
    for link, modes in measured.items():
        for mode, runs in modes.items():
            def median(key: str, runs: list[dict] = runs) -> float:
                return statistics.median(run[key] for run in runs)
            cells = []
            for size in ("small", "large"):
                ring, rd, mpi = (median(f"{name}_{size}_us") for name in ("ring", "rd", "mpi"))
                turns = [run[f"rd_over_ring_{size}"] for run in runs if run.get(f"rd_over_ring_{size}")]
                ranged = f"{statistics.median(turns):.2f} ({min(turns):.2f}-{max(turns):.2f})" if turns else "-"
                cells.append(f"{ring:.0f} / {rd:.0f} / {mpi:.0f} | {ranged}")
            lines.append(f"| {link} | {mode} | {median('pair_skew_p50_us'):.1f} / {median('pair_skew_p95_us'):.1f} | "
                         f"{median('skew_p50_us'):.1f} / {median('skew_p95_us'):.1f} | {cells[0]} | {cells[1]} |")
    return "\n".join(lines)


if __name__ == "__main__":
    main()
