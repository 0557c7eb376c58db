"""Statistics of the regression gate: the median ratio of two sample sets with a bootstrap interval.

Samples come in groups, one per MPI launch (repeats of a cell, and the runs of a pooled baseline).
Timings of one launch share its placement, its neighbours' load and its warm caches, so launches
differ more than iterations do (Hunold & Carpen-Amarie). The interval therefore comes from a
two-level bootstrap: draw launches with replacement, then iterations within each drawn launch.
A cell that was slow in one launch only gets a wide interval, not a false verdict.
Two arms timed in turns in the same launches are compared turn by turn instead (``turn_ratio``).
Numpy only; a fixed seed makes every verdict reproducible.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

#: bootstrap resamples per side and cell
DEFAULT_RESAMPLES = 1000
#: iterations drawn per launch in one resample (launches with more are subsampled)
MAX_DRAWS_PER_LAUNCH = 256
#: values drawn at once by one bootstrap (8 bytes each, and as many int64 positions)
MAX_DRAWN = 16 << 20


@dataclass(frozen=True)
class RatioEstimate:
    """Median of the current samples over the median of the baseline samples, with its interval."""

    ratio: float
    low: float
    high: float
    current_us: float
    baseline_us: float
    n_current: int
    n_baseline: int
    launches_current: int
    launches_baseline: int


def bootstrap_medians(groups: list[np.ndarray], resamples: int, rng: np.random.Generator) -> np.ndarray:
    """Medians of ``resamples`` two-level resamples (launches, then iterations within each launch).

    Every drawn launch contributes the same number of draws, so launches weigh the same.
    """
    sizes = np.array([len(group) for group in groups])
    values = np.concatenate(groups)
    offsets = np.concatenate([[0], np.cumsum(sizes)[:-1]])
    draws = int(min(sizes.max(), MAX_DRAWS_PER_LAUNCH))
    # in chunks of at most MAX_DRAWN values (256 MB), whatever the resamples and launches; one
    # chunk, and so the same draws as ever, below that
    chunk = max(1, MAX_DRAWN // (len(groups) * draws))
    medians = []
    for start in range(0, resamples, chunk):
        count = min(chunk, resamples - start)
        chosen = rng.integers(0, len(groups), size=(count, len(groups)))
        positions = (rng.random((count, len(groups), draws)) * sizes[chosen][..., None]).astype(np.int64)
        picked = values[offsets[chosen][..., None] + positions]
        medians.append(np.median(picked.reshape(count, -1), axis=1))
    return np.concatenate(medians)


def median_ratio(current: list[np.ndarray], baseline: list[np.ndarray], confidence: float = 0.95,
                 resamples: int = DEFAULT_RESAMPLES, seed: int = 0) -> RatioEstimate:
    """Pooled median ratio current/baseline and its two-sided bootstrap interval at ``confidence``.

    ``current`` and ``baseline`` are lists of per-launch sample arrays (each non-empty).
    """
    rng = np.random.default_rng(seed)
    current_us = float(np.median(np.concatenate(current)))
    baseline_us = float(np.median(np.concatenate(baseline)))
    ratios = bootstrap_medians(current, resamples, rng) / bootstrap_medians(baseline, resamples, rng)
    tail = (1.0 - confidence) / 2.0 * 100.0
    low, high = np.percentile(ratios, [tail, 100.0 - tail])
    return RatioEstimate(
        ratio=current_us / baseline_us, low=float(low), high=float(high), current_us=current_us,
        baseline_us=baseline_us, n_current=int(sum(map(len, current))), n_baseline=int(sum(map(len, baseline))),
        launches_current=len(current), launches_baseline=len(baseline),
    )


def median_interval(groups: list[np.ndarray], confidence: float = 0.95, resamples: int = DEFAULT_RESAMPLES,
                    seed: int = 0) -> tuple[float, float]:
    """Two-sided bootstrap interval of the pooled median of one sample set."""
    medians = bootstrap_medians(groups, resamples, np.random.default_rng(seed))
    tail = (1.0 - confidence) / 2.0 * 100.0
    low, high = np.percentile(medians, [tail, 100.0 - tail])
    return float(low), float(high)


#: Walsh averages held at once by hodges_lehmann (8 bytes each)
MAX_WALSH = 1 << 22


def hodges_lehmann(values: np.ndarray) -> np.ndarray:
    """The Hodges-Lehmann estimate along the last axis: the median of the means of every pair of values
    (each value with itself too). As robust as the median to a few wild values (a launch that a
    co-tenant stalled), and nearly as efficient as the mean: from 4-16 launch pairs its interval is
    0.6-0.9x the median's wide (docs/GATE.md)."""
    values = np.asarray(values, dtype=np.float64)
    count = values.shape[-1]
    first, second = np.triu_indices(count)
    rows = values.reshape(-1, count)
    chunk = max(1, MAX_WALSH // len(first))
    out = np.concatenate([np.median((part[:, first] + part[:, second]) / 2.0, axis=1)
                          for part in (rows[start:start + chunk] for start in range(0, len(rows), chunk))])
    return out.reshape(values.shape[:-1])


def paired_ratio(pairs: list[tuple[list[np.ndarray], list[np.ndarray]]], confidence: float = 0.95,
                 resamples: int = DEFAULT_RESAMPLES, seed: int = 0, strata: bool = False) -> RatioEstimate:
    """The Hodges-Lehmann estimate over pairs of log(median(current)/median(baseline)), for runs
    measured in alternation (``hodges_lehmann``), as a ratio.

    ``pairs`` holds (current launches, baseline launches) of runs measured next to each other, so
    that a change of the machine's speed between pairs cancels. The interval draws pairs with
    replacement and, within each drawn pair, its own two-level bootstrap ratio.

    ``strata``: the pairs are fixed by the design (the arms of a same-job run, measured cell by
    cell in turns in each launch): every pair is kept in every resample (a stratified bootstrap),
    so the interval reflects the noise within the pairs, not which pairs happened to be drawn.
    """
    rng = np.random.default_rng(seed)
    per_pair = np.log(np.array([bootstrap_medians(current, resamples, rng) / bootstrap_medians(baseline, resamples,
                                                                                                    rng)
                                for current, baseline in pairs]))
    point = np.log([float(np.median(np.concatenate(c)) / np.median(np.concatenate(b))) for c, b in pairs])
    if strata:
        logs = hodges_lehmann(per_pair.T)
    else:
        chosen = rng.integers(0, len(pairs), size=(resamples, len(pairs)))
        logs = hodges_lehmann(per_pair[chosen, np.arange(resamples)[:, None]])
    tail = (1.0 - confidence) / 2.0 * 100.0
    low, high = np.exp(np.percentile(logs, [tail, 100.0 - tail]))
    current_us = float(np.median(np.concatenate([a for c, _ in pairs for a in c])))
    baseline_us = float(np.median(np.concatenate([a for _, b in pairs for a in b])))
    return RatioEstimate(
        ratio=float(np.exp(hodges_lehmann(point))), low=float(low), high=float(high), current_us=current_us,
        baseline_us=baseline_us, n_current=int(sum(len(a) for c, _ in pairs for a in c)),
        n_baseline=int(sum(len(a) for _, b in pairs for a in b)),
        launches_current=sum(len(c) for c, _ in pairs), launches_baseline=sum(len(b) for _, b in pairs),
    )


def turn_ratio(launches: list[tuple[np.ndarray, np.ndarray]], confidence: float = 0.95,
               resamples: int = DEFAULT_RESAMPLES, seed: int = 0) -> RatioEstimate | None:
    """Two arms timed in turns in the same launches (``timing.turns: iteration``): the median of
    the ratios of blocks of two turns, with a two-level bootstrap interval (launches, then blocks).

    ``launches`` holds (current, baseline) per launch, aligned: element i of both was timed in the
    same turn, one right after the other. Turns are taken in blocks of two (the arms go ABBA, so a
    block has each arm once first and once second), and a block's ratio is the sum of its current
    times over the sum of its baseline times. Whatever slowed the machine during a block slowed both
    arms, so it cancels in the ratio instead of widening the interval, as it does when the medians
    of the two arms are compared. None when no launch has a whole block.
    """
    logs = []
    for current, baseline in launches:
        blocks = min(len(current), len(baseline)) // 2
        if blocks:
            cur = current[0:2 * blocks:2] + current[1:2 * blocks:2]
            base = baseline[0:2 * blocks:2] + baseline[1:2 * blocks:2]
            with np.errstate(divide="ignore", invalid="ignore"):
                ratios = np.log(cur / base)
            if np.isfinite(ratios).any():
                logs.append(ratios[np.isfinite(ratios)])
    if not logs:
        return None
    rng = np.random.default_rng(seed)
    tail = (1.0 - confidence) / 2.0 * 100.0
    low, high = np.exp(np.percentile(bootstrap_medians(logs, resamples, rng), [tail, 100.0 - tail]))
    return RatioEstimate(
        ratio=float(np.exp(np.median(np.concatenate(logs)))), low=float(low), high=float(high),
        current_us=float(np.median(np.concatenate([c for c, _ in launches]))),
        baseline_us=float(np.median(np.concatenate([b for _, b in launches]))),
        n_current=int(sum(len(c) for c, _ in launches)), n_baseline=int(sum(len(b) for _, b in launches)),
        launches_current=len(launches), launches_baseline=len(launches),
    )
