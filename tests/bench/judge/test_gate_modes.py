"""The gate keeps call modes apart (``mode`` is a CELL_KEY column): a non-blocking cell is judged against
the baseline's non-blocking cell, never against the blocking one of the same shape and size."""

from __future__ import annotations

from dataclasses import replace

from synthetic_runs import cell, make_run

from bench.judge.gate import GateOptions, gate
from bench.results.runset import load_runs


def test_each_mode_is_judged_against_its_own(tmp_path):
    blocking = cell()
    posted = replace(blocking, mode="nonblocking")
    # the non-blocking call is 4x slower than the blocking one in both runs: no regression in either
    base = make_run(tmp_path / "base", {blocking: 10.0, posted: 40.0}, "base", seed=1)
    same = make_run(tmp_path / "same", {blocking: 10.0, posted: 40.0}, "same", seed=2)
    result = gate(load_runs([base]), load_runs([same]), GateOptions())
    verdicts = {c.row["mode"]: c.verdict for c in result.cells}
    assert set(verdicts) == {"blocking", "nonblocking"}
    assert verdicts == {"blocking": "unchanged", "nonblocking": "unchanged"}, verdicts
    # the non-blocking one alone got slower: only it is a regression
    slower = make_run(tmp_path / "slower", {blocking: 10.0, posted: 60.0}, "slower", seed=3)
    result = gate(load_runs([base]), load_runs([slower]), GateOptions())
    verdicts = {c.row["mode"]: c.verdict for c in result.cells}
    assert verdicts == {"blocking": "unchanged", "nonblocking": "regressed"}, verdicts
