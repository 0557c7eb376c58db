"""The machine-speed probe in the gate: a launch's samples in units of the probe measured beside it.

Every cell of a sweep is followed by a short probe call (bench/rank/probe.py); a launch that ran
on a slower machine (a co-tenant, a frequency change) shows it in the probe as well as in its
samples. ``gate --normalise probe`` divides that out; the probe's ratio is reported either way.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from bench.plan.cells import MATCH_KEY


def good_rows(rows: pd.DataFrame) -> pd.DataFrame:
    """Rows that measured something trustworthy (a pooled baseline may mix good and failed runs)."""
    return rows[rows["status"].eq("ok") & ~(rows["n_wrong"].fillna(0) > 0)]


LAUNCH = [*MATCH_KEY, "run_id", "launch_id"]


def launch_probes(rows: pd.DataFrame) -> pd.Series:
    """probe_us of every good launch of every cell (empty without a probe)."""
    if "probe_us" not in rows:
        return pd.Series(dtype=float)
    good = good_rows(rows)
    values = pd.to_numeric(good["probe_us"], errors="coerce")
    keep = values.notna() & (values > 0)
    return pd.Series(values[keep].to_numpy(), index=pd.MultiIndex.from_frame(
        good.loc[keep, LAUNCH].astype({"run_id": str, "launch_id": str})), dtype=float)


def probe_ratio(current: pd.DataFrame, baseline: pd.DataFrame) -> float | None:
    """Median over the cells of both sides of median(current probe) / median(baseline probe)."""
    cur, base = launch_probes(current), launch_probes(baseline)
    if cur.empty or base.empty:
        return None
    per_cell = (cur.groupby(level=list(range(len(MATCH_KEY)))).median()
                / base.groupby(level=list(range(len(MATCH_KEY)))).median()).dropna()
    return float(np.exp(np.median(np.log(per_cell)))) if len(per_cell) else None


def probe_scales(rows: pd.DataFrame, baseline_rows: pd.DataFrame) -> dict[tuple[str, str, str], float]:
    """Per launch (cell_key, run_id, launch_id): the baseline's median probe of the cell / the probe
    measured beside this launch, the factor that puts its samples in units of the probe. Launches
    without a probe keep their times."""
    reference = launch_probes(baseline_rows).groupby(level=list(range(len(MATCH_KEY)))).median()
    good = good_rows(rows)
    probes = pd.to_numeric(good["probe_us"], errors="coerce") if "probe_us" in good else pd.Series(dtype=float)
    scales = {}
    for row, probe in zip(good.itertuples(index=False), probes, strict=True):
        key = tuple(getattr(row, name) for name in MATCH_KEY)
        if probe > 0 and key in reference.index:
            scales[(str(row.cell_key), str(row.run_id), str(row.launch_id))] = float(reference[key]) / float(probe)
    return scales
