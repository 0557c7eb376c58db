"""The gate's samples by cell, run and launch: one sort of integer codes, so that 10 M samples take
seconds and a few hundred MB (docs/INPUTS.md)."""

from __future__ import annotations

import numpy as np
import pandas as pd

from bench.plan.cells import MATCH_KEY

#: per cell key, run id and launch id: the launch's iteration times, in iteration order
Groups = dict[tuple, dict[str, dict[str, np.ndarray]]]


def _codes(values: pd.Series) -> tuple[np.ndarray, list[str]]:
    """Integer codes and the distinct values of a key column (a categorical's own codes: no copy)."""
    if isinstance(values.dtype, pd.CategoricalDtype):
        return values.cat.codes.to_numpy(), [str(name) for name in values.cat.categories]
    codes, uniques = pd.factorize(values.astype(str))
    return codes, [str(name) for name in uniques]


def sample_groups(samples: pd.DataFrame, rows: pd.DataFrame, scales: dict | None = None) -> Groups:
    """Per cell key and run id, one array of iteration times per launch: the samples of ``rows``
    (their cell keys), each launch's times x ``scales[(cell_key, run_id, launch_id)]`` where given.
    One sort of integer codes, so that 10 M samples take seconds and a few hundred MB."""
    if samples.empty or rows.empty:
        return {}
    key_of = dict(zip(rows["cell_key"].astype(str), rows[list(MATCH_KEY)].itertuples(index=False, name=None),
                      strict=True))
    samples = samples[samples["cell_key"].isin(list(key_of))]
    if samples.empty:
        return {}
    (cells, cell_names), (runs, run_names), (launches, launch_names) = (
        _codes(samples[name]) for name in ("cell_key", "run_id", "launch_id"))
    iteration = samples["iteration"].to_numpy() if "iteration" in samples else np.zeros(len(samples), np.int64)
    order = np.lexsort((iteration, launches, runs, cells))
    times = samples["time_us"].to_numpy(dtype=np.float64)[order]
    ids = np.stack([cells[order], runs[order], launches[order]])
    starts = np.flatnonzero(np.concatenate([[True], (ids[:, 1:] != ids[:, :-1]).any(axis=0)]))
    groups: Groups = {}
    for start, stop in zip(starts, [*starts[1:], len(times)], strict=True):
        cell_key, run, launch = cell_names[ids[0, start]], run_names[ids[1, start]], launch_names[ids[2, start]]
        part = times[start:stop]
        scale = (scales or {}).get((cell_key, run, launch))
        part = part * scale if scale is not None else part
        launch_times = groups.setdefault(key_of[cell_key], {}).setdefault(run, {})
        # two repeats of a cell in one launch pool, as they always did
        launch_times[launch] = np.concatenate([launch_times[launch], part]) if launch in launch_times else part
    return groups


def launches_of(runs: dict[str, dict[str, np.ndarray]]) -> list[np.ndarray]:
    return [times for launches in runs.values() for times in launches.values()]
