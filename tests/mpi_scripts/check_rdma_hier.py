"""Run under mpiexec: pccl-hier with the rail phase one-sided over UCX (``inter: rdma``), bit for bit.

    mpiexec -n 4 python tests/mpi_scripts/check_rdma_hier.py      # 2 virtual nodes of 2

Each op runs twice (setup once, flags that only grow), then a fresh op once is checked.
Rank 0 prints "cases N bad B <transport>"; exit code 1 on every rank if anything failed.
"""

from __future__ import annotations

import sys

import mpi4py

mpi4py.rc.thread_level = "single"

from mpi4py import MPI  # noqa: E402

from collectives.call import CallSpec  # noqa: E402
from collectives.impls import get  # noqa: E402
from collectives.schedules.topology import topology  # noqa: E402
from collectives.spec import count_wrong, make_buffers  # noqa: E402


def main() -> int:
    comm = MPI.COMM_WORLD
    topo = topology(comm, 2)
    hier = get("pccl-hier")
    checked, bad, problems = 0, 0, set()
    for collective in ("allgather", "reduce_scatter", "allreduce"):
        for in_place in (False, True):
            for count in (1, 7, 1000):
                call = CallSpec(collective, comm.size, count, "float32", "sum", in_place, None, "ring", "rdma",
                                topo.grid.nnodes)
                reason = hier.unsupported_reason(call)
                if reason:
                    problems.add(reason)
                    continue
                send, recv = make_buffers(call, comm.rank)
                op = hier.build(topo, call, send, recv)
                moved = hier.describe(call, op=op).transport
                op()
                op()
                send, recv = make_buffers(call, comm.rank)
                hier.build(topo, call, send, recv)()
                wrong = comm.allreduce(count_wrong(call, comm.rank, recv))
                checked += 1
                bad += bool(wrong)
    if comm.rank == 0:
        print("cases", checked, "bad", bad, moved, sorted(problems))
    return 1 if bad or problems or not checked else 0


if __name__ == "__main__":
    sys.exit(main())
