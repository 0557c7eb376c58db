"""Run under mpiexec -n 2: bench/rank/cell.py's contract, one outcome at a time.

    mpiexec -n 2 python tests/mpi_scripts/check_cell.py

An ok cell (checked, then timed: the samples are the iterations), an unsupported cell (the reason,
nothing timed, no communication), a cell whose buffers cannot be allocated on one rank (every rank
fails it with that rank's reason), a wrong answer (PCCL_BENCH_FAULT corrupts rank 1's result of cell
3: the row is ``wrong`` and untimed), two and four arms in turns (all timed, ``turns: iteration``, as
many samples each), two arms of which one cannot run (the other timed alone) and three of which one
cannot (the other two in turns). Rank 0 prints one JSON line per outcome.
"""

from __future__ import annotations

import json
import sys
from dataclasses import replace

from mpi4py import MPI

from bench.plan.cells import Cell, TimingPlan
from bench.rank.cell import run_cell, run_turns, turn_group, turn_partners
from collectives.schedules.topology import topology

comm = MPI.COMM_WORLD
topo = topology(comm)
timing = TimingPlan(warmup=1, iters=4, min_iters=2, budget_s=0)
LAUNCH = "check-cell"


def cell(impl: str = "pccl-flat", algorithm: str = "ring", count: int = 4, **changes) -> Cell:
    base = Cell("allreduce", impl, algorithm, "", "", "host", comm.size, 1, comm.size, False, "float32", "sum",
                "out_of_place", count, 4 * count, 4 * count, "sync")
    return replace(base, **changes)


def report(name: str, outcomes: list) -> None:
    rows = [outcome.columns() for outcome in outcomes]
    if comm.rank == 0:
        print(json.dumps({"case": name, "rows": [
            {key: row.get(key) for key in ("status", "error", "iters", "n_wrong", "turns", "transport")}
            | {"samples": len(row.get("samples_us", []))} for row in rows]}), flush=True)


report("ok", [run_cell(topo, cell(), timing, True, (0, LAUNCH))])
report("unsupported", [run_cell(topo, cell(algorithm="no-such-schedule"), timing, True, (1, LAUNCH))])
# One rank cannot allocate (an absurd count on rank 1 only: the other rank must not wait in the collective).
absurd = cell(count=2**62 if comm.rank == 1 else 4)
report("allocation", [run_cell(topo, absurd, timing, True, (2, LAUNCH))])
report("wrong", [run_cell(topo, cell(), timing, True, (3, LAUNCH))])
arm_a, arm_b = cell(arm="a"), cell(arm="b")
assert turn_partners(arm_a, arm_b) and not turn_partners(arm_a, arm_a)
assert not turn_partners(arm_a, replace(arm_b, count_per_rank=8)), "another size is another cell"
report("turns", run_turns(topo, (arm_a, arm_b), timing, True, (4, LAUNCH)))
report("turns-one-side", run_turns(topo, (arm_a, replace(arm_b, algorithm="no-such-schedule")), timing, True,
                                   (5, LAUNCH)))
four = [arm_a, arm_b, cell(arm="c", impl="mpi", algorithm="native"), cell(arm="d", algorithm="rdfull")]
next_size = replace(arm_a, count_per_rank=8)
assert [turn_group(four + [next_size], k) for k in range(5)] == [4, 3, 2, 1, 1], "a group ends at the next cell"
assert turn_group(four + [replace(arm_a, arm="e")], 0) == 4, "at most MAX_TURNS in turns"
assert turn_group([arm_a, next_size, arm_b], 0) == 1
report("turns-four", run_turns(topo, tuple(four), timing, True, (6, LAUNCH)))
report("turns-three-one-refused", run_turns(topo, (arm_a, replace(arm_b, algorithm="no-such-schedule"), four[2]),
                                            timing, True, (7, LAUNCH)))
if comm.rank == 0:
    print("cell checks done", file=sys.stderr)
