"""How sure a speedup is: the ratio of two cells' medians with an interval, and a mark when unsure.

Each cell's median gets a two-level bootstrap interval from its samples (launches, then
iterations: bench.results.stats); the ratio baseline/cell gets the conservative interval from the two
(low = base low / cell high, high = base high / cell low). A ratio is *unsure* when either cell ran
oversubscribed (more ranks than cores: one descheduled rank makes a cell slow as a whole, which no
interval over its own iterations shows), when either cell was descheduled (its median more than
``DESCHEDULED_FACTOR`` times its fastest call: on a machine shared with other load a call that lasts
longer than a scheduler slice is interrupted nearly every time, so the median measures the scheduler,
docs/OPENMPI.md), when its interval spans more than ``WIDE_FACTOR``, or when there are no samples to
judge (imported cells). Tables, reports and plots print an unsure
ratio with ``?`` (and its interval where known), so a noisy cell never reads as a 50x win.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from bench.plan.cells import CELL_KEY, KEY_DEFAULTS
from bench.results.labels import field
from bench.results.stats import median_interval
from collectives.spec import reduces

#: a ratio whose interval's high/low exceeds this is unsure
WIDE_FACTOR = 2.0
#: bootstrap resamples per cell (a few hundred bound the 95% interval well enough for a mark)
RESAMPLES = 400
#: a cell whose median exceeds its fastest call this many times was descheduled, not slow (2-rank cells
#: below 1 MiB stay under 1.6x on a loaded 2-core machine; 2-4 MiB ones reach 5-15x: docs/OPENMPI.md)
DESCHEDULED_FACTOR = 3.0
UNSURE_NOTE = ("x? = unsure: oversubscribed (more ranks than cores), 95% interval (shown) wider than "
               f"{WIDE_FACTOR:g}x, or no samples; not a result")
#: the sweep's own tables, which judge each cell's median against its fastest call too (speedup());
#: reports and plots work from pooled cells without it
CELL_UNSURE_NOTE = ("x? = unsure: oversubscribed (more ranks than cores), descheduled (median > "
                    f"{DESCHEDULED_FACTOR:g}x the fastest call), 95% interval (shown) wider than "
                    f"{WIDE_FACTOR:g}x, or no samples; not a result")

Intervals = dict[tuple, tuple[float, float]]


def cell_identity(row) -> tuple:
    """The measurement a row is, whatever its repeat or run (a collective that reduces nothing has no op)."""
    values = []
    for name in CELL_KEY:
        value = field(row, name, KEY_DEFAULTS.get(name, ""))  # a table without buffers: warm
        if name == "op" and not reduces(field(row, "collective")):
            value = ""
        if name == "mode" and not value:  # a table from before call modes: blocking
            value = "blocking"
        if isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(value, bool) \
                and float(value).is_integer():
            value = int(value)
        values.append(str(value))
    return tuple(values)


def median_intervals(samples: pd.DataFrame | None) -> Intervals:
    """95% interval of each cell's median, its samples grouped by launch (repeats and runs pooled)."""
    if samples is None or samples.empty:
        return {}
    launch = [name for name in ("run_id", "launch_id") if name in samples]
    present = [name for name in CELL_KEY if name in samples]  # tables from before same-job arms lack "arm"
    # one identity per distinct key, not per sample (a fast cell has millions of samples); keys that
    # differ only where the identity does not look (an all-gather's op) pool
    pooled: dict[tuple, list[np.ndarray]] = {}
    for key, cell in samples.groupby(present, sort=False, dropna=False, observed=True):
        identity = cell_identity(dict(zip(present, key if isinstance(key, tuple) else (key,), strict=True)))
        groups = [part["time_us"].to_numpy(dtype=float) for _, part in cell.groupby(launch, sort=False,
                                                                                      observed=True)]
        pooled.setdefault(identity, []).extend(group[np.isfinite(group)] for group in groups)
    intervals = {}
    for identity, groups in pooled.items():
        groups = [group for group in groups if len(group)]
        if groups:
            intervals[identity] = median_interval(groups, resamples=RESAMPLES)
    return intervals


@dataclass(frozen=True)
class Speedup:
    """baseline time / cell time (> 1: the cell is faster), with what is known of its spread."""

    ratio: float
    low: float | None
    high: float | None
    oversubscribed: bool
    #: either cell's median was set by the scheduler (descheduled())
    descheduled: bool = False

    @property
    def sure(self) -> bool:
        return (not self.oversubscribed and not self.descheduled and self.low is not None
                and self.high <= WIDE_FACTOR * self.low)

    def text(self) -> str:
        if self.sure:
            return f"{self.ratio:.2f}x"
        spread = f" [{self.low:.2g}-{self.high:.2g}]" if self.low is not None else ""
        return f"{self.ratio:.2f}x?{spread}"


def speedup(baseline, row, intervals: Intervals, time_column: str = "time_us_p50") -> Speedup:
    """The speedup of ``row`` over ``baseline`` (rows with ``time_column``)."""
    base_time, time = float(field(baseline, time_column)), float(field(row, time_column))
    base, mine = intervals.get(cell_identity(baseline)), intervals.get(cell_identity(row))
    low = high = None
    if base and mine and mine[0] > 0:
        low, high = base[0] / mine[1], base[1] / mine[0]
    oversubscribed = bool(field(row, "oversubscribed", False)) or bool(field(baseline, "oversubscribed", False))
    return Speedup(base_time / time, low, high, oversubscribed, descheduled(row) or descheduled(baseline))


def descheduled(row) -> bool:
    """Whether the cell's median is more than DESCHEDULED_FACTOR times its fastest call (rows without
    ``time_us_min``, imported ones, are not judged)."""
    fastest, median = field(row, "time_us_min", None), field(row, "time_us_p50", None)
    try:
        return fastest is not None and median is not None and float(median) > DESCHEDULED_FACTOR * float(fastest) > 0
    except (TypeError, ValueError):
        return False
