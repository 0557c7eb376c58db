"""A uniform shift of every cell, judged as one finding: the candidate of a paired comparison (arms,
or runs measured in alternation) slower or faster across the board.

A new MPI library version, another build of the project or a changed MPI setting moves most cells
the same way. Judged cell by cell, a 1.2x shift can pass: each cell's interval from a few launch
pairs is too wide for a 10% threshold. Judged together it is plain: in every pair, the median over
the cells of their ratios; then the Hodges-Lehmann estimate over the pairs, with Wilcoxon's signed-rank
interval (bench/results/stats.py). The pairs alternate (ABBA), so the machine's own drift cancels in it
instead of posing as a shift; what is left is the candidate's. The machine-speed probe's ratio is
reported beside it (bench/judge/probe_scale.py): a probe that moved as much points at the MPI library
or the machine, not the code.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from bench.judge.samples import Groups
from bench.results.stats import hodges_lehmann, min_pairs, signed_rank_interval

#: the fewest cells a shift is judged on (and pairs: bench.results.stats.min_pairs)
MIN_CELLS = 8
#: a pair counts when it measured this share of the cells of the fullest pair
FULL_PAIR = 0.9


@dataclass(frozen=True)
class Shift:
    """Over pairs, the pair's median cell ratio (current / baseline), with its interval."""

    ratio: float
    low: float
    high: float
    pairs: int
    cells: int
    #: share of the cells whose own ratio is on the same side of 1 as ``ratio``
    same_way: float

    def verdict(self, threshold: float) -> str:
        """regressed | improved | "" (inside the threshold, or undecided)."""
        if self.low > 1.0 + threshold:
            return "regressed"
        if self.high < 1.0 / (1.0 + threshold):
            return "improved"
        return ""

    def text(self, probe_ratio: float | None) -> str:
        how = "slower" if self.ratio > 1 else "faster"
        probe = "no probe" if probe_ratio is None else f"the probe x{probe_ratio:.2f}"
        return (f"the candidate is x{self.ratio:.2f} {how} across the board ({self.low:.2f}-{self.high:.2f} over "
                f"{self.pairs} pairs; {self.same_way:.0%} of {self.cells} cells the same way; {probe})")


def uniform_shift(current: Groups, baseline: Groups, pairing: list[tuple[str, str]], keys: list[tuple],
                  confidence: float) -> Shift | None:
    """The shift of ``keys``' cells over the (current run, baseline run) pairs; None with fewer than
    min_pairs(confidence) pairs or MIN_CELLS cells."""
    logs = np.full((len(pairing), len(keys)), np.nan)
    for column, key in enumerate(keys):
        cur, base = current.get(key, {}), baseline.get(key, {})
        for row, (current_run, baseline_run) in enumerate(pairing):
            if current_run in cur and baseline_run in base:
                a = np.median(np.concatenate(list(cur[current_run].values())))
                b = np.median(np.concatenate(list(base[baseline_run].values())))
                if a > 0 and b > 0:
                    logs[row, column] = np.log(a / b)
    # a pair counts where it measured (nearly) every cell the fullest pair did: ab's later rounds
    # measure only the cells not decided yet, chosen for their ratios, not a sample of the run
    measured = np.isfinite(logs).sum(axis=1)
    pairs = np.flatnonzero((measured >= MIN_CELLS) & (measured >= FULL_PAIR * measured.max()))
    cells = np.flatnonzero(np.isfinite(logs[pairs]).any(axis=0))
    if len(pairs) < min_pairs(confidence) or len(cells) < MIN_CELLS:
        return None
    per_pair = np.nanmedian(logs[pairs][:, cells], axis=1)
    point = float(hodges_lehmann(per_pair))
    low, high = signed_rank_interval(per_pair, confidence)
    per_cell = np.nanmedian(logs[:, cells], axis=0)
    same_way = float(np.mean(np.sign(per_cell) == np.sign(point))) if point else 0.0
    return Shift(float(np.exp(point)), float(np.exp(low)), float(np.exp(high)), len(pairs), len(cells), same_way)
