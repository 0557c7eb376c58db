"""Measured rows as model calls, and the model's error on each of them."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from bench.errors import BadInput
from bench.importers.imported_row import ITEMSIZE
from bench.model.cost import Call, predict_us
from bench.model.impls import MODELS, variant_of_row
from bench.model.machine import Machine
from bench.model.model_run import MAX_MODEL_BYTES, shape_problem
from collectives.dtypes import DTYPES, itemsize

ERROR_COLUMNS = ["collective", "impl", "algorithm", "intra", "inter", "nranks", "ranks_per_node", "placement",
                 "dtype", "bytes_total", "oversubscribed", "time_us_p50", "model_us", "error_pct"]


@dataclass(frozen=True)
class Measured:
    call: Call
    time_us: float
    row: dict


#: a measured call of more than 10^12 us (11.6 days) is no measurement the model can fit
MAX_MEASURED_US = 1e12


def _row_problem(row: dict, shapes: dict, itemsize: int) -> str | None:
    """Why the model cannot take this measured row (its shape or size out of bounds), or None."""
    try:
        nranks, per_node, count = int(row["nranks"]), int(row["ranks_per_node"]), int(row["count_per_rank"])
    except (TypeError, ValueError, OverflowError):
        return "nranks, ranks_per_node and count_per_rank must be whole numbers"
    if (nranks, per_node) not in shapes:
        shapes[nranks, per_node] = shape_problem(nranks, per_node)
    if shapes[nranks, per_node]:
        return shapes[nranks, per_node]
    nbytes = count * itemsize * (1 if row["collective"] == "allreduce" else nranks)
    if not 0 <= nbytes <= MAX_MODEL_BYTES:
        return f"count_per_rank {count}: {nbytes} bytes a call, expected 0 to {MAX_MODEL_BYTES}"
    if not float(row["time_us_p50"]) <= MAX_MEASURED_US:
        return f"time_us_p50 {row['time_us_p50']!r} us: expected at most {MAX_MEASURED_US:g}"
    return None


def measured_calls(results: pd.DataFrame, libraries: set[str] | None = None) -> list[Measured]:
    """The ok rows the model can express (known variant, library in ``libraries`` if given); a row whose
    shape the model would not walk (more than MAX_RANKS GPUs, nodes that do not divide them) is a BadInput."""
    frame = results[(results["status"] == "ok") & (results["time_us_p50"] > 0)]
    calls, shapes = [], {}
    for row in frame.to_dict("records"):
        variant = variant_of_row(pd.Series(row))
        if variant is None or (libraries is not None and variant.library not in libraries):
            continue
        size = itemsize(row["dtype"]) if row["dtype"] in DTYPES else ITEMSIZE.get(row["dtype"])  # bf16 imports
        if size is None or variant.problem(row["collective"]):
            continue
        problem = _row_problem(row, shapes, size)
        if problem:
            raise BadInput("results", f"run {str(row.get('run_id', '?'))[:80]}, {row['collective']} {variant.label} "
                                      f"on {row['nranks']} ranks: {problem}")
        call = Call(row["collective"], variant, int(row["nranks"]), int(row["ranks_per_node"]),
                    int(row["count_per_rank"]), size, row["placement"] == "in_place")
        calls.append(Measured(call, float(row["time_us_p50"]), row))
    if not calls:
        raise BadInput("results", f"no ok cells the model can express ({', '.join(MODELS)})")
    return calls


def error_table(measured: list[Measured], machine: Machine) -> pd.DataFrame:
    """One row per cell: measured and modelled time, signed relative error in percent."""
    rows = []
    for item in measured:
        model_us = predict_us(item.call, machine)
        row = {name: item.row.get(name) for name in ERROR_COLUMNS[:-3]}
        row.update(time_us_p50=item.time_us, model_us=model_us,
                   error_pct=100.0 * (model_us - item.time_us) / item.time_us)
        rows.append(row)
    return pd.DataFrame(rows, columns=ERROR_COLUMNS)


def error_summary(errors: pd.DataFrame, by: tuple[str, ...] = ("nranks", "collective")) -> pd.DataFrame:
    """Median, 90th percentile and largest |error| (percent) per group, and over everything ("all")."""

    def stats(keys: tuple, group: pd.DataFrame) -> dict:
        values = group["error_pct"].abs().to_numpy()
        return {**dict(zip(by, keys, strict=True)), "cells": len(values),
                "median_abs_error_pct": float(np.median(values)),
                "p90_abs_error_pct": float(np.percentile(values, 90)), "max_abs_error_pct": float(values.max())}

    rows = [stats(key if isinstance(key, tuple) else (key,), group)
            for key, group in errors.groupby(list(by), sort=True)]
    rows.append(stats(("all",) * len(by), errors))
    return pd.DataFrame(rows)
