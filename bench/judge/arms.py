"""Which samples the gate sets against which: the arms of a same-job run (``gate --arms``, ``ab``) and
alternating runs (``gate --paired``)."""

from __future__ import annotations

import numpy as np
import pandas as pd

from bench.errors import BadInput
from bench.plan.cells import ARM_FIELDS
from bench.results.runset import RunSet


def split_arms(runs: RunSet, baseline_arm: str, current_arm: str) -> tuple[RunSet, RunSet, bool]:
    """(baseline, current, paired) of a same-job run: the cells of two suite arms, matched on every
    key field but the arm (and the implementation fields that an arm sets). Every launch repeat
    becomes a run of its own, so that with >= 2 repeats the arms are judged pair by pair (the
    i-th repeat of each arm were measured together); with one repeat they are pooled."""
    arms = sorted(runs.results["arm"].fillna("").astype(str).unique()) if "arm" in runs.results else [""]
    for name in (baseline_arm, current_arm):
        if name not in arms:
            raise BadInput("--arms", f"no arm {name!r} in the run; it has {', '.join(a for a in arms if a) or 'none'}")
    if baseline_arm == current_arm:
        raise BadInput("--arms", "give two different arms: BASELINE CANDIDATE")
    sides = []
    for name in (baseline_arm, current_arm):
        results = runs.results[runs.results["arm"].eq(name)]
        samples = runs.samples[runs.samples["cell_key"].isin(list(results["cell_key"].astype(str)))] \
            if len(runs.samples) else runs.samples
        sides.append([results.copy(), samples.copy()])
    for column in ARM_FIELDS:
        values = [set(side[0][column].fillna("").astype(str)) for side in sides]
        if values[0] == values[1]:
            continue
        if len(values[0]) != 1 or len(values[1]) != 1:
            raise BadInput("--arms", f"the arms differ in {column} ({sorted(values[0])} vs {sorted(values[1])}) but a "
                                     f"side has several: an arm that sets {column} needs a suite with one entry")
        joined = f"{values[0].pop()}->{values[1].pop()}"
        for side in sides:
            side[0][column] = joined
            if len(side[1]):
                side[1][column] = pd.Categorical.from_codes(np.zeros(len(side[1]), np.int8), [joined])
    out = [RunSet(*(_per_repeat(frame) for frame in side), runs.metas, runs.sources) for side in sides]
    repeats = [side.results["run_id"].nunique() for side in out]
    return out[0], out[1], repeats[0] == repeats[1] >= 2


def _per_repeat(frame: pd.DataFrame) -> pd.DataFrame:
    """The arm column cleared, and each launch repeat a run of its own."""
    if not len(frame):
        return frame
    codes, pairs = pd.MultiIndex.from_arrays([frame["run_id"], frame["repeat"]]).factorize()
    names = [f"{run}/r{repeat}" for run, repeat in pairs]
    return frame.assign(arm=pd.Categorical.from_codes(np.zeros(len(frame), np.int8), [""]),
                        run_id=pd.Categorical.from_codes(codes, names))


def paired_runs(baseline: RunSet, current: RunSet) -> list[tuple[str, str]]:
    """(current run, baseline run) in measurement order: the i-th of each side were neighbours."""
    base, cur = baseline.run_order(), current.run_order()
    if len(base) != len(cur) or len(cur) < 2:
        raise BadInput("--paired", f"needs as many current runs as baseline runs, at least 2, measured in "
                                   f"alternation; got {len(cur)} current and {len(base)} baseline")
    return list(zip(cur, base, strict=True))
