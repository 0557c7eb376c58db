"""What the MPI check scripts share: one call on fresh buffers, checked bit for bit over all ranks."""

from __future__ import annotations

from mpi4py import MPI

from collectives.spec import count_wrong, make_buffers


def checked_call(implementation, topo, call, comm):
    """Build ``call`` on freshly filled buffers, run it once; (op, (send, recv), wrong elements over all ranks)."""
    sendbuf, recvbuf = make_buffers(call, comm.rank)
    op = implementation.build(topo, call, sendbuf, recvbuf)
    op()
    return op, (sendbuf, recvbuf), comm.allreduce(count_wrong(call, comm.rank, recvbuf), op=MPI.SUM)
