"""``pccl-bench ab``'s loop (bench/sweep/ab.py): rounds of launch pairs of the cells not decided yet.

The measurement is replaced by a synthetic one that writes run folders as a sweep does (rows of every
planned cell, arm and launch repeat; each launch's samples drawn around the cell's time times a
launch-level factor), and a fake clock, so the decisions are deterministic and no MPI runs. The
real command on two ranks is tests/bench/judge/test_gate_arms.py::test_real_two_arm_run_at_two_ranks.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from rich.console import Console

from bench.judge.gate import GateOptions
from bench.judge.gate_output import headline, junit, markdown
from bench.plan.cells import expand
from bench.plan.suite import parse_suite
from bench.results.runset import RunSet
from bench.results.table import build_tables, write_run
from bench.sweep import ab
from bench.sweep.ab import Question, measure_until_decided, round_suite

SUITE = {
    "name": "loop", "collectives": ["allreduce"], "implementations": ["mpi", {"impl": "pccl-flat",
                                                                            "algorithms": ["ring"]}],
    "ranks": [2], "sizes": {"min": "8B", "max": "64KiB", "factor": 8}, "repeats": 6,
    "arms": [{"name": "base"}, {"name": "cand", "env": {"PCCL_BENCH_TEST_ARM": "1"}}],
}


class FakeMeasure:
    """Writes what a sweep of the suite would: ``ratio[(impl, bytes_total)]`` is the candidate's true
    slowdown (default 1), ``noise[...]`` the log-sd of a launch's level (default 0.02), 60 samples a
    launch with 2% spread. Each round takes ``seconds`` on the fake clock."""

    def __init__(self, ratio=None, noise=None, seconds: float = 10.0, seed: int = 1) -> None:
        self.ratio, self.noise, self.seconds = ratio or {}, noise or {}, seconds
        self.rng = np.random.default_rng(seed)
        self.now = 0.0
        self.measured: list[set] = []

    def monotonic(self) -> float:
        return self.now

    def __call__(self, document: dict, label: str, out: Path, console, installs: dict) -> RunSet:
        suite = parse_suite(document, label)
        rows, seen = [], set()
        stamp = 1.8e9 + self.now
        for launch in expand(suite):
            for cell in launch.cells:
                what = (cell.impl, cell.bytes_total)
                seen.add(what)
                scale = self.ratio.get(what, 1.0) if cell.arm == "cand" else 1.0
                level = float(np.exp(self.rng.normal(0.0, self.noise.get(what, 0.02))))
                samples = 10.0 * scale * level * np.exp(self.rng.normal(0.0, 0.02, 60))
                stamp += 0.01
                rows.append({**cell.to_dict(), "launch_id": launch.launch_id, "samples_us": list(samples),
                             "status": "ok", "n_wrong": 0, "error": "", "iters": 60, "timestamp": stamp})
        self.measured.append(seen)
        out.mkdir(parents=True)
        run_id = f"loop-{len(self.measured)}"
        identity = {"run_id": run_id, "suite": "loop", "tool_version": "test", "git_sha": "", "schema_version": 1}
        meta = {"schema_version": 1, "run_id": run_id, "suite": "loop", "cells_written": len(rows)}
        results, samples = build_tables(rows, identity)
        write_run(out, results, samples, meta)
        self.now += self.seconds
        return RunSet(results, samples, [meta], [str(out)])


def _loop(tmp_path, fake: FakeMeasure, monkeypatch, budget: float = 600.0, scale: float = 1.0, confirm: int = 1,
          **options):
    monkeypatch.setattr(ab, "_measure", fake)
    monkeypatch.setattr(ab.time, "monotonic", fake.monotonic)
    tmp_path.mkdir(exist_ok=True)
    question = Question("base", "cand", scale)
    outcome = measure_until_decided(dict(SUITE), "suite.yaml", tmp_path / "ab", [question], GateOptions(
        small_threshold=0.10, **options), budget, 4, confirm, Console(quiet=True))
    return outcome, outcome.results[question]


def _verdicts(result) -> dict:
    return {(cell.row["impl"], int(cell.row["bytes_total"])): cell.verdict for cell in result.cells}


def test_only_undecided_cells_are_measured_again_until_decided(tmp_path, monkeypatch):
    noisy = ("pccl-flat", 4096)
    fake = FakeMeasure(ratio={("mpi", 64): 1.3}, noise={noisy: 0.15})
    outcome, result = _loop(tmp_path, fake, monkeypatch)
    verdicts = _verdicts(result)
    assert verdicts.pop(("mpi", 64)) == "regressed" and set(verdicts.values()) == {"unchanged"}
    assert len(outcome.rounds) >= 3 and not outcome.budget_spent and result.passed is False
    assert len(fake.measured[0]) == 10  # every cell first (2 implementations x 5 sizes)
    later = set().union(*fake.measured[1:])
    assert noisy in later and ("mpi", 64) in later  # the noisy one, and the regressed one to confirm it
    assert later < fake.measured[0] and ("mpi", 32768) not in later  # the quiet ones are done
    regressed = next(c for c in result.cells if c.verdict == "regressed")
    assert "confirmed by 1 more round" in regressed.reason


def test_what_the_budget_leaves_is_undecided_and_fails_unless_allowed(tmp_path, monkeypatch):
    wild = {cell: 0.5 for cell in (("mpi", 64), ("pccl-flat", 64))}
    outcome, result = _loop(tmp_path, FakeMeasure(noise=wild), monkeypatch, budget=25.0)
    verdicts = _verdicts(result)
    assert outcome.budget_spent and len(outcome.rounds) == 2  # a third round would end after 25 s
    assert verdicts[("mpi", 64)] == verdicts[("pccl-flat", 64)] == "undecided"
    assert not result.passed and "undecided" in result.unjudged_text()
    _, allowed = _loop(tmp_path / "again", FakeMeasure(noise=wild), monkeypatch, budget=25.0, allow_undecided=True)
    assert allowed.passed and "2 undecided" in allowed.unjudged_text()


def test_a_uniform_slowdown_fails_as_one_finding(tmp_path, monkeypatch):
    """x1.15 on every cell, with launch noise that leaves single cells undecided for a while: the
    candidate is judged slower across the board from the first round's pairs."""
    every = {(impl, size): 1.15 for impl in ("mpi", "pccl-flat") for size in (8, 64, 512, 4096, 32768)}
    _, result = _loop(tmp_path, FakeMeasure(ratio=every, noise=dict.fromkeys(every, 0.04)), monkeypatch, budget=15.0)
    assert result.shift is not None and result.shift_verdict() == "regressed" and not result.passed
    assert 1.10 < result.shift.ratio < 1.20 and result.shift.same_way > 0.8
    assert "regressed across the board: the candidate is x1.1" in headline(result)
    report = junit(result)
    assert '<testcase classname="gate" name="across the board"' in report and 'type="regressed"' in report
    assert "Across the board: the candidate is" in markdown(result)


def test_no_shift_without_one(tmp_path, monkeypatch):
    _, result = _loop(tmp_path, FakeMeasure(), monkeypatch)
    assert result.shift is not None and result.shift_verdict() == "" and result.passed
    assert 0.97 < result.shift.low <= result.shift.high < 1.03


def test_the_scale_of_a_question_is_the_what_if_of_a_slower_candidate(tmp_path, monkeypatch):
    _, result = _loop(tmp_path, FakeMeasure(), monkeypatch, scale=1.25)
    assert set(_verdicts(result).values()) == {"regressed"}


def test_round_suite_keeps_the_open_cells_and_the_asked_arms(tmp_path, monkeypatch):
    _, result = _loop(tmp_path, FakeMeasure(ratio={("mpi", 64): 1.3}), monkeypatch, confirm=0)
    regressed = [cell for cell in result.cells if cell.verdict == "regressed"]
    raw = {**SUITE, "arms": [*SUITE["arms"], {"name": "other", "env": {"X": "1"}}]}
    again = parse_suite(round_suite(raw, regressed, ["base", "cand"], 6), "round")
    cells = [cell for launch in expand(again) for cell in launch.cells]
    assert {(c.impl, c.bytes_total, c.arm) for c in cells} == {("mpi", 64, "base"), ("mpi", 64, "cand")}
    assert again.repeats == 6 and [arm.name for arm in again.arms] == ["base", "cand"]
    # an arm that sets the implementation: every implementation of the open cells' sizes
    raw["arms"][1] = {"name": "cand", "impl": "pccl-flat", "algorithm": "ring"}
    again = parse_suite(round_suite(raw, regressed, ["base", "cand"], 2), "round")
    assert {c.bytes_total for launch in expand(again) for c in launch.cells} == {64}
    assert {c.impl for launch in expand(again) for c in launch.cells if c.arm == "base"} == {"mpi", "pccl-flat"}


@pytest.mark.parametrize("values", [[1.0, 2.0, 3.0, 10.0], [0.5], list(np.linspace(-1, 1, 9))])
def test_hodges_lehmann_is_the_median_of_the_walsh_averages(values):
    from bench.results.stats import hodges_lehmann

    walsh = [(a + b) / 2 for i, a in enumerate(values) for b in values[i:]]
    assert hodges_lehmann(np.array(values)) == pytest.approx(np.median(walsh))
    stacked = np.array([values, values[::-1]])
    assert hodges_lehmann(stacked) == pytest.approx([np.median(walsh)] * 2)


def test_a_cell_at_the_threshold_stays_undecided_without_eating_the_budget(tmp_path, monkeypatch):
    """A true 1.10 against a 10% threshold: no number of pairs decides it; once its interval lies
    within 3% of 1.10 on both sides it is left undecided, and the loop ends before its budget."""
    outcome, result = _loop(tmp_path, FakeMeasure(ratio={("mpi", 512): 1.10}), monkeypatch, budget=10_000.0)
    cell = next(c for c in result.cells if (c.row["impl"], int(c.row["bytes_total"])) == ("mpi", 512))
    assert cell.verdict == "undecided" and "at the threshold" in cell.reason
    assert 1.10 / 1.03 <= cell.estimate.low and cell.estimate.high <= 1.10 * 1.03
    assert not outcome.budget_spent and outcome.seconds < 1000 and not result.passed
