"""A gate on large sample tables: time and peak memory of ``pccl-bench gate`` on N sample rows a side.

Makes a baseline and a current run folder from a committed run (results/baselines/ci/run-1 by
default) with every cell's samples repeated to N rows in all (a launch keeps its id; iterations
continue), the current times x1.25 on every other cell, then runs the gate in a subprocess and
reports its wall time, peak RSS (ru_maxrss of the child) and verdict counts.

    .venv/bin/python benchmarks/gate_large.py --rows 10000000 --json benchmarks/data/inputs/gate-large.json
    git archive HEAD~1 | tar -x -C /tmp/before && .venv/bin/python benchmarks/gate_large.py --tree /tmp/before
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

ROOT = Path(__file__).resolve().parent.parent


def make_run(source: Path, folder: Path, rows: int, slow: float, seed: int) -> None:
    folder.mkdir(parents=True)
    results = pd.read_parquet(source / "results.parquet")
    samples = pd.read_parquet(source / "samples.parquet")
    reps = int(np.ceil(rows / len(samples)))
    big = samples.loc[samples.index.repeat(reps)].reset_index(drop=True).iloc[:rows]
    big["iteration"] = big.groupby(["cell_key", "launch_id"]).cumcount().to_numpy()
    noise = np.random.default_rng(seed).lognormal(0.0, 0.05, len(big))
    cell = big.groupby(["collective", "impl", "algorithm", "nranks", "count_per_rank"], sort=False).ngroup()
    scale = np.where(cell.to_numpy() % 2 == 0, slow, 1.0)
    big["time_us"] = big["time_us"].to_numpy() * noise * scale
    pq.write_table(pa.Table.from_pandas(big, preserve_index=False), folder / "samples.parquet")
    results.to_parquet(folder / "results.parquet", index=False)
    (folder / "meta.json").write_text((source / "meta.json").read_text())


def _peak_child(argv: list[str], tree: Path) -> tuple[subprocess.CompletedProcess, float, float]:
    """Run ``argv``; (its output, wall seconds, its own peak RSS in MiB from wait4)."""
    start = time.perf_counter()
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        process = subprocess.Popen(argv, stdout=out, stderr=err, text=True, cwd=tree)
        _, status, usage = os.wait4(process.pid, 0)
        process.returncode = os.waitstatus_to_exitcode(status)
        wall = time.perf_counter() - start
        out.seek(0), err.seek(0)
        done = subprocess.CompletedProcess(argv, process.returncode, out.read(), err.read())
    return done, wall, usage.ru_maxrss / 1024


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=10_000_000, help="sample rows per side")
    parser.add_argument("--source", type=Path, default=ROOT / "results/baselines/ci/run-1")
    parser.add_argument("--json", type=Path, help="write the figures here")
    parser.add_argument("--tree", type=Path, default=ROOT, help="checkout whose gate runs (before/after)")
    parser.add_argument("--make", type=Path, help=argparse.SUPPRESS)  # the child that writes the folders
    args = parser.parse_args()
    if args.make:
        make_run(args.source, args.make / "base", args.rows, 1.0, 1)
        make_run(args.source, args.make / "cur", args.rows, 1.25, 2)
        return
    with tempfile.TemporaryDirectory(prefix="gate-large-") as scratch:
        # the tables are made in a child of their own, so that this process stays small and the
        # gate's peak memory (wait4 of its process) is the gate's alone
        made = time.perf_counter()
        subprocess.run([sys.executable, __file__, "--rows", str(args.rows), "--source", str(args.source),
                        "--make", scratch], check=True)
        made = time.perf_counter() - made
        base, cur = Path(scratch) / "base", Path(scratch) / "cur"
        size_mb = (cur / "samples.parquet").stat().st_size / 1e6
        done, wall, peak_mib = _peak_child([sys.executable, "-m", "bench", "gate", str(base), str(cur)], args.tree)
    figures = {"tree": str(args.tree), "rows_per_side": args.rows,
               "samples_parquet_mb": round(size_mb, 1), "gate_wall_s": round(wall, 1),
               "gate_peak_rss_mib": round(peak_mib), "exit_code": done.returncode,
               "headline": done.stdout.strip().splitlines()[-1] if done.stdout.strip() else done.stderr.strip()[-300:],
               "setup_s": round(made, 1)}
    print(json.dumps(figures, indent=2))
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(figures, indent=2) + "\n")


if __name__ == "__main__":
    main()
