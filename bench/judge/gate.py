"""The regression gate: judge every cell of CURRENT against a (pooled) BASELINE on its samples.

Per cell (``bench.plan.cells.MATCH_KEY``: collective, implementation, algorithm and phases, device,
ranks, nodes and whether they were virtual, dtype, op, placement, buffers, count, timing mode; repeats and
runs pooled):

* failed     the current cell returned wrong data, failed, timed out or stopped running
* missing    in the baseline, not in the current run
* new        in the current run only (or the baseline's cell had failed)
* insufficient  fewer than ``min_samples`` timed iterations on a side: not judged
* regressed  the interval of median(current)/median(baseline) lies above 1 + threshold
* improved   the interval lies below 1 / (1 + threshold)
* undecided  (only when asked to decide, as ``pccl-bench ab`` does) the interval still holds 1 + threshold
* unchanged  otherwise

The gate fails on regressed, failed, missing, insufficient and undecided cells that the allow-list
does not name: a cell that was never judged is not a pass (``allow_insufficient`` / ``allow_missing``
/ ``allow_undecided`` opt out). Paired comparisons are also judged as a whole (bench/judge/shift.py):
a candidate slower across the board beyond the threshold fails the gate however wide each cell's
interval is.
It never averages over sizes: the summary counts verdicts and says how many cells were judged.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from bench.errors import BadInput
from bench.judge import probe_scale
from bench.judge.allowlist import AllowEntry, apply_allowlist
from bench.judge.arms import paired_runs
from bench.judge.probe_scale import good_rows
from bench.judge.samples import launches_of, sample_groups
from bench.judge.shift import Shift, uniform_shift
from bench.plan.cells import CELL_KEY, KEY_DEFAULTS, MATCH_KEY
from bench.results.labels import cell_label
from bench.results.runset import RunSet
from bench.results.stats import DEFAULT_RESAMPLES, RatioEstimate, median_ratio, min_pairs, paired_ratio, turn_ratio

VERDICTS = ("regressed", "failed", "missing", "insufficient", "undecided", "new", "improved", "unchanged")
#: verdicts that fail the gate unless allowed (insufficient, missing, undecided unless the options opt out)
FAILING = ("regressed", "failed", "missing", "insufficient", "undecided")
#: verdicts that carry a judgement of the timings
JUDGED = ("regressed", "improved", "unchanged")
#: statuses that mean the cell did not produce a trustworthy timing
BAD_STATUSES = ("wrong", "failed", "timeout")
NOT_RUN = ("unsupported", "skipped")
#: cell-key columns that hold counts (the others hold text)
INT_KEYS = ("nranks", "nnodes", "ranks_per_node", "count_per_rank")
#: default thresholds, calibrated with scripts/evaluate_gate.py (docs/GATE-EVALUATION.md)
THRESHOLD = 0.10
SMALL_THRESHOLD = 0.15
#: same-job arms (gate --arms, pccl-bench ab) are measured together, so the run-to-run drift of
#: latency-bound cells that SMALL_THRESHOLD allows for is not in their ratios
SAME_JOB_SMALL_THRESHOLD = 0.10
SMALL_BELOW_BYTES = 64 << 10
MIN_SAMPLES = 20
CONFIDENCE = 0.95
#: common_shift() speaks when at least this many cells were judged and this share moved together
COMMON_SHIFT_CELLS = 8
COMMON_SHIFT_SHARE = 0.8


@dataclass
class GateOptions:
    #: relative slowdown that counts as a regression at bytes_total >= small_below_bytes
    threshold: float = THRESHOLD
    #: the same below small_below_bytes (small messages are noisier)
    small_threshold: float = SMALL_THRESHOLD
    small_below_bytes: int = SMALL_BELOW_BYTES
    confidence: float = CONFIDENCE
    min_samples: int = MIN_SAMPLES
    resamples: int = DEFAULT_RESAMPLES
    seed: int = 0
    #: baseline and current runs were measured in alternation: judge each cell pair by pair
    paired: bool = False
    #: gate only these (empty: all)
    impls: list[str] = field(default_factory=list)
    collectives: list[str] = field(default_factory=list)
    nranks: list[int] = field(default_factory=list)
    min_bytes: int = 0
    max_bytes: int | None = None
    #: known regressions (bench.judge.allowlist entries)
    allow: list[AllowEntry] = field(default_factory=list)
    #: cells without enough samples / absent from the current run do not fail the gate
    allow_insufficient: bool = False
    allow_missing: bool = False
    #: a cell whose interval still holds 1 + threshold is ``undecided`` rather than ``unchanged``
    #: (``pccl-bench ab`` measures such cells again until they are decided or its budget is spent)
    decide: bool = False
    allow_undecided: bool = False
    #: "probe": judge every cell relative to the machine-speed probe measured beside it
    normalise: str = ""
    #: paired: the pairs are fixed strata (same-job arms in one launch), not drawn with replacement
    pair_strata: bool = False
    #: same-job arms timed in turns in the same launches (turns: iteration) are judged turn by turn
    #: (bench.results.stats.turn_ratio); False: by their launches' medians, like any other pair
    turn_pairs: bool = True

    def failing(self) -> tuple[str, ...]:
        """The verdicts that fail the gate under these options."""
        allowed = {"insufficient": self.allow_insufficient, "missing": self.allow_missing,
                   "undecided": self.allow_undecided}
        return tuple(name for name in FAILING if not allowed.get(name))

    def threshold_for(self, bytes_total: int) -> float:
        return self.small_threshold if bytes_total < self.small_below_bytes else self.threshold


@dataclass
class CellVerdict:
    key: tuple
    label: str
    row: dict
    verdict: str
    estimate: RatioEstimate | None = None
    threshold: float = 0.0
    reason: str = ""
    allowed: str = ""  # the allow-list's reason, when it names this cell
    #: judged on the ratios of its turns (two arms timed in turns in the same launches)
    by_turns: bool = False
    #: the verdicts that fail the gate (GateOptions.failing())
    failing: tuple[str, ...] = FAILING

    @property
    def fails(self) -> bool:
        return self.verdict in self.failing and not self.allowed


@dataclass
class GateResult:
    cells: list[CellVerdict]
    options: GateOptions
    baseline_runs: list[str]
    current_runs: list[str]
    #: median over cells of the probe's current/baseline ratio (None: no probe on a side)
    probe_ratio: float | None = None
    #: paired comparisons: every cell's shift together (None: not paired, or too few pairs or cells)
    shift: Shift | None = None

    def shift_verdict(self) -> str:
        """regressed | improved | "": the candidate across the board (bench/judge/shift.py)."""
        return self.shift.verdict(self.options.threshold) if self.shift else ""

    def machine_verdict(self) -> str:
        """One verdict for the whole machine: "" unless the probe moved beyond the threshold."""
        ratio = self.probe_ratio
        if ratio is None or abs(np.log(ratio)) < np.log1p(self.options.threshold):
            return ""
        how = "slower" if ratio > 1 else "faster"
        judged = ("cells are judged relative to the probe" if self.options.normalise == "probe" else
                  "cells are judged on raw times: pass --normalise probe to judge them relative to it")
        return f"the whole machine was {max(ratio, 1 / ratio):.2f}x {how} than in the baseline (probe); {judged}"

    @property
    def passed(self) -> bool:
        return not any(cell.fails for cell in self.cells) and self.shift_verdict() != "regressed"

    def common_shift(self) -> str:
        """A warning when most judged cells moved together: the machine changed speed, or a layer
        that every cell uses (the MPI library, the compiler) did. "" otherwise."""
        ratios = np.array([cell.estimate.ratio for cell in self.cells if cell.estimate])
        if self.shift is not None or len(ratios) < COMMON_SHIFT_CELLS:  # a paired shift is judged instead
            return ""
        median = float(np.exp(np.median(np.log(ratios))))
        same_way = float(np.mean(ratios > 1.0) if median > 1.0 else np.mean(ratios < 1.0))
        if abs(np.log(median)) < np.log1p(self.options.threshold / 2) or same_way < COMMON_SHIFT_SHARE:
            return ""
        return (f"{same_way:.0%} of the judged cells moved the same way (median ratio {median:.2f}): the machine "
                "was busier or quieter, or a layer every cell uses changed; re-run on a quiet machine "
                "before trusting single verdicts")

    @property
    def judged(self) -> int:
        """Cells whose timings got a verdict (regressed, improved or unchanged)."""
        return sum(cell.verdict in JUDGED for cell in self.cells)

    def unjudged_text(self) -> str:
        """Why cells were not judged: "3 insufficient (fewer than 20 samples on a side), 1 missing"."""
        counts = self.counts()
        parts = []
        if counts["insufficient"]:
            parts.append(f"{counts['insufficient']} insufficient (fewer than {self.options.min_samples} samples "
                         "on a side" + ("" if not self.options.allow_insufficient else ", allowed") + ")")
        if counts["missing"]:
            parts.append(f"{counts['missing']} missing (not in the current run"
                         + ("" if not self.options.allow_missing else ", allowed") + ")")
        for name, why in (("undecided", "the interval still holds the threshold"
                                        + (", allowed" if self.options.allow_undecided else "")),
                          ("failed", "failed, wrong or timed out"), ("new", "not in the baseline")):
            if counts[name]:
                parts.append(f"{counts[name]} {name} ({why})")
        return ", ".join(parts)

    def counts(self) -> dict[str, int]:
        found = {name: 0 for name in VERDICTS}
        for cell in self.cells:
            found[cell.verdict] += 1
        return found


def _select(frame: pd.DataFrame, options: GateOptions) -> pd.DataFrame:
    keep = ~frame["status"].eq("modelled")
    if options.impls:
        keep &= frame["impl"].isin(options.impls)
    if options.collectives:
        keep &= frame["collective"].isin(options.collectives)
    if options.nranks:
        keep &= frame["nranks"].isin(options.nranks)
    keep &= frame["bytes_total"] >= options.min_bytes
    if options.max_bytes is not None:
        keep &= frame["bytes_total"] <= options.max_bytes
    return frame[keep]


def _nodes_kind(value) -> str:
    """virtual_nodes as a key: "virtual", "real", or "" where the table does not say."""
    if value is None or value is pd.NA or (isinstance(value, float) and value != value) or value == "":
        return ""
    return "virtual" if bool(value) else "real"


def _keyed(frame: pd.DataFrame) -> pd.DataFrame:
    """Key columns normalised: text with "" for missing, counts as int64 (concatenating an empty
    table can leave them as objects)."""
    frame = frame.copy()
    nodes = frame["virtual_nodes"] if "virtual_nodes" in frame.columns else pd.Series("", index=frame.index)
    frame["virtual_nodes"] = nodes.astype(object).map(_nodes_kind).astype(str)
    for name in CELL_KEY:
        if name in INT_KEYS:
            # an imported table may not say (nnodes of an nccl-tests log without host names): -1, unknown
            frame[name] = pd.to_numeric(frame[name]).fillna(-1).astype("int64") if len(frame) else frame[name]
        else:
            default = KEY_DEFAULTS.get(name, "")
            frame[name] = frame[name].fillna(default).astype(str) if name in frame.columns else default
    return frame


def _turn_launches(current_rows: pd.DataFrame, baseline_rows: pd.DataFrame, current: dict,
                   baseline: dict) -> list[tuple[np.ndarray, np.ndarray]] | None:
    """(current, baseline) times per launch, aligned turn by turn, when both sides are two arms of
    one cell timed in turns in the same launches; else None."""
    if "turns" not in current_rows or "turns" not in baseline_rows:
        return None
    if not (current_rows["turns"].eq("iteration").all() and baseline_rows["turns"].eq("iteration").all()):
        return None
    if set(current) != set(baseline) or any(set(current[run]) != set(baseline[run]) for run in current):
        return None
    pairs = [(current[run][launch], baseline[run][launch]) for run in current for launch in current[run]]
    if not pairs or any(len(cur) != len(base) for cur, base in pairs):
        return None
    return pairs


def _status_reason(rows: pd.DataFrame) -> str:
    """Why the rows of one cell are not trustworthy ("" when they are)."""
    bad = rows[rows["status"].isin(BAD_STATUSES) | (rows["n_wrong"].fillna(0) > 0)]
    if bad.empty:
        return ""
    row = bad.iloc[0]
    error = str(row.get("error") or "").strip()
    # an imported row may not know how many elements were wrong (n_wrong empty: the tool printed a
    # magnitude); its error text says why it is wrong
    wrong = 0 if pd.isna(row.get("n_wrong")) else int(row.get("n_wrong") or 0)
    detail = f"{wrong} wrong elements" if wrong else error[:160]
    return f"{row['status']}" + (f": {detail}" if detail else "")


def _estimate(current: dict, baseline: dict, pairing: list[tuple[str, str]] | None,
              options: GateOptions, turns: list[tuple[np.ndarray, np.ndarray]] | None = None) -> RatioEstimate | None:
    """Turn by turn (arms timed in turns), pooled, or, with a pairing of run ids, paired ratio;
    None when a pair has no samples."""
    if turns is not None:
        return turn_ratio(turns, options.confidence, options.resamples, options.seed)
    if pairing is None:
        return median_ratio(launches_of(current), launches_of(baseline), options.confidence, options.resamples,
                            options.seed)
    # a pair that measured the cell on one side only is broken (insufficient); one that measured it on
    # neither did not ask for it (ab's later rounds measure the cells not decided yet)
    asked = [(c, b) for c, b in pairing if c in current or b in baseline]
    pairs = [(list(current[c].values()), list(baseline[b].values())) for c, b in asked
             if c in current and b in baseline]
    if not pairs or len(pairs) < len(asked):
        return None
    return paired_ratio(pairs, options.confidence, options.resamples, options.seed, options.pair_strata)


def _too_few_pairs(current: dict, baseline: dict, pairing: list | None, options: GateOptions) -> str:
    """Why the pairs cannot bound the cell's ratio at the confidence asked ("" when they can)."""
    if pairing is None or options.pair_strata:
        return ""
    count = sum(1 for c, b in pairing if c in current and b in baseline)
    needed = min_pairs(options.confidence)
    return f"{count} pairs cannot bound it at {options.confidence:.0%} (>= {needed} needed)" if count < needed else ""


def _judge_pair(cell: CellVerdict, current: dict, baseline: dict, pairing: list | None,
                options: GateOptions, turns: list | None = None) -> None:
    n_current = sum(map(len, launches_of(current)))
    n_baseline = sum(map(len, launches_of(baseline)))
    few = "" if turns is not None else _too_few_pairs(current, baseline, pairing, options)
    if few and min(n_current, n_baseline) >= options.min_samples:
        # more pairs will decide it: ab measures them; a plain gate cannot judge it
        cell.verdict, cell.reason = ("undecided" if options.decide else "insufficient"), few
        return
    estimate = _estimate(current, baseline, pairing, options, turns) \
        if min(n_current, n_baseline) >= options.min_samples else None
    if estimate is None:
        cell.verdict = "insufficient"
        cell.reason = f"{n_current} current / {n_baseline} baseline samples (>= {options.min_samples}" + \
            (", every pair" if pairing else "") + " needed)"
        return
    if not all(np.isfinite([estimate.ratio, estimate.low, estimate.high])) or min(
            estimate.current_us, estimate.baseline_us) <= 0:
        # never a pass by accident: a comparison with NaN is false whichever way it is asked
        cell.verdict = "insufficient"
        cell.reason = (f"no finite ratio from the samples (median {estimate.current_us:g} us current, "
                       f"{estimate.baseline_us:g} us baseline)")
        return
    cell.estimate = estimate
    limit = 1.0 + cell.threshold
    if estimate.low > limit:
        cell.verdict, cell.reason = "regressed", f"interval above {limit:.2f}"
    elif estimate.high < 1.0 / limit:
        cell.verdict, cell.reason = "improved", f"interval below {1.0 / limit:.2f}"
    elif options.decide and estimate.high >= limit:
        cell.verdict, cell.reason = "undecided", f"interval holds {limit:.2f}"
    else:
        cell.verdict = "unchanged"


def _judge(key: tuple, current: pd.DataFrame, baseline: pd.DataFrame, groups: tuple[dict, dict],
           pairing: list | None, options: GateOptions) -> CellVerdict | None:
    source = current if len(current) else baseline
    row = source.iloc[0].to_dict()
    cell = CellVerdict(key, cell_label(source.iloc[0]), row, "unchanged",
                       threshold=options.threshold_for(int(row["bytes_total"])))
    if current.empty:
        cell.verdict, cell.reason = "missing", "not in the current run"
        return None if baseline["status"].isin(NOT_RUN).all() else cell
    if reason := _status_reason(current):
        cell.verdict, cell.reason = "failed", reason
    elif current["status"].isin(NOT_RUN).all():
        if baseline.empty or baseline["status"].isin(NOT_RUN).all():
            return None  # run in neither: nothing to judge
        cell.verdict, cell.reason = "failed", f"{current['status'].iloc[0]} now; the baseline ran it"
    elif good_rows(baseline).empty:
        cell.verdict = "new"
        cell.reason = "not in the baseline" if baseline.empty else "the baseline has no good measurement"
    else:
        current_runs, baseline_runs = groups[0].get(key, {}), groups[1].get(key, {})
        turns = _turn_launches(current, baseline, current_runs, baseline_runs) if options.turn_pairs else None
        _judge_pair(cell, current_runs, baseline_runs, pairing, options, turns)
        if turns is not None and cell.estimate is not None:
            cell.by_turns = True
            cell.reason = ", ".join(filter(None, [cell.reason, "judged turn by turn"]))
    return cell


def gate(baseline: RunSet, current: RunSet, options: GateOptions) -> GateResult:
    """A verdict for every cell of either side, after the selection options."""
    chosen = _select(baseline.results, options), _select(current.results, options)
    if baseline.run_ids != current.run_ids:
        _refuse_unknown_ranks(chosen, (baseline, current))
    base, cur = _keyed(chosen[0]), _keyed(chosen[1])
    if base.empty or cur.empty:
        side = "baseline" if base.empty else "current run"
        raise BadInput("gate", f"the {side} has no cells after the selection options")
    base_groups = base.groupby(list(MATCH_KEY), sort=False)
    cur_groups = cur.groupby(list(MATCH_KEY), sort=False)
    base_keys, cur_keys = set(base_groups.groups), set(cur_groups.groups)
    if not base_keys & cur_keys:
        raise BadInput("gate", "the baseline and the current run have no cell in common "
                               f"({_why_nothing_matches(base, cur)})")
    probe_ratio = probe_scale.probe_ratio(cur, base)
    scales: tuple[dict | None, dict | None] = (None, None)
    if options.normalise == "probe":
        if probe_ratio is None:
            raise BadInput("--normalise", "probe: a side has no probe_us column (measure with timing.probe: true)")
        scales = (probe_scale.probe_scales(cur, base), probe_scale.probe_scales(base, base))
    groups = (sample_groups(current.samples, cur, scales[0]), sample_groups(baseline.samples, base, scales[1]))
    pairing = paired_runs(baseline, current) if options.paired else None
    empty = cur.iloc[0:0]
    cells = []
    for key in sorted(base_keys | cur_keys, key=_sort_key):
        verdict = _judge(key, cur_groups.get_group(key) if key in cur_keys else empty,
                         base_groups.get_group(key) if key in base_keys else empty, groups, pairing, options)
        if verdict is not None:
            cells.append(verdict)
    for verdict in cells:
        verdict.failing = options.failing()
    apply_allowlist(cells, options.allow)
    measured = [cell.key for cell in cells if cell.verdict not in ("failed", "missing", "new")]
    shift = uniform_shift(groups[0], groups[1], pairing, measured, options.confidence) if pairing else None
    return GateResult(cells, options, baseline.run_ids, current.run_ids, probe_ratio, shift)


def _refuse_unknown_ranks(frames: tuple[pd.DataFrame, pd.DataFrame], sides: tuple[RunSet, RunSet]) -> None:
    """Cells without a rank count (an imported log that did not say it) match only themselves: a
    gate of one such run against itself works, one across runs would compare cells of any rank count."""
    for name, frame, side in zip(("baseline", "current run"), frames, sides, strict=True):
        unknown = pd.to_numeric(frame["nranks"], errors="coerce").isna()
        if unknown.any():
            where = ", ".join(side.sources[:2]) or name
            raise BadInput(where, f"{int(unknown.sum())} cells of the {name} have no rank count (nranks empty: the "
                                  "imported log did not say it), so they cannot be matched with another run's: "
                                  "import it again with --nranks N (or gate it against itself)")


def _why_nothing_matches(base: pd.DataFrame, cur: pd.DataFrame) -> str:
    """The likely reason two sides share no cell: nodes of another kind, or another suite."""
    shapes = [set(side[list(CELL_KEY)].itertuples(index=False, name=None)) for side in (base, cur)]
    if shapes[0] & shapes[1]:
        kinds = [", ".join(sorted(set(side["virtual_nodes"]) - {""})) or "unsaid" for side in (base, cur)]
        return (f"the same cells on other nodes: the baseline's are {kinds[0]}, the current run's {kinds[1]} "
                "(virtual_nodes); a run on namespace nodes is not judged against real ones")
    return "another suite, rank count or size range?"


def _sort_key(key: tuple) -> tuple:
    return tuple((0, value, "") if isinstance(value, int | np.integer) else (1, 0, str(value)) for value in key)


