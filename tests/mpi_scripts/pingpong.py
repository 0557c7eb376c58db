"""Ping-pong between ranks 0 and 1: one-way time (half the round trip) per message size, OSU
latency style (one barrier, then round trips back to back: a barrier per round trip would add
its own skew across a slow link). ``exchange``: both ranks send SIZE to each other at once
(MPI_Sendrecv, OSU's bidirectional bandwidth in one message), the time of each exchange.
``pairs``: N ranks (N even) in N/2 pairs, rank r with rank r + N/2 (on two hosts of N/2 ranks each:
every pair across them); in blocks, the first pair exchanges as ``exchange`` does while the others wait
in a barrier, then the first two pairs at once (the order swapped every block, so that both arms see the
same moments of a busy machine); the first pair's times: each arm's median, and ``message_us``, the median
over blocks of (two pairs' median - one pair's) / 2: what each further message in flight adds, messages
queued for one network stack (the lab's hosts share one machine's kernel and link emulator).

    mpiexec -n 2 python pingpong.py SIZE[,SIZE...] [REPEATS] [exchange]
    mpiexec -hosts h1:2,h2:2 -n 4 python pingpong.py SIZE [REPEATS] pairs     # REPEATS per block and arm

Prints one JSON line from rank 0: {"SIZE": {"min_us", "p50_us", "gbps"}, ...} with the one-way
time of each round trip (or the time of each exchange; min and median over REPEATS) and the
bandwidth of the median (of an exchange: both directions' bytes together).
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


def exchange_us(comm: MPI.Comm, size: int, repeats: int, peer: int | None = None) -> list[float]:
    """The time of each of ``repeats`` SIZE exchanges with ``peer`` (default: the other of two ranks)."""
    send, recv = np.zeros(max(size, 1), dtype=np.uint8), np.zeros(max(size, 1), dtype=np.uint8)
    peer = 1 - comm.rank if peer is None else peer
    times = []
    for index in range(repeats + 3):
        start = MPI.Wtime()
        comm.Sendrecv(send, peer, 0, recv, peer, 0)
        if index >= 3:
            times.append((MPI.Wtime() - start) * 1e6)
    return times


def pairs_us(comm: MPI.Comm, size: int, repeats: int, active: int) -> list[float]:
    """The first ``active`` pairs' exchanges at once (rank r with r + N/2), the others waiting."""
    half = comm.size // 2
    if comm.size % 2 or not 1 <= active <= half:
        raise SystemExit(f"pairs needs an even number of ranks and 1 to {half} pairs active (ranks: {comm.size})")
    comm.Barrier()
    times = (exchange_us(comm, size, repeats, (comm.rank + half) % comm.size) if comm.rank % half < active
             else [])
    comm.Barrier()
    return times


def pairs_in_turns(comm: MPI.Comm, size: int, repeats: int, blocks: int = 20) -> dict:
    """One pair and two pairs at once in turns, ``repeats`` exchanges each per block (rank 0's figures)."""
    one, two, differences = [], [], []
    for block in range(blocks):
        medians = {}
        for active in ((1, 2) if block % 2 == 0 else (2, 1)):
            times = pairs_us(comm, size, repeats, active)
            (one if active == 1 else two).extend(times)
            medians[active] = float(np.median(times)) if times else 0.0
        differences.append((medians[2] - medians[1]) / 2)
    return {"pair_us": float(np.median(one)) if one else 0.0, "two_pairs_us": float(np.median(two)) if two else 0.0,
            "message_us": float(np.median(differences))}


def main() -> None:
    sizes = [int(size) for size in sys.argv[1].split(",")]
    repeats = int(sys.argv[2]) if len(sys.argv) > 2 else 50
    comm = MPI.COMM_WORLD
    mode = sys.argv[3] if len(sys.argv) > 3 else "pingpong"
    if mode not in ("pingpong", "exchange", "pairs"):
        raise SystemExit(f"mode {mode!r}: expected pingpong, exchange or pairs")
    figures = {}
    for size in sizes:
        if mode == "pairs":
            figures[str(size)] = pairs_in_turns(comm, size, repeats)
            continue
        if mode == "exchange":
            comm.Barrier()
            times = exchange_us(comm, size, repeats)
        else:
            times = one_way_us(comm, size, repeats)
        if comm.rank != 0:
            continue
        median = float(np.median(times))
        moved = size if mode == "pingpong" else 2 * size
        figures[str(size)] = {"min_us": min(times), "p50_us": median, "gbps": moved / median / 1e3}
    if comm.rank == 0:
        print(json.dumps(figures), flush=True)


if __name__ == "__main__":
    main()
