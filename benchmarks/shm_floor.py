"""The physical floor of this machine: a cache-line ping-pong through shared memory between two
ranks, and the 8 B all-reduce (shm and the MPI library) measured beside it, interleaved.

    python benchmarks/shm_floor.py [--rounds 1000] [--batches 2000] [--repeats 7] [--iters 2000]

Runs itself under ``mpiexec -n 2`` (the sweep launcher's job environment). The ping-pong: two
words on their own cache lines in the shm segment; rank 0 writes i, rank 1 waits for it and
writes i back; nothing else runs, the waits poll without pausing. Round trip = elapsed /
rounds, one way = half of it; timed in batches of ``--rounds`` (a batch in which the scheduler
took a core away is an outlier, not a shift) and quoted as the median batch. An all-reduce
needs at least one one-way transfer (each rank must see the other's data); the 8 B rows are
timed with the harness's own loop (sync: barrier, Wtime, call, Wtime, max over ranks; and
pipelined: calls back to back), medians over ``--repeats`` rounds.
"""

from __future__ import annotations

import argparse
import sys

from under_mpiexec import is_child, rerun_under_mpiexec  # beside this script


def measure(args: argparse.Namespace) -> None:
    import mpi4py

    mpi4py.rc.thread_level = "single"
    import numpy as np
    from cython_ext.timing import time_op
    from mpi4py import MPI

    from collectives.call import CallSpec
    from collectives.impls import get
    from collectives.schedules.topology import topology
    from collectives.spec import make_buffers
    from collectives.transports.shm import ops as shm

    comm = MPI.COMM_WORLD
    segment = shm.segment(comm)
    call = CallSpec("allreduce", 2, 2)  # 8 B of float32
    ops = {}
    for name in ("shm", "mpi"):
        send, recv = make_buffers(call, comm.rank)
        ops[name] = (get(name).build(topology(comm), call, send, recv), send, recv)
    rtt, timed = [], {(name, mode): [] for name in ops for mode in ("sync", "pipelined")}
    for _ in range(args.repeats):
        comm.Barrier()
        batches = [segment.pingpong(1 - comm.rank, args.rounds) for _ in range(args.batches)]
        rtt.append(comm.allreduce(float(np.median(batches)), op=MPI.MAX) / args.rounds * 1e6)
        for (name, mode), values in timed.items():
            values.append(float(np.median(time_op(ops[name][0], comm, mode, 50, args.iters))) * 1e6)
    if comm.rank:
        return
    trip = float(np.median(rtt))
    print(f"cache-line ping-pong, 2 ranks, median of {args.batches} batches of {args.rounds} round trips, "
          f"median of {args.repeats} repeats: "
          f"round trip {trip * 1e3:.0f} ns (min {min(rtt) * 1e3:.0f}), one way {trip * 500:.0f} ns\n")
    print("| 8 B all-reduce | timing | median us | x one way | x round trip |\n|---|---|---:|---:|---:|")
    for (name, mode), values in timed.items():
        value = float(np.median(values))
        print(f"| {name} | {mode} | {value:.3f} | {value / (trip / 2):.1f} | {value / trip:.1f} |")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=1000)
    parser.add_argument("--batches", type=int, default=2000)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--iters", type=int, default=2000)
    args = parser.parse_args()
    if not is_child():
        return rerun_under_mpiexec(__file__, 2)
    measure(args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
