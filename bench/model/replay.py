"""Communication time per training step, per implementation: modelled or measured.

Output columns (one row per GPU count and implementation): the workload, where the
times came from, the step's calls and bytes, time per collective and in total
(``comm_ms_per_step``), the speedup over the baseline implementation (``xccl`` when
present, else ``mpi``), and ``cost_per_step_usd`` = communication time x GPUs x price
per GPU-hour (the Manoa paper's price view; null without a price).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pandas as pd

from bench.errors import BadInput
from bench.model.cost import Call, predict_us
from bench.model.impls import Variant
from bench.model.machine import Machine
from bench.model.model_run import cost_usd, node_shape
from bench.model.workload import Workload, distinct_calls, step_calls
from bench.results.labels import impl_label
from collectives.dtypes import itemsize
from collectives.spec import COLLECTIVES

REPLAY_COLUMNS = [
    "workload", "strategy", "source", "machine", "nranks", "nnodes", "implementation", "calls", "bytes_per_step",
    "allgather_ms", "reduce_scatter_ms", "allreduce_ms", "comm_ms_per_step", "speedup_vs_baseline", "baseline",
    "price_per_gpu_hour_usd", "cost_per_step_usd",
]
#: (collective, count per rank, dtype, nranks) -> microseconds
Timer = Callable[[str, int, str, int], float]


@dataclass
class Timed:
    label: str
    timer: Timer


def model_timer(machine: Machine, variant: Variant) -> Timer:
    def time_us(collective: str, count: int, dtype: str, nranks: int) -> float:
        per_node = node_shape(machine, nranks)
        return predict_us(Call(collective, variant, nranks, per_node, count, itemsize(dtype)), machine)

    return time_us


def _interpolate_log(points: pd.Series, nbytes: int, where: str) -> float:
    sizes, times = points.index.to_numpy(dtype=float), points.to_numpy(dtype=float)
    if not sizes[0] <= nbytes <= sizes[-1]:
        raise BadInput(where, f"{nbytes} B lies outside the measured sizes {int(sizes[0])}-{int(sizes[-1])} B; "
                       "sweep a range that covers the workload (model replay --suite-out writes one)")
    return float(np.exp(np.interp(np.log(nbytes), np.log(sizes), np.log(times))))


def measured_timer(results: pd.DataFrame, label: str, ranks_per_node: Callable[[int], int] | None = None) -> Timer:
    """Times of implementation ``label`` from ok rows, interpolated in log-log between measured sizes.

    A cell measured in several launches (repeats, runs) counts with its best median, as ``tune``
    does: on a shared machine the least disturbed launch. ``ranks_per_node`` picks one node shape
    per rank count where the results hold several (8 ranks as 2x4 and 4x2 are different machines)."""
    frame = results[results["status"] == "ok"]
    frame = frame[frame.apply(impl_label, axis=1) == label]

    def time_us(collective: str, count: int, dtype: str, nranks: int) -> float:
        rows = frame[(frame["collective"] == collective) & (frame["nranks"] == nranks)]
        if ranks_per_node is not None and "ranks_per_node" in rows:
            rows = rows[rows["ranks_per_node"] == ranks_per_node(nranks)]
        if (rows["dtype"] == dtype).any():
            rows = rows[rows["dtype"] == dtype]
        if rows.empty:
            raise BadInput("results", f"no ok {label} {collective} cells on {nranks} ranks")
        points = rows.groupby("bytes_total")["time_us_p50"].min().sort_index()
        nbytes = (count if collective == "allreduce" else count * nranks) * itemsize(dtype)
        return _interpolate_log(points, nbytes, f"results ({label} {collective}, {nranks} ranks)")

    return time_us


def replay_rows(workload: Workload, ranks: list[int], timed: list[Timed], source: str, machine: str,
                ranks_per_node: Callable[[int], int], price: float | None) -> pd.DataFrame:
    rows = []
    for nranks in ranks:
        calls = step_calls(workload, nranks)
        counted = distinct_calls(calls)
        for item in timed:
            per_collective = dict.fromkeys(COLLECTIVES, 0.0)
            for (collective, count, dtype), times in counted.items():
                per_collective[collective] += times * item.timer(collective, count, dtype, nranks) / 1e3
            total_ms = sum(per_collective.values())
            rows.append({
                "workload": workload.name, "strategy": workload.strategy, "source": source, "machine": machine,
                "nranks": nranks, "nnodes": nranks // ranks_per_node(nranks), "implementation": item.label,
                "calls": len(calls), "bytes_per_step": sum(call.bytes_total(nranks) for call in calls),
                **{f"{name}_ms": value for name, value in per_collective.items()}, "comm_ms_per_step": total_ms,
                "price_per_gpu_hour_usd": price, "cost_per_step_usd": cost_usd(total_ms * 1e3, nranks, price),
            })
    return _with_speedups(pd.DataFrame(rows))


def _with_speedups(table: pd.DataFrame) -> pd.DataFrame:
    labels = set(table["implementation"])
    baseline = "xccl" if "xccl" in labels else "mpi" if "mpi" in labels else None
    table["baseline"] = baseline or ""
    table["speedup_vs_baseline"] = np.nan
    if baseline:
        base = table[table["implementation"] == baseline].set_index("nranks")["comm_ms_per_step"]
        table["speedup_vs_baseline"] = table["nranks"].map(base) / table["comm_ms_per_step"]
    return table[REPLAY_COLUMNS]
