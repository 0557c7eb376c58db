"""Run under mpiexec with the MPI call recorder preloaded (tests/collectives/impls/test_mpi_in_place.py):
the ``mpi`` implementation's three collectives, out of place and in place, through the harness path
(Implementation.build, as the sweep's worker calls them), each checked bit for bit.

Rank 0 prints one JSON line: per collective and placement, the receive buffer's address and the
number of wrong elements, so that the test can find the call that the recorder saw for each.
"""

from __future__ import annotations

import json

import mpi4py

mpi4py.rc.thread_level = "single"

from mpi4py import MPI  # noqa: E402

from collectives.call import CallSpec  # noqa: E402
from collectives.impls import get  # noqa: E402
from collectives.spec import count_wrong, make_buffers  # noqa: E402

COUNT = 1000


def main() -> None:
    comm = MPI.COMM_WORLD
    implementation = get("mpi")
    calls = []
    for collective in ("allgather", "reduce_scatter", "allreduce"):
        for in_place in (False, True):
            call = CallSpec(collective, comm.size, COUNT, "float32", "sum", in_place)
            send, recv = make_buffers(call, comm.rank)
            implementation.build(comm, call, send, recv)()
            wrong = comm.allreduce(count_wrong(call, comm.rank, recv))
            calls.append({"collective": collective, "in_place": in_place, "rank": comm.rank,
                          "recv": recv.ctypes.data, "recv_elements": int(recv.size),
                          "send": None if send is None else send.ctypes.data,
                          "wrong": wrong})
    every = comm.gather(calls)
    if comm.rank == 0:
        print(json.dumps([call for rank_calls in every for call in rank_calls]))


main()
