"""A part row made in one place (bench/rank/outcome.py part_row): the planned cell, the launch's
measured placement, its extra fields and the cell's typed outcome, without silent overrides."""

from __future__ import annotations

from dataclasses import replace

import pytest

from bench.plan.cells import Cell
from bench.rank.outcome import CellOutcome, LaunchFacts, MeasuredPlacement, part_row

CELL = Cell(collective="allreduce", impl="mpi", algorithm="native", intra="", inter="", device="host", nranks=4,
            nnodes=1, ranks_per_node=4, virtual_nodes=False, dtype="float32", op="sum", placement="out_of_place",
            count_per_rank=16, bytes_per_rank=64, bytes_total=64, timing_mode="sync")
OK = CellOutcome(status="ok", samples_us=[1.0, 2.0, 3.0], warmup=2, stop_reason="iters",
                 described={"transport": "mpi", "library": "MPICH"}, timing={"ci_rel": 0.01})
#: Slurm chose two nodes of two where the plan, naming no hosts, put all four ranks on one
SPREAD = LaunchFacts("single", MeasuredPlacement(2, 2, False, "n1,n2", "0011223344556677"))


def test_the_measured_placement_fills_the_unprefixed_columns_and_the_plan_keeps_its_own():
    row = part_row(CELL, OK, 1.5, "n4", SPREAD, {"oversubscribed": False})
    assert (row["nnodes"], row["ranks_per_node"], row["hosts"], row["hosts_digest"]) == (2, 2, "n1,n2",
                                                                                         "0011223344556677")
    assert (row["planned_nnodes"], row["planned_ranks_per_node"], row["planned_hosts_digest"]) == (1, 4, "")
    assert row["cell_key"] == CELL.key and Cell.from_dict(row) == CELL
    assert (row["status"], row["iters"], row["samples_us"], row["warmup"], row["stop_reason"]) == \
        ("ok", 3, [1.0, 2.0, 3.0], 2, "iters")
    assert (row["transport"], row["ci_rel"], row["timestamp"], row["launch_id"]) == ("mpi", 0.01, 1.5, "n4")
    assert row["mpi_thread_level"] == "single" and row["oversubscribed"] is False


def test_a_launch_that_measured_nothing_shows_the_planned_placement():
    failed = LaunchFacts("single", error="placement: the plan puts ...")
    row = part_row(CELL, failed.failure(), 1.5, "n4", failed)
    assert (row["nnodes"], row["ranks_per_node"], row["virtual_nodes"]) == (1, 4, False)
    assert "hosts" not in row and "hosts_digest" not in row
    assert (row["status"], row["error"], row["iters"], row["samples_us"]) == ("failed", failed.error, 0, [])
    assert "stop_reason" not in row and "warmup" not in row, "as before: the launch never got to a timing plan"


def test_a_source_that_repeats_another_is_refused_not_silently_won():
    with pytest.raises(ValueError, match="extra fields repeat"):
        part_row(CELL, OK, 1.5, "n4", SPREAD, {"nnodes": 3})
    with pytest.raises(ValueError, match="outcome repeat"):
        part_row(CELL, replace(OK, described={"collective": "allgather"}), 1.5, "n4", SPREAD)
    with pytest.raises(ValueError, match="reported twice"):
        replace(OK, timing={"status": "x"}).columns()


def test_a_sweeps_missing_row_has_no_launch_facts():
    row = part_row(CELL, CellOutcome.not_run("timeout", "MPI job killed"), 2.0)
    assert "launch_id" not in row and row["status"] == "timeout" and row["planned_nnodes"] == row["nnodes"] == 1
