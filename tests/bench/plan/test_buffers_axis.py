"""The suite's ``buffers`` axis: validated as the other axes, planned as cells of their own, and in
the cell key only where it is not warm (a warm cell keeps the key it always had)."""

from __future__ import annotations

import copy
import json
from dataclasses import replace
from hashlib import sha1

import pytest
from conftest import TINY_SUITE

from bench.errors import BadInput
from bench.plan.cells import CELL_KEY, KEY_HEAD, Cell, cell_keys, expand
from bench.plan.suite import parse_suite

CELL = Cell(collective="allreduce", impl="mpi", algorithm="native", intra="", inter="", device="host", nranks=4,
            nnodes=2, ranks_per_node=2, virtual_nodes=False, dtype="float32", op="sum", placement="out_of_place",
            count_per_rank=16, bytes_per_rank=64, bytes_total=64, timing_mode="sync", repeat=1)


def suite_of(**changes):
    return parse_suite({**copy.deepcopy(TINY_SUITE), **changes}, "suites/b.yaml")


def test_warm_is_the_default_and_a_list_or_one_value_is_taken():
    assert suite_of().buffers == ["warm"]
    assert suite_of(buffers="cold").buffers == ["cold"]
    assert suite_of(buffers=["warm", "rotate", "cold"]).buffers == ["warm", "rotate", "cold"]


@pytest.mark.parametrize("value, needles", [
    ("hot", ["buffers.0", "hot"]),
    (["warm", "lukewarm"], ["buffers.1", "lukewarm"]),
    (["rotate", "rotate"], ["buffers.1", "'rotate'", "listed twice"]),
])
def test_a_bad_buffers_value_is_one_line_naming_file_field_and_value(value, needles):
    with pytest.raises(BadInput) as info:
        suite_of(buffers=value)
    message = str(info.value)
    assert message.startswith("suites/b.yaml") and "\n" not in message, message
    assert all(needle in message for needle in needles), message


def test_a_bad_buffers_value_exits_2_at_the_cli(tmp_path):
    from conftest import describe, run_cli

    path = tmp_path / "b.yaml"
    path.write_text(json.dumps({**TINY_SUITE, "buffers": ["warm", "hot"]}))
    done = run_cli("suites", "validate", path)
    assert done.returncode == 2 and "buffers.1" in done.stderr and "Traceback" not in done.stderr, describe(done)


def test_a_warm_cell_keeps_the_key_it_had_before_buffers_existed():
    before = [getattr(CELL, name) for name in KEY_HEAD] + [CELL.count_per_rank, CELL.repeat]
    assert CELL.buffers == "warm"
    assert CELL.key == sha1(json.dumps(before).encode()).hexdigest()[:16]
    # a row without the field (an older part row or importer) is warm, with the same key
    shared = {name: getattr(CELL, name) for name in KEY_HEAD}
    assert cell_keys(shared)(CELL.count_per_rank, CELL.repeat) == CELL.key


def test_rotate_and_cold_are_cells_of_their_own_in_the_key():
    rotate, cold = replace(CELL, buffers="rotate", buffers_max_count=1024), replace(CELL, buffers="cold")
    assert len({CELL.key, rotate.key, cold.key}) == 3
    values = [getattr(CELL, name) for name in KEY_HEAD] + ["rotate", CELL.count_per_rank, CELL.repeat]
    assert rotate.key == sha1(json.dumps(values).encode()).hexdigest()[:16]
    # the largest count is a consequence of the sizes, not a part of the measurement's name
    assert replace(rotate, buffers_max_count=8).key == rotate.key
    assert "buffers" in CELL_KEY and CELL_KEY[-1] == "arm"  # the gate and the samples group by it
    assert Cell.from_dict(rotate.to_dict()) == rotate


def test_every_size_is_planned_once_per_buffers_the_three_one_after_another():
    suite = suite_of(buffers=["warm", "rotate", "cold"], collectives=["allreduce"], implementations=["mpi"])
    (launch,) = expand(suite)
    sizes = sorted({cell.count_per_rank for cell in launch.cells})
    assert len(launch.cells) == 3 * len(sizes)
    assert [cell.buffers for cell in launch.cells[:3]] == ["warm", "rotate", "cold"]
    assert len({cell.count_per_rank for cell in launch.cells[:3]}) == 1
    # rotate walks the largest size's buffers (nccl-tests' maxbytes); the others need none
    assert {cell.buffers_max_count for cell in launch.cells if cell.buffers == "rotate"} == {max(sizes)}
    assert {cell.buffers_max_count for cell in launch.cells if cell.buffers != "rotate"} == {0}
