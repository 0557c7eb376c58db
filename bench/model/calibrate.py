"""Prediction bands calibrated on held-out checks: ``model calibrate`` and ``model band --calibration``.

A parameter band (bench/model/band.py) says how far the fit's terms may move, not how far the model's
form misses a GPU count it never saw. This band is built from what the model actually missed: the
held-out errors of ``model check --fit-on`` (``--errors``: one row per cell, with ``fit_max_ranks``, the
largest fitted count). Per implementation and collective, the error of a prediction ``k`` doublings
beyond the largest fitted count (k = log2(GPUs / fit_max_ranks)) is taken as

    |log(predicted / measured)| <= w1 x k^growth   (in a share ``level`` of the cells)

with ``w1`` the ``level`` quantile of |log error| one doubling out, and ``growth`` how that quantile grows
with distance, pooled over the implementations that have cells at both 1 and 2 doublings
(median of log2(w2 / w1), kept within [0, 2]). A speedup (one implementation's time over another's,
per cell) gets its own width from the paired errors, so errors the two share (the same job's slow
network) cancel as they do in the measured ratio. Calibration uses only cells below ``--below`` GPUs;
``coverage`` then reports the share of the cells at and above it that the band holds: a check on
counts the calibration never saw.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from bench.errors import BadInput
from bench.files import atomic_write
from bench.results.labels import impl_label

LEVEL = 0.9
MAX_GROWTH = 2.0
#: the implementations a speedup is taken over
BASELINES = ("xccl", "mpi")
NEEDED = ("collective", "impl", "nranks", "bytes_total", "time_us_p50", "model_us", "fit_max_ranks")


@dataclass
class Calibration:
    level: float
    growth: float
    below: int
    widths: dict[str, float]  # "<label>|<collective>" -> w1 (log units)
    pair_widths: dict[str, float]  # "<label>/<baseline>|<collective>" -> w1 of the speedup's log error
    cells: int
    checks: list[str]  # "fit <= N -> M GPUs" the calibration used

    def width(self, key: str, doublings: float, pairs: bool = False) -> float:
        """Half width (log units) of the band ``doublings`` beyond the fitted counts."""
        table = self.pair_widths if pairs else self.widths
        if key not in table:
            known = sorted(table)
            raise BadInput("--calibration", f"no calibrated width for {key!r} (calibrated: {', '.join(known)})")
        return table[key] * max(doublings, 1.0) ** self.growth

    def save(self, path: Path) -> None:
        atomic_write(path, lambda temp: temp.write_text(json.dumps(asdict(self), indent=1) + "\n"))


def load_calibration(path: Path) -> Calibration:
    try:
        raw = json.loads(path.read_text())
        return Calibration(**raw)
    except (OSError, ValueError, TypeError) as error:
        raise BadInput(str(path), f"not a calibration written by `model calibrate` ({error})"[:200]) from None


def read_errors(paths: list[Path]) -> pd.DataFrame:
    """The held-out errors of ``model check --fit-on --errors``, with label, doublings and log error."""
    frames = []
    for path in paths:
        try:
            frame = pd.read_csv(path)
        except (OSError, ValueError) as error:
            raise BadInput(str(path), f"cannot read it as CSV ({error})"[:200]) from None
        missing = [c for c in NEEDED if c not in frame.columns]
        if missing:
            raise BadInput(str(path), f"missing columns {missing}: write it with `model check --fit-on ... --errors`")
        frames.append(frame)
    errors = pd.concat(frames, ignore_index=True)
    errors = errors[(errors["time_us_p50"] > 0) & (errors["model_us"] > 0)]
    return errors.assign(label=errors.apply(impl_label, axis=1),
                         doublings=np.log2(errors["nranks"] / errors["fit_max_ranks"]),
                         log_error=np.log(errors["model_us"] / errors["time_us_p50"]))


def pair_errors(errors: pd.DataFrame) -> pd.DataFrame:
    """Per cell measured for both: the log error of the speedup of ``label`` over ``baseline`` (xccl or mpi)."""
    keys = ["fit_max_ranks", "nranks", "collective", "bytes_total"]
    rows = []
    for _, group in errors.groupby(keys):
        by_label = dict(zip(group["label"], group["log_error"], strict=False))
        for baseline in BASELINES:
            if baseline not in by_label:
                continue
            for label, error in by_label.items():
                if label != baseline:
                    first = group.iloc[0]
                    rows.append({**{k: first[k] for k in keys}, "doublings": first["doublings"], "label": label,
                                 "baseline": baseline, "log_error": by_label[baseline] - error})
    return pd.DataFrame(rows, columns=[*keys, "doublings", "label", "baseline", "log_error"])


def _key(row, pairs: bool) -> str:
    return f"{row.label}/{row.baseline}|{row.collective}" if pairs else f"{row.label}|{row.collective}"


def _quantiles(frame: pd.DataFrame, pairs: bool, level: float) -> dict[tuple[str, float], float]:
    out = {}
    for (key, doublings), group in frame.assign(key=[_key(r, pairs) for r in frame.itertuples()]).groupby(
            ["key", "doublings"]):
        out[(key, float(doublings))] = float(np.quantile(np.abs(group["log_error"]), level))
    return out


def calibrate(errors: pd.DataFrame, below: int, level: float = LEVEL) -> Calibration:
    """Widths and growth from the held-out cells below ``below`` GPUs."""
    used = errors[errors["nranks"] < below]
    if used.empty:
        raise BadInput("--below", f"{below}: no held-out cells below it to calibrate on")
    single, paired = _quantiles(used, False, level), _quantiles(pair_errors(used), True, level)
    ratios = [np.log2(q[(key, 2.0)] / q[(key, 1.0)]) for q in (single, paired) for key, d in q
              if d == 1.0 and (key, 2.0) in q and q[(key, 1.0)] > 0]
    growth = float(np.clip(np.median(ratios), 0.0, MAX_GROWTH)) if ratios else 1.0
    # w1 per key: its one-doubling quantile, else its nearest distance scaled back to one doubling
    widths: dict[str, dict[str, float]] = {"single": {}, "paired": {}}
    for name, table in (("single", single), ("paired", paired)):
        for key in sorted({key for key, _ in table}):
            distances = sorted((abs(d - 1.0), d) for k, d in table if k == key)
            nearest = distances[0][1]
            widths[name][key] = table[(key, nearest)] / max(nearest, 1.0) ** growth
    checks = sorted({f"fit <= {int(f)} -> {int(n)} GPUs" for f, n in zip(used["fit_max_ranks"], used["nranks"],
                                                                         strict=True)})
    return Calibration(level, growth, below, widths["single"], widths["paired"], len(used), checks)


def coverage(calibration: Calibration, errors: pd.DataFrame) -> pd.DataFrame:
    """Per implementation (and speedup) and check at or above the calibration's ``below``: the share of
    cells inside the band, and the band's half width as a factor."""
    held = errors[errors["nranks"] >= calibration.below]
    rows = []
    speedups = pair_errors(held)
    # one baseline over the other is the reciprocal of the reverse (same cells, same |error|): counted once
    speedups = speedups[~(speedups["label"].isin(BASELINES) & (speedups["label"] < speedups["baseline"]))]
    for pairs, frame in ((False, held), (True, speedups)):
        if frame.empty:
            continue
        frame = frame.assign(key=[_key(r, pairs) for r in frame.itertuples()])
        for (key, fit_max, nranks), group in frame.groupby(["key", "fit_max_ranks", "nranks"]):
            table = calibration.pair_widths if pairs else calibration.widths
            if key not in table:
                continue
            width = calibration.width(key, float(np.log2(nranks / fit_max)), pairs)
            rows.append({"band": ("speedup " if pairs else "time ") + key, "fit_max_ranks": int(fit_max),
                         "nranks": int(nranks), "cells": len(group),
                         "covered_pct": 100.0 * float(np.mean(np.abs(group["log_error"]) <= width)),
                         "half_width_factor": float(np.exp(width))})
    table = pd.DataFrame(rows, columns=["band", "fit_max_ranks", "nranks", "cells", "covered_pct",
                                        "half_width_factor"])
    for pairs in (False, True):
        part = table[table["band"].str.startswith("speedup" if pairs else "time")]
        if len(part):
            total = {"band": "all speedups" if pairs else "all times", "fit_max_ranks": 0, "nranks": 0,
                     "cells": int(part["cells"].sum()),
                     "covered_pct": float(np.average(part["covered_pct"], weights=part["cells"])),
                     "half_width_factor": float(np.median(part["half_width_factor"]))}
            table = pd.concat([table, pd.DataFrame([total])], ignore_index=True)
    return table
