"""Run under mpiexec -n 2: buffers that move (bench/rank/buffers.py, cython_ext.core.Rotating).

    mpiexec -n 2 python tests/mpi_scripts/check_buffers.py

``walk``: for mpi, pccl-flat and shm, an all-reduce built once per position of a rotate layout and
run through Rotating: after k calls exactly the first k positions hold the result (each call used
the next position's own buffers), after a full turn all of them, and the next call is the first
position's again. ``order``: the timing loop (cython_ext.timing.measure) calls the parts in turn,
warm-up included. ``cells``: a rotate cell through bench/rank/cell.py is ok with its positions in the
row, and one whose last position's result PCCL_BENCH_FAULT corrupts on rank 1 (cell 1) is wrong.
Rank 0 prints one JSON line.
"""

from __future__ import annotations

import json
from dataclasses import replace

from cython_ext.core import PyCallOp, Rotating
from cython_ext.timing import measure
from mpi4py import MPI

from bench.plan.cells import Cell, TimingPlan
from bench.rank import buffers
from bench.rank.cell import call_of, run_cell
from collectives import spec
from collectives.impls import get
from collectives.memory.context import HOST
from collectives.schedules.topology import topology

comm = MPI.COMM_WORLD
topo = topology(comm)
LAUNCH = "check-buffers"
CELL = Cell("allreduce", "mpi", "native", "", "", "host", comm.size, 1, comm.size, False, "float32", "sum",
            "out_of_place", 16, 64, 64, "sync", buffers="rotate", buffers_max_count=64)
out: dict = {"walk": {}}

for impl, algorithm in (("mpi", "native"), ("pccl-flat", "ring"), ("shm", "native")):
    cell = replace(CELL, impl=impl, algorithm=algorithm)
    call = call_of(cell)
    layout = buffers.layout_of("rotate", call, cell.buffers_max_count, 0)
    placed = buffers.positions(HOST.backend, *spec.make_buffers(call, comm.rank), layout)
    walk = Rotating(comm, [get(impl).build(topo, call, send, recv, HOST) for send, recv in placed])
    done = []
    for _ in range(layout.positions + 1):
        done.append([spec.count_wrong(call, comm.rank, recv) == 0 for _, recv in placed])
        walk()
    done.append([spec.count_wrong(call, comm.rank, recv) == 0 for _, recv in placed])
    out["walk"][impl] = {"positions": layout.positions, "right_after": done, "position": walk.position,
                         "one_allocation": all(recv.base is placed[0][1].base for _, recv in placed),
                         "stride": [recv.ctypes.data - placed[0][1].ctypes.data for _, recv in placed]}

calls: list[int] = []
parts = [PyCallOp(comm, lambda k=k: calls.append(k)) for k in range(3)]
measure(Rotating(comm, parts), comm, TimingPlan(warmup=2, iters=7, min_iters=7, budget_s=0, target_ci=0,
                                                 max_warmup=0))
out["order"] = calls

timing = TimingPlan(warmup=1, iters=3, min_iters=1, budget_s=0)
out["cells"] = [{key: outcome.columns().get(key) for key in ("status", "error", "n_wrong", "buffer_positions",
                                                            "buffer_span_bytes")}
                for outcome in (run_cell(topo, CELL, timing, True, (k, LAUNCH)) for k in range(2))]
if comm.rank == 0:
    print(json.dumps(out), flush=True)
