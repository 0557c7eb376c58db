"""``pccl-bench ab``'s measurement loop: a suite's arms measured, gated pair by pair, and the cells
not yet decided measured again, round after round, until every cell is decided or the time budget is
spent (docs/GATE-EVALUATION.md, "Arms in launches of their own").

Arms that share a launch are timed in turns and decide most cells in the first run. Arms in launches
of their own (another MPI setting, another install) give one pair per launch repeat, and a few pairs
leave latency-bound cells' intervals wider than a 10% threshold: each further round adds launch
pairs (ABBA) of only the undecided cells, which makes them short. A cell is decided when its interval
lies above 1 + threshold (regressed: confirmed by ``confirm`` more rounds in which it stays so) or
below it (unchanged or improved); what the budget leaves undecided is reported as ``undecided``, never
as a pass. Each cell's verdict is the one it had when it was decided (later rounds measure other cells).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np
from rich.console import Console

from bench.errors import EXIT_CELLS_FAILED, EXIT_CHECK_FAILED, EXIT_OK
from bench.judge.arms import split_arms
from bench.judge.gate import CellVerdict, GateOptions, GateResult, gate
from bench.results.runset import RunSet, pool
from bench.sweep import jobs
from bench.sweep.options import SweepOptions

#: the columns of a cell that its re-measurement selects; the implementation fields only where no arm
#: sets them (an arm's impl is not the suite entry's that ``select:`` matches)
SELECT_COLUMNS = ("collective", "nranks", "ranks_per_node", "dtype", "op", "placement", "buffers", "count_per_rank")
IMPL_COLUMNS = ("impl", "algorithm", "intra", "inter")


@dataclass(frozen=True)
class Question:
    """One comparison the loop decides: ``candidate`` against ``baseline``. ``scale`` multiplies the
    candidate's samples (1.0 but for scripts/evaluate_gate.py's what-if of a x1.25 candidate)."""

    baseline: str
    candidate: str
    scale: float = 1.0


@dataclass
class Round:
    run: Path
    cells: int
    pairs: int
    seconds: float


@dataclass
class Outcome:
    results: dict[Question, GateResult]
    rounds: list[Round] = field(default_factory=list)
    seconds: float = 0.0
    #: cells were left undecided (or unconfirmed) because the next round would not fit the budget
    budget_spent: bool = False

    def summary(self) -> str:
        pairs = sum(r.pairs for r in self.rounds)
        spent = "; the budget was spent" if self.budget_spent else ""
        return (f"{len(self.rounds)} round{'s' * (len(self.rounds) != 1)}, {pairs} launch repeats, "
                f"{self.seconds:.0f} s{spent}")


def _scaled(runs: RunSet, factor: float) -> RunSet:
    return replace(runs, samples=runs.samples.assign(time_us=runs.samples["time_us"] * factor)) if factor != 1 \
        else runs


def judge(runs: RunSet, question: Question, options: GateOptions) -> GateResult:
    """One question on the runs so far: pair by pair where there are pairs, every cell decided or not."""
    baseline, current, paired = split_arms(runs, question.baseline, question.candidate)
    return gate(baseline, _scaled(current, question.scale), replace(options, paired=paired, decide=True))


def _plain(value: object) -> int | str:
    """A table value as YAML writes it (numpy integers as int)."""
    return int(value) if isinstance(value, int | np.integer) else str(value)


def round_suite(raw: dict, cells: list[CellVerdict], arms: list[str], pairs: int) -> dict:
    """The suite restricted to ``cells`` and ``arms``, ``pairs`` launch repeats."""
    wanted = sorted(_wanted(raw, cells))
    select = [{**before, **dict(entry)} for before in (raw.get("select") or [{}]) for entry in wanted]
    kept = [arm for arm in raw.get("arms") or [] if arm.get("name") in arms]
    return {**raw, "select": select, "arms": kept, "repeats": pairs}


def _measure(document: dict, label: str, out: Path, console: Console, installs: dict[str, dict]) -> RunSet:
    """One round: a sweep of ``document`` into ``out``, its tables taken as the sweep built them."""
    options = SweepOptions(Path(label), out=out, suite_document=document, suite_where=label, summary=False,
                           known_installs=installs)
    code, tables = jobs.run_with_tables(options, console)
    if code not in (EXIT_OK, EXIT_CHECK_FAILED, EXIT_CELLS_FAILED):
        raise SystemExit(code)  # interrupted (130): ab ends as its sweep did
    return RunSet(tables.results, tables.samples, [tables.meta], [str(out)])


#: an undecided cell whose interval lies within this factor of 1 + threshold on both sides stays
#: undecided: its ratio is the threshold, and rounds spent on it would be taken from the others
#: (the indifference zone of a sequential test)
AT_THRESHOLD = 1.03


def at_threshold(cell: CellVerdict) -> bool:
    limit = 1.0 + cell.threshold
    estimate = cell.estimate
    return estimate is not None and limit / AT_THRESHOLD <= estimate.low and estimate.high <= limit * AT_THRESHOLD


def _add_reason(cell: CellVerdict, text: str) -> None:
    cell.reason = "; ".join(filter(None, [cell.reason, text]))


class _Decisions:
    """Per question, the verdict each cell had when it was decided; regressed cells decided only after
    ``confirm`` more rounds in which they stay regressed."""

    def __init__(self, questions: list[Question], confirm: int) -> None:
        self.final: dict[Question, dict[tuple, CellVerdict]] = {q: {} for q in questions}
        self.regressed_at: dict[tuple[Question, tuple], int] = {}
        self.confirm = confirm

    def take(self, question: Question, result: GateResult, look: int) -> list[CellVerdict]:
        """Record what ``result`` decides; the cells still open."""
        open_cells = []
        for cell in result.cells:
            if cell.key in self.final[question]:
                continue
            if cell.verdict == "undecided":
                self.regressed_at.pop((question, cell.key), None)
                if at_threshold(cell):
                    _add_reason(cell, "at the threshold: more pairs would not decide it soon")
                    self.final[question][cell.key] = cell
                else:
                    open_cells.append(cell)
            elif cell.verdict == "regressed" and not cell.allowed:
                first = self.regressed_at.setdefault((question, cell.key), look)
                if look - first < self.confirm:
                    open_cells.append(cell)
                    continue
                _add_reason(cell, f"confirmed by {look - first} more round(s)" if look > first else "")
                self.final[question][cell.key] = cell
            else:
                if (question, cell.key) in self.regressed_at:
                    _add_reason(cell, "regressed in an earlier round, not confirmed by the later ones")
                self.final[question][cell.key] = cell
        return open_cells

    def result(self, question: Question, latest: GateResult, budget_spent: bool) -> GateResult:
        cells = []
        for cell in latest.cells:
            decided = self.final[question].get(cell.key)
            if decided is None and cell.verdict == "regressed" and budget_spent:
                _add_reason(cell, "not confirmed: the budget was spent")
            cells.append(decided or cell)
        return replace(latest, cells=cells)


def measure_until_decided(raw: dict, label: str, out: Path, questions: list[Question], options: GateOptions,
                          budget_s: float, round_pairs: int, confirm: int, console: Console) -> Outcome:
    """Measure the suite ``raw`` (as given: its file with --set applied; ``label`` names it in a bad-input
    line) into ``out/run-1``, then rounds of ``round_pairs`` launch repeats of the cells some question
    has not decided, until none is left or the next round would end after ``budget_s`` seconds. Every
    round is a sweep run in this process, its tables taken in memory."""
    started = time.monotonic()
    decisions = _Decisions(questions, confirm)
    arms = sorted({name for q in questions for name in (q.baseline, q.candidate)})
    rounds: list[Round] = []
    document, pairs = raw, int(raw.get("repeats") or 1)
    budget_spent = False
    installs: dict[str, dict] = {}
    measured: list[RunSet] = []
    open_cells: dict[tuple, CellVerdict] = {}
    while True:
        run = out / f"run-{len(rounds) + 1}"
        begun = time.monotonic()
        measured.append(_measure(document, label, run, console, installs))
        installs = measured[-1].metas[0].get("installs") or {}  # asked once, in the first round
        rounds.append(Round(run, int(measured[-1].metas[0].get("cells_written", 0)), pairs,
                            time.monotonic() - begun))
        # only the cells still open are judged again (the others keep the verdict they were decided with)
        runs = _only(pool(measured), raw, list(open_cells.values())) if open_cells else pool(measured)
        latest = {q: judge(runs, q, options) for q in questions}
        open_cells = {cell.key: cell for q in questions for cell in decisions.take(q, latest[q], len(rounds))}
        if not open_cells:
            break
        estimate = rounds[-1].seconds * round_pairs / max(pairs, 1)
        if time.monotonic() - started + estimate > budget_s:
            budget_spent = True
            break
        console.print(f"round {len(rounds) + 1}: {len(open_cells)} cells not decided yet, {round_pairs} more launch "
                      f"repeats ({time.monotonic() - started:.0f} s of {budget_s:.0f} s)", highlight=False)
        document, pairs = round_suite(raw, list(open_cells.values()), arms, round_pairs), round_pairs
    runs = pool(measured)  # every cell once more, for the whole list and the shift across the board
    results = {q: decisions.result(q, judge(runs, q, options), budget_spent) for q in questions}
    return Outcome(results, rounds, time.monotonic() - started, budget_spent)


def _columns(raw: dict) -> tuple[str, ...]:
    """The columns that name a cell for its re-measurement: the implementation fields only where no
    arm sets them (an arm's impl is not the suite entry's that ``select:`` matches)."""
    set_by_arm = {name for arm in raw.get("arms") or [] for name in IMPL_COLUMNS if arm.get(name) is not None}
    return SELECT_COLUMNS + tuple(name for name in IMPL_COLUMNS if name not in set_by_arm)


def _wanted(raw: dict, cells: list[CellVerdict]) -> set[tuple]:
    return {tuple((name, _plain(cell.row[name])) for name in _columns(raw)) for cell in cells}


def _only(runs: RunSet, raw: dict, cells: list[CellVerdict]) -> RunSet:
    """The rows (and samples) of ``runs`` that measured ``cells``, every arm of them."""
    columns, wanted = _columns(raw), _wanted(raw, cells)
    keys = [tuple((name, _plain(value)) for name, value in zip(columns, row, strict=True))
            for row in runs.results[list(columns)].itertuples(index=False, name=None)]
    results = runs.results[[key in wanted for key in keys]]
    samples = runs.samples[runs.samples["cell_key"].isin(list(results["cell_key"].astype(str)))]
    return replace(runs, results=results, samples=samples)
