"""What a sweep costs outside the timed iterations, per cell: installs side by side, interleaved.

    python benchmarks/cell_overhead.py [--suite smoke --suite ci] [--rounds 3] [--install NAME=REPO ...]

Each ``--install`` is a checkout with its own ``.venv`` (default: this one, as ``this``);
every round runs every suite once with every install, in alternating order, through
``REPO/.venv/bin/pccl-bench run sweep SUITE`` from that checkout. From the run's part files:

  in-worker harness per cell  the time from one cell's start to the next cell's start in the
                              same MPI job, less its timed iterations and its warm-up calls
                              (warm-up = the calls discarded before the samples, warmup_discarded
                              where the warm-up went on until stable, x the cell's median):
                              buffers, the check, building the op, the row written
  whole sweep per cell        (wall time of the command - timed - warm-up) / cells: also the
                              start of every MPI job and of the CLI, and writing the table
  per launch                  (wall - the cells' in-worker time) / launches: mpiexec, Python
                              and MPI start-up, the topology, the CLI and the table

The target of issue 12 is in-worker harness <= 2 ms + 5% of the timed time, per cell. The
machine is shared: read the medians over rounds, and the ratios of installs within a round (printed
after the table, each install against the first), and the in-worker harness by implementation (the
median over every cell of every round, which one slow round moves least).
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _warm_calls(row: dict) -> int:
    """Warm-up calls of a cell: the fixed ``warmup``, or every call the warm-up-until-stable discarded."""
    return int(row.get("warmup_discarded") or row.get("warmup") or 0)


def cell_costs(folder: Path) -> dict:
    """Per-cell harness, timed and warm-up seconds, from the part files of one run."""
    harness, timed, warmup, cells, launches, in_worker = [], 0.0, 0.0, 0, 0, 0.0
    for part in sorted((folder / "parts").glob("*.jsonl")):
        rows = [json.loads(line) for line in part.read_text().splitlines() if line.strip()]
        launches += 1
        cells += len(rows)
        for row in rows:
            samples = row.get("samples_us") or []
            timed += sum(samples) / 1e6
            if samples:
                warmup += _warm_calls(row) * statistics.median(samples) / 1e6
        for row, after in zip(rows, rows[1:], strict=False):
            samples = row.get("samples_us") or []
            wall = after["timestamp"] - row["timestamp"]
            in_worker += wall
            own_timed = sum(samples) / 1e6
            own_warm = _warm_calls(row) * statistics.median(samples) / 1e6 if samples else 0.0
            harness.append((wall - own_timed - own_warm, own_timed, row.get("impl", "")))
    return {"cells": cells, "launches": launches, "timed_s": timed, "warmup_s": warmup, "harness": harness,
            "in_worker_s": in_worker}


def run_once(repo: Path, suite: str, scratch: Path) -> dict:
    out = scratch / f"run-{time.monotonic_ns()}"
    started = time.perf_counter()
    done = subprocess.run([str(repo / ".venv/bin/pccl-bench"), "run", "sweep", suite, "--out", str(out)],
                          cwd=repo, capture_output=True, text=True)
    wall = time.perf_counter() - started
    if done.returncode not in (0, 3):
        raise SystemExit(f"{repo}: sweep {suite} exited {done.returncode}: {done.stderr[-500:]}")
    costs = cell_costs(out)
    shutil.rmtree(out, ignore_errors=True)
    return {**costs, "wall_s": wall}


def summarise(runs: list[dict]) -> dict:
    per_cell = [statistics.mean(h for h, _, _ in run["harness"]) * 1e3 for run in runs]
    medians = [statistics.median(h for h, _, _ in run["harness"]) * 1e3 for run in runs]
    timed_per_cell = [statistics.mean(t for _, t, _ in run["harness"]) * 1e3 for run in runs]
    whole = [(run["wall_s"] - run["timed_s"] - run["warmup_s"]) / run["cells"] * 1e3 for run in runs]
    launch = [(run["wall_s"] - run["in_worker_s"]) / run["launches"] for run in runs]
    budget = [2.0 + 0.05 * t for t in timed_per_cell]
    return {"cells": runs[0]["cells"], "launches": runs[0]["launches"],
            "wall_s": statistics.median(run["wall_s"] for run in runs),
            "timed_s": statistics.median(run["timed_s"] for run in runs),
            "harness_mean_ms": statistics.median(per_cell), "harness_median_ms": statistics.median(medians),
            "budget_ms": statistics.median(budget), "whole_ms": statistics.median(whole),
            "launch_s": statistics.median(launch)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--suite", action="append", help="suite names or paths (default: smoke, ci)")
    parser.add_argument("--install", action="append", help="NAME=REPO, a checkout with .venv (repeatable)")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    suites = args.suite or ["smoke", "ci"]
    installs = [tuple(item.split("=", 1)) for item in (args.install or [f"this={ROOT}"])]
    results: dict[tuple[str, str], list[dict]] = {}
    with tempfile.TemporaryDirectory(prefix="cell-overhead-") as scratch:
        for round_index in range(args.rounds):
            order = installs if round_index % 2 == 0 else installs[::-1]
            for suite in suites:
                for name, repo in order:
                    results.setdefault((suite, name), []).append(run_once(Path(repo), suite, Path(scratch)))
                    print(f"round {round_index + 1}/{args.rounds} {suite} {name} done", file=sys.stderr, flush=True)
    print(f"{args.rounds} rounds, medians over rounds; per-cell figures in ms\n")
    print("| suite | install | cells | launches | wall (s) | timed (s) | in-worker harness per cell, mean "
          "| median | target 2 ms + 5% timed | whole sweep per cell | per launch (s) |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for (suite, name), runs in results.items():
        s = summarise(runs)
        print(f"| {suite} | {name} | {s['cells']} | {s['launches']} | {s['wall_s']:.1f} | {s['timed_s']:.1f} "
              f"| {s['harness_mean_ms']:.2f} | {s['harness_median_ms']:.2f} | {s['budget_ms']:.2f} "
              f"| {s['whole_ms']:.1f} | {s['launch_s']:.2f} |")
    if len(installs) > 1:
        print_ratios(results, suites, [name for name, _ in installs])
    print_by_impl(results, suites, [name for name, _ in installs])
    return 0


def print_by_impl(results: dict[tuple[str, str], list[dict]], suites: list[str], names: list[str]) -> None:
    """The in-worker harness per cell by implementation: the median over every cell of every round."""
    print("\nin-worker harness per cell by implementation, median over all rounds' cells (ms)\n")
    print("| suite | implementation | cells | " + " | ".join(names) + " |")
    print("|---|---|---:|" + "---:|" * len(names))
    for suite in suites:
        pooled = {name: {} for name in names}
        for name in names:
            for run in results[suite, name]:
                for harness, _, impl in run["harness"]:
                    pooled[name].setdefault(impl, []).append(harness * 1e3)
        for impl in sorted(pooled[names[0]]):
            medians = [f"{statistics.median(pooled[name].get(impl) or [float('nan')]):.2f}" for name in names]
            print(f"| {suite} | {impl} | {len(pooled[names[0]][impl])} | " + " | ".join(medians) + " |")


def print_ratios(results: dict[tuple[str, str], list[dict]], suites: list[str], names: list[str]) -> None:
    """Each install against the first, round by round (the two ran back to back): the median and range
    over rounds of the ratio of their in-worker harness medians and of their whole sweeps per cell."""
    print(f"\nratio to {names[0]} within each round: median (range) over rounds\n")
    print("| suite | install | in-worker harness median | whole sweep per cell |")
    print("|---|---|---:|---:|")
    for suite in suites:
        first = [summarise([run]) for run in results[suite, names[0]]]
        for name in names[1:]:
            other = [summarise([run]) for run in results[suite, name]]
            cells = []
            for key in ("harness_median_ms", "whole_ms"):
                ratios = [b[key] / a[key] for a, b in zip(first, other, strict=True)]
                cells.append(f"{statistics.median(ratios):.2f} ({min(ratios):.2f}-{max(ratios):.2f})")
            print(f"| {suite} | {name} | {cells[0]} | {cells[1]} |")


if __name__ == "__main__":
    sys.exit(main())
