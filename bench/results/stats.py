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
from functools import lru_cache
from statistics import NormalDist

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


#: pairs beyond which the signed-rank distribution is taken as normal (exact below: O(n^3) work)
EXACT_SIGNED_RANK = 120


@lru_cache(maxsize=256)
def _signed_rank_cdf(count: int) -> np.ndarray:
    """P(T <= t), t = 0 .. n(n+1)/2, of Wilcoxon's signed-rank statistic over ``count`` pairs under
    symmetry about 0 (each rank's sign a fair coin), built one rank at a time."""
    top = count * (count + 1) // 2
    probability = np.zeros(top + 1)
    probability[0] = 1.0
    for rank in range(1, count + 1):
        shifted = np.zeros_like(probability)
        shifted[rank:] = probability[:-rank]
        probability = (probability + shifted) / 2.0
    return np.cumsum(probability)


def _outer_ranks(count: int, confidence: float) -> int:
    """k: the k-th smallest and k-th largest Walsh averages bound the Hodges-Lehmann estimate at
    ``confidence`` (two-sided); 0 when ``count`` values cannot (fewer than min_pairs)."""
    tail = (1.0 - confidence) / 2.0
    if count > EXACT_SIGNED_RANK:
        mean = count * (count + 1) / 4.0
        sd = np.sqrt(count * (count + 1) * (2 * count + 1) / 24.0)
        return max(0, int(np.floor(mean - NormalDist().inv_cdf(1.0 - tail) * sd)))
    return int(np.searchsorted(_signed_rank_cdf(count), tail * (1.0 + 1e-12), side="right"))


def min_pairs(confidence: float) -> int:
    """The fewest pairs whose signed-rank interval exists at ``confidence`` (6 at 95%: the widest
    one, from the smallest to the largest pair, covers 1 - 2/2^n)."""
    count = 1
    while _outer_ranks(count, confidence) == 0:
        count += 1
    return count


def signed_rank_interval(values: np.ndarray, confidence: float = 0.95) -> tuple[float, float] | None:
    """The distribution-free interval of the Hodges-Lehmann estimate (Wilcoxon's signed-rank
    interval: order statistics of the Walsh averages), exact for n <= EXACT_SIGNED_RANK; None when
    there are too few values to bound it at ``confidence``."""
    values = np.sort(np.asarray(values, dtype=np.float64))
    outer = _outer_ranks(len(values), confidence)
    if outer == 0:
        return None
    first, second = np.triu_indices(len(values))
    walsh = np.sort((values[first] + values[second]) / 2.0)
    return float(walsh[outer - 1]), float(walsh[len(walsh) - outer])


def paired_ratio(pairs: list[tuple[list[np.ndarray], list[np.ndarray]]], confidence: float = 0.95,
                 resamples: int = DEFAULT_RESAMPLES, seed: int = 0, strata: bool = False) -> RatioEstimate | None:
    """For runs measured in alternation: the Hodges-Lehmann estimate over the pairs of
    log(median(current) / median(baseline)), as a ratio, with Wilcoxon's signed-rank interval.

    ``pairs`` holds (current launches, baseline launches) of runs measured next to each other, so
    that a change of the machine's speed between pairs cancels. Each pair's ratio carries its own
    sampling noise, so the spread of the pairs is the whole noise of the design; the interval is
    distribution-free (the pairs' log ratios symmetric about the true one, as ABBA order makes them).
    A percentile bootstrap over so few pairs covers far less than it claims (from 4 pairs its 95%
    interval is their range, which covers the median 87.5% of the time); with fewer than
    ``min_pairs(confidence)`` pairs there is no interval: None.

    ``strata``: the pairs are fixed by the design (the arms of a same-job run, measured cell by
    cell in turns in each launch): every pair is kept in every resample of a two-level bootstrap
    within the pairs (the median over pairs), so the interval reflects the noise within the pairs.
    """
    point = np.log([float(np.median(np.concatenate(c)) / np.median(np.concatenate(b))) for c, b in pairs])
    if strata:
        rng = np.random.default_rng(seed)
        per_pair = np.array([bootstrap_medians(current, resamples, rng) / bootstrap_medians(baseline, resamples,
                                                                                                rng)
                             for current, baseline in pairs])
        tail = (1.0 - confidence) / 2.0 * 100.0
        low, high = np.percentile(np.median(per_pair, axis=0), [tail, 100.0 - tail])
        ratio = float(np.exp(np.median(point)))
    else:
        interval = signed_rank_interval(point, confidence)
        if interval is None:
            return None
        low, high = np.exp(interval)
        ratio = float(np.exp(hodges_lehmann(point)))
    current_us = float(np.median(np.concatenate([a for c, _ in pairs for a in c])))
    baseline_us = float(np.median(np.concatenate([a for _, b in pairs for a in b])))
    return RatioEstimate(
        ratio=ratio, low=float(low), high=float(high), current_us=current_us,
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
