"""Measured rows as model calls, and the model's error on each of them."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from bench.errors import BadInput
from bench.importers.rows import ITEMSIZE
from bench.model.cost import Call, predict_us
from bench.model.impls import variant_of_row
from bench.model.machine import Machine
from collectives.dtypes import DTYPES, itemsize

ERROR_COLUMNS = ["collective", "impl", "algorithm", "intra", "inter", "nranks", "ranks_per_node", "placement",
                 "dtype", "bytes_total", "oversubscribed", "time_us_p50", "model_us", "error_pct"]


@dataclass(frozen=True)
class Measured:
    call: Call
    time_us: float
    row: dict


def measured_calls(results: pd.DataFrame, libraries: set[str] | None = None) -> list[Measured]:
    """The ok rows the model can express (known variant, library in ``libraries`` if given)."""
    frame = results[(results["status"] == "ok") & (results["time_us_p50"] > 0)]
    calls = []
    for row in frame.to_dict("records"):
        variant = variant_of_row(pd.Series(row))
        if variant is None or (libraries is not None and variant.library not in libraries):
            continue
        size = itemsize(row["dtype"]) if row["dtype"] in DTYPES else ITEMSIZE.get(row["dtype"])  # bf16 imports
        if size is None or variant.problem(row["collective"]):
            continue
        call = Call(row["collective"], variant, int(row["nranks"]), int(row["ranks_per_node"]),
                    int(row["count_per_rank"]), size, row["placement"] == "in_place")
        calls.append(Measured(call, float(row["time_us_p50"]), row))
    if not calls:
        raise BadInput("results", "no ok cells the model can express (mpi, xccl, pccl-flat, pccl-hier)")
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


def impl_label(row) -> str:
    if row["impl"] == "pccl-hier":
        return f"pccl-hier:{row['inter']}/{row['intra']}"
    return row["impl"] if row["impl"] in ("mpi", "xccl") else f"{row['impl']}:{row['algorithm']}"


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
