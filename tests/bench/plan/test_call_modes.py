"""The ``mode: [blocking, nonblocking]`` suite axis (bench/plan/cells.py MODES): blocking by default,
blocking cells keep the keys they always had, non-blocking ones are cells of their own (their key,
the ``mode`` key column), ``timing.nb_test_calls`` travels in the plan, bad values are one line."""

from __future__ import annotations

import copy
import json
from dataclasses import replace
from hashlib import sha1

import pytest
from conftest import TINY_SUITE

from bench.errors import BadInput
from bench.plan.cells import CELL_KEY, KEY_HEAD, Cell, LaunchPlan, TimingPlan, expand, legacy_cell_key
from bench.plan.suite import parse_suite


def cells_of(**changes) -> list[Cell]:
    raw = {**copy.deepcopy(TINY_SUITE), **changes}
    return [cell for launch in expand(parse_suite(raw, "test.yaml")) for cell in launch.cells]


def test_blocking_by_default_with_the_keys_cells_always_had():
    plain, both = cells_of(), cells_of(mode=["blocking", "nonblocking"])
    assert {cell.mode for cell in plain} == {"blocking"}
    blocking = [cell for cell in both if cell.mode == "blocking"]
    assert [cell.key for cell in blocking] == [cell.key for cell in plain]
    # the key of a blocking cell is the hash of KEY_HEAD, count and repeat alone (no mode in it)
    cell = plain[0]
    head = [getattr(cell, name) for name in KEY_HEAD] + [cell.count_per_rank, cell.repeat]
    assert cell.key == sha1(json.dumps(head).encode()).hexdigest()[:16]


def test_nonblocking_cells_are_cells_of_their_own():
    both = cells_of(mode=["blocking", "nonblocking"])
    nonblocking = [cell for cell in both if cell.mode == "nonblocking"]
    assert len(nonblocking) == len(both) // 2
    assert len({cell.key for cell in both}) == len(both)
    for cell in nonblocking:
        assert replace(cell, mode="blocking").key != cell.key
        assert cell.to_dict()["mode"] == "nonblocking"
    assert "mode" in CELL_KEY  # the gate, the tables and the plots keep the modes apart
    # schema-1 keys (old run folders) never had a mode
    assert legacy_cell_key(vars(nonblocking[0])) == legacy_cell_key(vars(replace(nonblocking[0], mode="blocking")))


def test_one_mode_or_a_list_and_select_by_mode():
    assert {cell.mode for cell in cells_of(mode="nonblocking")} == {"nonblocking"}
    chosen = cells_of(mode=["blocking", "nonblocking"], select=[{"mode": "nonblocking", "impl": "mpi"}])
    assert chosen and {(cell.mode, cell.impl) for cell in chosen} == {("nonblocking", "mpi")}


def test_test_calls_travel_in_the_plan():
    cell = cells_of(mode="nonblocking")[0]
    plan = LaunchPlan("r", "l", 2, 2, None, "/p", TimingPlan(nb_test_calls=16), True, [cell])
    again = LaunchPlan.from_dict(json.loads(json.dumps(plan.to_dict())))
    assert again.timing.nb_test_calls == 16 and again.cells == [cell]
    # none asked: the plan has no such field (an install from before non-blocking cells reads it)
    quiet = LaunchPlan("r", "l", 2, 2, None, "/p", TimingPlan(), True, [cell]).to_dict()
    assert "nb_test_calls" not in quiet["timing"]
    assert LaunchPlan.from_dict(quiet).timing.nb_test_calls == 0


@pytest.mark.parametrize(
    ("change", "needles"),
    [
        ({"mode": "async"}, ["mode.0", "async"]),
        ({"mode": ["blocking", "blocking"]}, ["mode.1", "listed twice"]),
        ({"timing": {"nb_test_calls": -1}}, ["timing.nb_test_calls", "-1"]),
        ({"timing": {"nb_test_calls": "many"}}, ["timing.nb_test_calls", "many"]),
    ],
)
def test_bad_modes_are_one_line_naming_the_field(change, needles):
    raw = {**copy.deepcopy(TINY_SUITE), **change}
    with pytest.raises(BadInput) as info:
        parse_suite(raw, "suites/broken.yaml")
    message = str(info.value)
    assert message.startswith("suites/broken.yaml") and "\n" not in message, message
    for needle in needles:
        assert needle in message, f"{needle!r} not in {message!r}"
