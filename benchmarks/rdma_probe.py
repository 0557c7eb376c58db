"""The per-call cost of the one-sided path's signalling, measured (run under mpiexec).

    mpiexec -n 2 python benchmarks/rdma_probe.py [ITERS]

For each collective: the median time of an 8-byte call by ``rdma``, of the same op with no
data at all (only its flag puts, fences and waits: the signalling), and of the MPI
library's 8-byte call, all with the Cython timing loop in sync mode. Rank 0 prints a
markdown table and the flag and data puts one call makes.
"""

from __future__ import annotations

import sys

import mpi4py

mpi4py.rc.thread_level = "single"

import numpy as np  # noqa: E402
from mpi4py import MPI  # noqa: E402

from collectives.call import CallSpec  # noqa: E402
from collectives.impls import get  # noqa: E402
from collectives.schedules.topology import topology  # noqa: E402
from collectives.spec import COLLECTIVES, make_buffers  # noqa: E402


def puts_per_call(collective: str, nranks: int) -> tuple[int, int]:
    """(flag puts, data puts) one rank makes per call."""
    steps = nranks - 1
    if collective == "allreduce":
        return 2 * steps, 2 * steps
    return 1 + steps, steps


def median_us(impl: str, call: CallSpec, topo, iters: int) -> float:
    from cython_ext.timing import time_op

    sendbuf, recvbuf = make_buffers(call, topo.comm.rank)
    op = get(impl).build(topo, call, sendbuf, recvbuf)
    return float(np.median(time_op(op, topo.comm, "sync", max(iters // 10, 5), iters))) * 1e6


def main() -> int:
    iters = int(sys.argv[1]) if len(sys.argv) > 1 else 2000
    topo = topology(MPI.COMM_WORLD)
    nranks = topo.comm.size
    lines = [f"| collective ({nranks} ranks) | rdma 8 B (us) | rdma, flags only (us) | mpi 8 B (us) "
             "| flag / data puts per call |", "|---|---:|---:|---:|---:|"]
    for collective in COLLECTIVES:
        count = 2 if collective != "allreduce" else 2 * nranks  # 8 B per rank (float32)
        data = median_us("rdma", CallSpec(collective, nranks, count), topo, iters)
        signalling = median_us("rdma", CallSpec(collective, nranks, 0), topo, iters)
        mpi = median_us("mpi", CallSpec(collective, nranks, count), topo, iters)
        flags, puts = puts_per_call(collective, nranks)
        lines.append(f"| {collective} | {data:.2f} | {signalling:.2f} | {mpi:.2f} | {flags} / {puts} |")
    if topo.comm.rank == 0:
        from collectives.transports.rdma import ops as rdma

        print("\n".join(lines))
        print(f"\ntransport {rdma.transport_of(topo.comm)}, UCX {rdma.ucx_library()[0]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
