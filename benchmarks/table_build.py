"""End-of-sweep tabulation: build_tables + write_run of cells with many samples, against the dict
per sample it replaced (``sample_rows``), interleaved, repeated.

A sub-microsecond cell timed for a 2 s budget keeps about 500,000 samples; a sweep of such cells
spent tens of seconds (over a minute for 2 M samples under load) making its tables.

    .venv/bin/python benchmarks/table_build.py --cells 4 --samples 500000 --repeats 3
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np

from bench.results.table import build_tables, frames, make_row, sample_rows, write_run


def cell_rows(cells: int, samples: int) -> list[dict]:
    rng = np.random.default_rng(0)
    return [{"collective": "allreduce", "impl": "mpi", "algorithm": "native", "nranks": 2, "nnodes": 1,
             "ranks_per_node": 2, "count_per_rank": 2 << index, "bytes_total": 16 << index, "dtype": "float32",
             "op": "sum", "placement": "out_of_place", "repeat": 0, "launch_id": "n2-rpn2-host", "status": "ok",
             "cell_key": f"k{index}", "samples_us": (0.4 + rng.random(samples)).tolist()} for index in range(cells)]


def per_sample_dicts(rows: list[dict], identity: dict):
    results, samples = [], []
    for values in rows:
        row = make_row(values, identity)
        results.append(row)
        samples += sample_rows(row, values["samples_us"])
    return frames(results, samples)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cells", type=int, default=4)
    parser.add_argument("--samples", type=int, default=500_000, help="samples per cell")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    rows, identity = cell_rows(args.cells, args.samples), {"run_id": "bench", "schema_version": 1}
    timings: dict[str, list[float]] = {"dict per sample": [], "columns": []}
    with tempfile.TemporaryDirectory() as scratch:
        for _ in range(args.repeats):
            for name, build in (("dict per sample", per_sample_dicts), ("columns", build_tables)):
                start = time.perf_counter()
                results, samples = build(rows, identity)
                write_run(Path(scratch), results, samples, {"schema_version": 1})
                timings[name].append(time.perf_counter() - start)
    old, new = (statistics.median(timings[name]) for name in ("dict per sample", "columns"))
    print(f"{args.cells} cells x {args.samples} samples, median of {args.repeats} (interleaved): "
          f"dict per sample {old:.2f} s, columns {new:.2f} s, ratio {old / new:.1f}x")


if __name__ == "__main__":
    main()
