"""bench/rank/cell.py on two real ranks: what each outcome of a cell puts in its row.

tests/mpi_scripts/check_cell.py runs the cells (one launch) and prints one JSON line per case.
"""

from __future__ import annotations

import json

import pytest
from conftest import MPI_SCRIPTS, describe, run_mpi

pytestmark = pytest.mark.mpi


@pytest.fixture(scope="module")
def cases() -> dict[str, list[dict]]:
    corrupt = "corrupt:rank=1:cell=3:launch=check-cell"  # the "wrong" case's cell
    done = run_mpi(2, MPI_SCRIPTS / "check_cell.py", env={"PCCL_BENCH_FAULT": corrupt})
    assert done.returncode == 0 and "cell checks done" in done.stderr, describe(done)
    found = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    return {case["case"]: case["rows"] for case in found}


def test_an_ok_cell_is_checked_then_timed(cases):
    (row,) = cases["ok"]
    assert row["status"] == "ok" and row["error"] == "" and row["n_wrong"] == 0, row
    assert row["iters"] == row["samples"] >= 2 and row["transport"] == "mpi", row


def test_an_unsupported_cell_says_why_and_is_not_timed(cases):
    (row,) = cases["unsupported"]
    assert row["status"] == "unsupported" and "no-such-schedule" in row["error"], row
    assert row["iters"] == 0 and row["samples"] == 0


def test_buffers_one_rank_cannot_allocate_fail_the_cell_on_every_rank(cases):
    (row,) = cases["allocation"]  # rank 0's row: the failing rank is rank 1
    assert row["status"] == "failed" and row["error"].startswith("rank 1: cannot allocate"), row
    assert row["samples"] == 0


def test_a_wrong_answer_is_a_wrong_cell_with_no_time(cases):
    (row,) = cases["wrong"]
    assert row["status"] == "wrong" and row["n_wrong"] == 1 and "1 wrong elements" in row["error"], row
    assert row["samples"] == 0


def test_two_arms_are_timed_in_turns_and_one_that_cannot_run_leaves_the_other_alone(cases):
    both = cases["turns"]
    assert [row["status"] for row in both] == ["ok", "ok"] and {row["turns"] for row in both} == {"iteration"}, both
    timed, refused = cases["turns-one-side"]
    assert timed["status"] == "ok" and timed["samples"] >= 2 and timed["turns"] is None, timed
    assert refused["status"] == "unsupported", refused


def test_up_to_four_arms_are_timed_in_turns_and_one_that_cannot_run_leaves_the_others_in_turns(cases):
    four = cases["turns-four"]
    assert [row["status"] for row in four] == ["ok"] * 4 and {row["turns"] for row in four} == {"iteration"}, four
    assert len({row["samples"] for row in four}) == 1, "every arm timed in every turn"
    first, refused, third = cases["turns-three-one-refused"]
    assert refused["status"] == "unsupported" and refused["samples"] == 0, refused
    assert (first["turns"], third["turns"]) == ("iteration", "iteration") and first["samples"] == third["samples"]
