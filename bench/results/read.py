"""Reading result tables back (tune, and later gate/plot/report), with one-line errors."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from bench.errors import BadInput
from bench.results.table import SCHEMA_VERSION


def read_results(paths: list[Path]) -> pd.DataFrame:
    """Concatenate results tables from run folders or parquet files."""
    frames = []
    for path in paths:
        file = path / "results.parquet" if path.is_dir() else path
        if not file.exists():
            raise BadInput(str(path), "no results.parquet here")
        try:
            frame = pd.read_parquet(file)
        except Exception as error:  # pyarrow raises several types for corrupt files
            raise BadInput(str(file), f"unreadable Parquet table ({type(error).__name__})") from None
        versions = set(frame.get("schema_version", pd.Series(dtype=int)).dropna().astype(int))
        if versions - {SCHEMA_VERSION}:
            raise BadInput(str(file), f"schema version {sorted(versions)} is not {SCHEMA_VERSION}")
        if "arm" not in frame.columns:  # written before same-job arms existed
            frame["arm"] = ""
        frames.append(frame)
    if not frames or all(frame.empty for frame in frames):
        raise BadInput(" ".join(map(str, paths)), "the results tables are empty")
    return pd.concat(frames, ignore_index=True)
