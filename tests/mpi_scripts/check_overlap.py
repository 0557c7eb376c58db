"""Run under mpiexec -n 2: OSU's overlap of MPI's non-blocking collectives (bench/rank/cell.py run_cell).

    mpiexec -n 2 python tests/mpi_scripts/check_overlap.py COUNT TEST_CALLS REPEATS [COLLECTIVES]

Each of the collectives (default: allreduce) as a non-blocking mpi cell of COUNT float32 per rank,
REPEATS times with no MPI_Test calls in the compute and REPEATS times with TEST_CALLS of them, the
two in turns (a change of the machine's load lands on both alike). Rank 0 prints one JSON line per
cell: its collective, the test calls, its status and error and the overlap columns.
"""

from __future__ import annotations

import json
import sys

from mpi4py import MPI

from bench.plan.cells import Cell, TimingPlan
from bench.rank.cell import run_cell
from collectives.schedules.topology import topology
from collectives.spec import total_count

comm = MPI.COMM_WORLD
topo = topology(comm)
count, test_calls, repeats = (int(value) for value in sys.argv[1:4])
collectives = sys.argv[4].split(",") if len(sys.argv) > 4 else ["allreduce"]
COLUMNS = ("status", "error", "overlap_pct", "pure_us", "compute_us", "overall_us", "test_us", "nb_test_calls")

for repeat in range(repeats):
    for collective in collectives:
        for calls in (0, test_calls):
            timing = TimingPlan(warmup=2, iters=10, min_iters=5, budget_s=0, nb_test_calls=calls)
            nbytes = 4 * count
            cell = Cell(collective, "mpi", "native", "", "", "host", comm.size, 1, comm.size, False, "float32",
                        "sum", "out_of_place", count, nbytes, total_count(collective, comm.size, count) * 4, "sync",
                        repeat=repeat, mode="nonblocking")
            columns = run_cell(topo, cell, timing, True, (0, "check-overlap")).columns()
            if comm.rank == 0:
                print(json.dumps({"collective": collective, "calls": calls, "samples": len(columns["samples_us"]),
                                  **{name: columns.get(name) for name in COLUMNS}}), flush=True)
