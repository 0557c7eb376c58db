"""A set of runs read back for the gate, plots and reports: results, samples and provenance.

A path may be a run folder (results.parquet + samples.parquet + meta.json), a results.parquet
file (samples.parquet beside it is used when present), or a folder of run folders (a pooled
baseline such as results/baselines/ci/). Every problem is a one-line BadInput.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from bench.errors import BadInput
from bench.results.read import concat_samples, read_meta, read_results, read_samples


@dataclass
class RunSet:
    """Results and samples of one or more runs, pooled."""

    results: pd.DataFrame
    samples: pd.DataFrame
    metas: list[dict] = field(default_factory=list)
    sources: list[str] = field(default_factory=list)

    @property
    def run_ids(self) -> list[str]:
        return sorted(self.results["run_id"].dropna().astype(str).unique())

    def run_order(self) -> list[str]:
        """Run ids in the order they were measured (their first cell's timestamp)."""
        first = self.results.groupby(self.results["run_id"].astype(str))["timestamp"].min()
        return list(first.sort_values(kind="stable").index)


def pool(sets: list[RunSet]) -> RunSet:
    """Run sets read before, pooled as ``load_runs`` of all their paths would (no file read again)."""
    return RunSet(pd.concat([s.results for s in sets], ignore_index=True), concat_samples([s.samples for s in sets]),
                  [m for s in sets for m in s.metas], [source for s in sets for source in s.sources])


def run_folders(path: Path) -> list[Path]:
    """The run folders (or results files) that ``path`` stands for."""
    if not os.path.lexists(path):
        raise BadInput(str(path), "no such file or folder")
    if not path.is_dir() or os.path.lexists(path / "results.parquet"):
        return [path]  # a file (or a FIFO, a broken link): the reader says what is wrong with it
    try:
        inner = sorted(child for child in path.iterdir() if os.path.lexists(child / "results.parquet"))
    except OSError as error:
        raise BadInput(str(path), f"cannot be listed ({error.strerror or type(error).__name__})") from None
    if not inner:
        raise BadInput(str(path), "no results.parquet here or in its sub-folders")
    return inner


def load_runs(paths: list[Path]) -> RunSet:
    """Pool every run that ``paths`` name into one RunSet."""
    results, samples, metas, sources = [], [], [], []
    for path in paths:
        for item in run_folders(path):
            folder = item.parent if item.is_file() else item
            frame = read_results([item])
            results.append(frame)
            keys = set(frame["cell_key"])
            found = read_samples(folder)
            samples.append(found[found["cell_key"].isin(keys)] if len(found) else found)
            metas.append(read_meta(folder) if item.is_dir() else {})
            sources.append(str(item))
    return RunSet(pd.concat(results, ignore_index=True), concat_samples(samples), metas, sources)
