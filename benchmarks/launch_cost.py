"""What one launch costs (issue 26: launch pairs are the evidence of arms in launches of their own).

    .venv/bin/python benchmarks/launch_cost.py [--rounds 5] [--launches 10] [--json FILE]

Per round, interleaved: ``run sweep`` of a one-cell suite (8 B all-reduce, 2 ranks, the ci suite's
timing) with 1 launch and with ``--launches`` launches; the difference over the extra launches is
the cost of one launch as a sweep pays it (mpiexec, the ranks' start, MPI_Init, the worker's imports
and set-up, the cell, the harness following the job). Beside it, the parts a launch is made of,
each as a bare job of 2 ranks: ``mpiexec true``-like (python -c pass), mpi4py's import (MPI_Init), the
worker's imports. Medians over rounds; this machine's speed moves 1.2-2.5x minute to minute, so
compare figures of one run.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import yaml

ROOT = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent
SUITE = {"name": "launch-cost", "collectives": ["allreduce"], "implementations": ["mpi"], "ranks": [2],
         "ranks_per_node": 1, "sizes": {"min": "8B", "max": "8B"},
         "timing": {"mode": "sync", "warmup": 10, "iters": 300, "min_iters": 30, "budget_s": 0.05,
                    "target_ci": 0.01, "max_warmup": 200, "probe": True}}
PARTS = {"python": ["-c", "pass"], "mpi4py (MPI_Init)": ["-c", "from mpi4py import MPI"],
         # the worker's import no longer starts MPI (bench/rank/mpi_start.py): started here, as main does
         "worker imports": ["-c", "import bench.rank.worker; bench.rank.worker.start_mpi('host')"]}


def _timed(argv: list[str]) -> float:
    start = time.perf_counter()
    subprocess.run(argv, cwd=ROOT, check=True, capture_output=True)
    return time.perf_counter() - start


def sweep_seconds(folder: Path, launches: int) -> float:
    path = folder / f"suite-{launches}.yaml"
    path.write_text(yaml.safe_dump({**SUITE, "repeats": launches}))
    out = folder / f"run-{launches}-{time.monotonic_ns()}"
    return _timed([str(BIN / "pccl-bench"), "run", "sweep", str(path), "--out", str(out)])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--launches", type=int, default=10)
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    per_launch, parts = [], {name: [] for name in PARTS}
    with tempfile.TemporaryDirectory(prefix="launch-cost-") as scratch:
        for _ in range(args.rounds):
            one, many = sweep_seconds(Path(scratch), 1), sweep_seconds(Path(scratch), args.launches)
            per_launch.append((many - one) / (args.launches - 1))
            for name, program in PARTS.items():
                parts[name].append(_timed([str(BIN / "mpiexec"), "-n", "2", sys.executable, *program]))
    found = {"launch_s": float(np.median(per_launch)), "launch_s_all": per_launch,
             **{f"{name}_s": float(np.median(values)) for name, values in parts.items()}}
    print(f"one launch as a sweep pays it: {found['launch_s']:.3f} s (median of {args.rounds}; "
          f"{min(per_launch):.3f}-{max(per_launch):.3f})")
    for name in PARTS:
        print(f"  2-rank job of {name}: {found[name + '_s']:.3f} s")
    if args.json:
        args.json.write_text(json.dumps(found, indent=2) + "\n")


if __name__ == "__main__":
    main()
