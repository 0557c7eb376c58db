"""A set of runs read back for the gate, plots and reports: results, samples and provenance.

A path may be a run folder (results.parquet + samples.parquet + meta.json), a results.parquet
file (samples.parquet beside it is used when present), or a folder of run folders (a pooled
baseline such as results/baselines/ci/). Every problem is a one-line BadInput.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from bench.errors import BadInput
from bench.results.read import read_results
from bench.results.table import SAMPLE_COLUMNS, SCHEMA_VERSION


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


def run_folders(path: Path) -> list[Path]:
    """The run folders (or results files) that ``path`` stands for."""
    if not path.exists():
        raise BadInput(str(path), "no such file or folder")
    if path.is_file() or (path / "results.parquet").exists():
        return [path]
    inner = sorted(child for child in path.iterdir() if (child / "results.parquet").exists())
    if not inner:
        raise BadInput(str(path), "no results.parquet here or in its sub-folders")
    return inner


def _read_samples(folder: Path) -> pd.DataFrame:
    file = folder / "samples.parquet"
    if not file.exists():
        return pd.DataFrame(columns=SAMPLE_COLUMNS)
    try:
        frame = pd.read_parquet(file)
    except Exception as error:  # pyarrow raises several types for corrupt files
        raise BadInput(str(file), f"unreadable Parquet table ({type(error).__name__})") from None
    missing = [name for name in ("cell_key", "launch_id", "time_us") if name not in frame.columns]
    if missing:
        raise BadInput(str(file), f"not a samples table (no column {', '.join(missing)})")
    if "arm" not in frame.columns:  # written before same-job arms existed
        frame["arm"] = ""
    return frame


def _read_meta(folder: Path) -> dict:
    file = folder / "meta.json"
    if not file.exists():
        return {}
    try:
        meta = json.loads(file.read_text())
    except (OSError, ValueError) as error:
        raise BadInput(str(file), f"unreadable meta.json ({type(error).__name__})") from None
    version = meta.get("schema_version", SCHEMA_VERSION) if isinstance(meta, dict) else None
    if version != SCHEMA_VERSION:
        raise BadInput(str(file), f"schema version {version} is not {SCHEMA_VERSION}")
    return meta


def load_runs(paths: list[Path]) -> RunSet:
    """Pool every run that ``paths`` name into one RunSet."""
    results, samples, metas, sources = [], [], [], []
    for path in paths:
        for item in run_folders(path):
            folder = item.parent if item.is_file() else item
            frame = read_results([item])
            results.append(frame)
            keys = set(frame["cell_key"])
            found = _read_samples(folder)
            samples.append(found[found["cell_key"].isin(keys)] if len(found) else found)
            metas.append(_read_meta(folder) if item.is_dir() else {})
            sources.append(str(item))
    filled = [frame for frame in samples if len(frame)]  # empty frames would turn numbers into objects
    pooled = pd.concat(filled, ignore_index=True) if filled else samples[0]
    return RunSet(pd.concat(results, ignore_index=True), pooled, metas, sources)
