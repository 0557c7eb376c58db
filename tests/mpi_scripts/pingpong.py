"""Ping-pong between ranks 0 and 1: one-way time (half the round trip) per message size, OSU
latency style (one barrier, then round trips back to back: a barrier per round trip would add
its own skew across a slow link).

    mpiexec -n 2 python pingpong.py SIZE[,SIZE...] [REPEATS]

Prints one JSON line from rank 0: {"SIZE": {"min_us", "p50_us", "gbps"}, ...} with the one-way
time of each round trip (min and median over REPEATS) and the bandwidth of the median.
"""

from __future__ import annotations

import json
import sys

import mpi4py

mpi4py.rc.thread_level = "single"
import numpy as np  # noqa: E402
from mpi4py import MPI  # noqa: E402


def one_way_us(comm: MPI.Comm, size: int, repeats: int) -> list[float]:
    buffer = np.zeros(max(size, 1), dtype=np.uint8)
    peer = 1 - comm.rank
    times = []
    comm.Barrier()
    for index in range(repeats + 3):  # three untimed round trips: connection setup, first touch
        start = MPI.Wtime()
        if comm.rank == 0:
            comm.Send(buffer, peer)
            comm.Recv(buffer, peer)
        else:
            comm.Recv(buffer, peer)
            comm.Send(buffer, peer)
        if index >= 3:
            times.append((MPI.Wtime() - start) / 2 * 1e6)
    return times


def main() -> None:
    sizes = [int(size) for size in sys.argv[1].split(",")]
    repeats = int(sys.argv[2]) if len(sys.argv) > 2 else 50
    comm = MPI.COMM_WORLD
    figures = {}
    for size in sizes:
        times = one_way_us(comm, size, repeats)
        median = float(np.median(times))
        figures[str(size)] = {"min_us": min(times), "p50_us": median, "gbps": size / median / 1e3}
    if comm.rank == 0:
        print(json.dumps(figures), flush=True)


if __name__ == "__main__":
    main()
