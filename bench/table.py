"""The tidy result table: one row per cell, per-iteration samples in a long table.

Columns are a contract with the gate, plots and reports: add, never rename.
Files are written atomically (temp file + rename).
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pandas as pd

from bench.collspec import busbw_factor
from bench.plan import CELL_KEY

SCHEMA_VERSION = 1

COLUMNS = [
    # identity
    "run_id", "suite", "launch_id", "timestamp", "cell_key",
    # what
    "collective", "impl", "algorithm", "intra", "inter", "resolved_algorithm", "transport", "library",
    "library_version",
    # where
    "device", "nranks", "nnodes", "ranks_per_node", "virtual_nodes", "hosts",
    # size
    "dtype", "op", "count_per_rank", "bytes_per_rank", "bytes_total", "placement", "repeat",
    # timing
    "timing_mode", "warmup", "iters", "time_us_min", "time_us_p50", "time_us_mean", "time_us_p95",
    "time_us_p99", "time_us_max", "time_us_std", "algbw_gbps", "busbw_gbps",
    # outcome
    "n_wrong", "status", "error",
    # provenance (full detail in meta.json)
    "mpi_thread_level", "oversubscribed", "tool_version", "git_sha", "schema_version",
    # GPU cells: how GPU-awareness was decided, which device each rank used
    "gpu_aware_how", "gpu_binding",
    # modelled runs (pccl-bench model): the machine description, and the GPU-time price of a call
    "model_machine", "price_per_gpu_hour_usd", "cost_per_call_usd",
]
#: "modelled": rows that an analytical model produced rather than a measurement
STATUSES = ("ok", "wrong", "failed", "timeout", "skipped", "unsupported", "modelled")
SAMPLE_COLUMNS = ["run_id", "cell_key", *CELL_KEY, "repeat", "launch_id", "iteration", "time_us"]


def timing_stats(samples_us: list[float], bytes_total: int, collective: str, nranks: int) -> dict:
    """Order statistics of the per-iteration times; bandwidths from the median (decimal GB/s)."""
    if not samples_us:
        return {name: np.nan for name in COLUMNS if name.startswith("time_us_")} | {
            "algbw_gbps": np.nan, "busbw_gbps": np.nan}
    times = np.asarray(samples_us, dtype=np.float64)
    p50 = float(np.median(times))
    algbw = bytes_total / p50 / 1e3 if p50 > 0 else np.nan
    return {
        "time_us_min": float(times.min()), "time_us_p50": p50, "time_us_mean": float(times.mean()),
        "time_us_p95": float(np.percentile(times, 95)), "time_us_p99": float(np.percentile(times, 99)),
        "time_us_max": float(times.max()), "time_us_std": float(times.std(ddof=1)) if len(times) > 1 else 0.0,
        "algbw_gbps": algbw, "busbw_gbps": algbw * busbw_factor(collective, nranks),
    }


def build_tables(rows: list[dict], identity: dict) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(results, samples) DataFrames from worker/launcher rows plus run identity and provenance."""
    results, samples = [], []
    for row in rows:
        full = {**identity, "intra": "", "inter": "", **row}
        full.update(timing_stats(row.get("samples_us", []), row["bytes_total"], row["collective"], row["nranks"]))
        results.append({name: full.get(name) for name in COLUMNS})
        for iteration, value in enumerate(row.get("samples_us", [])):
            samples.append({**{name: full.get(name) for name in SAMPLE_COLUMNS[:-2]},
                            "iteration": iteration, "time_us": value})
    results_frame = pd.DataFrame(results, columns=COLUMNS)
    if len(results_frame):
        results_frame["timestamp"] = pd.to_datetime(results_frame["timestamp"], unit="s", utc=True)
    return results_frame, pd.DataFrame(samples, columns=SAMPLE_COLUMNS)


def atomic_write(path: Path, write: Callable[[Path], None]) -> None:
    """Write through a temp file in the same folder, then rename over ``path``."""
    handle, temp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    os.close(handle)
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(temp, 0o666 & ~umask)  # mkstemp makes 0600; results are as readable as any other file
    try:
        write(Path(temp))
        os.replace(temp, path)
    except BaseException:
        Path(temp).unlink(missing_ok=True)
        raise


def write_run(folder: Path, results: pd.DataFrame, samples: pd.DataFrame, meta: dict) -> None:
    atomic_write(folder / "results.parquet", lambda p: results.to_parquet(p, index=False))
    atomic_write(folder / "results.csv", lambda p: results.to_csv(p, index=False))
    atomic_write(folder / "samples.parquet", lambda p: samples.to_parquet(p, index=False))
    atomic_write(folder / "meta.json", lambda p: p.write_text(json.dumps(meta, indent=2, default=str) + "\n"))
