"""Which verdict ratios of finished sweeps the descheduled test (bench/results/speedup.py) turns
unsure: each results folder's end-of-sweep verdict with and without the rows' ``time_us_min``.

    python benchmarks/rejudge_unsure.py results/<run> [results/<run> ...]      (docs/OPENMPI.md)
"""

from __future__ import annotations

import sys
from pathlib import Path

import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.present.best import best_variants  # noqa: E402
from bench.present.console import _one_line_per_cell  # noqa: E402
from bench.results.speedup import median_intervals  # noqa: E402


def main(folders: list[str]) -> None:
    for folder in map(Path, folders):
        results = _one_line_per_cell(pd.read_parquet(folder / "results.parquet"))
        samples_path = folder / "samples.parquet"
        intervals = median_intervals(pd.read_parquet(samples_path) if samples_path.exists() else None)
        now = best_variants(results, intervals)
        before = best_variants(results.assign(time_us_min=None), intervals)
        for shape, table in now.items():
            for (size, collective), best in table.items():
                old = before[shape][(size, collective)]
                if old.sure and not best.sure:
                    print(f"{folder.name}: {shape[0]} ranks {collective} {size} B {best.label}: "
                          f"{old.ratio_text} -> {best.ratio_text}")


if __name__ == "__main__":
    if len(sys.argv) < 2:
        raise SystemExit("usage: python benchmarks/rejudge_unsure.py RESULTS_FOLDER [...]")
    main(sys.argv[1:])
