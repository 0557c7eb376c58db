"""Where the shm paths cross over: every path forced, side by side, interleaved per size.

    python benchmarks/shm_cutover.py [--nranks 2] [--iters 300] [--min-bytes 1K] [--max-bytes 1M] [--repeats 3]
                                     [--collectives allreduce]

Runs itself under mpiexec (the sweep launcher's job environment). Per collective and
nccl-tests size (float32 sum, out of place): the median time (us, sync mode: barrier, Wtime,
call, Wtime, max over ranks) of each path that applies (``ll`` while its payload fits the slot,
``oneshot`` for all-reduces within a chunk), the median over ``--repeats`` interleaved rounds.
The defaults in collectives/transports/shm/ops.py (DEFAULT_LL_MAX, DEFAULT_ONESHOT_MAX, DEFAULT_CMA_MIN) come
from these tables.
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

    from bench.plan.sizes import format_size, parse_size
    from collectives.call import CallSpec
    from collectives.spec import make_buffers
    from collectives.transports.shm import ops as shm

    comm = MPI.COMM_WORLD
    p = comm.size
    sizes, size = [], parse_size(args.min_bytes)
    while size <= parse_size(args.max_bytes):
        sizes.append(size)
        size *= 2
    for collective in args.collectives.split(","):
        rows = []
        for total in sizes:
            count = total // 4 if collective == "allreduce" else total // 4 // p
            call = CallSpec(collective, p, count)
            ops = {}
            for path in shm.PATHS:
                forced = shm.Settings(**{**shm.settings().__dict__, "path": path})
                if shm.path_for(collective, p, count, 4, True, forced) != path:
                    continue  # does not apply (oneshot: all-reduce within a chunk; ll: within the slot)
                send, recv = make_buffers(call, comm.rank)
                ops[path] = (shm.build(comm, collective, send, recv, count, "float32", "sum", path=path), send, recv)
            medians = {path: [] for path in ops}
            for _ in range(args.repeats):
                for path, (op, _, _) in ops.items():
                    medians[path].append(float(np.median(time_op(op, comm, "sync", 20, args.iters))) * 1e6)
            rows.append((total, {path: float(np.median(values)) for path, values in medians.items()}))
        if comm.rank == 0:
            print(f"\n**{collective}, {p} ranks, float32 sum** — median us per path (best in bold)\n")
            print("| size | " + " | ".join(shm.PATHS) + " |\n|---:|" + "---:|" * len(shm.PATHS))
            for total, times in rows:
                best = min(times, key=times.get)
                cells = [("**%.2f**" if path == best else "%.2f") % times[path] if path in times else ""
                         for path in shm.PATHS]
                print(f"| {format_size(total)} | " + " | ".join(cells) + " |", flush=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nranks", type=int, default=2)
    parser.add_argument("--iters", type=int, default=300)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--min-bytes", default="1K")
    parser.add_argument("--max-bytes", default="1M")
    parser.add_argument("--collectives", default="allgather,reduce_scatter,allreduce")
    args = parser.parse_args()
    if not is_child():
        return rerun_under_mpiexec(__file__, args.nranks)
    measure(args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
