"""What the walk of rotate/cold buffers adds to a timed call: the same op warm, and as every part of a
``cython_ext.core.Rotating`` (so the buffers do not move, only the dispatch does), timed in turns.

    python benchmarks/rotating_overhead.py [--parts 1024] [--iters 20000] [--rounds 5]

One rank (MPI_COMM_SELF), an 8 B MPI_Allreduce of the ``mpi`` implementation, pipelined mode (no
barrier: the call itself dominates), the two ops in turns iteration by iteration
(cython_ext.timing.measure); per round the mean of each (MPI_Wtime ticks are coarser than the
difference, so medians sit on ticks) and their difference, in ns.
"""

from __future__ import annotations

import argparse


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--parts", type=int, default=1024)
    parser.add_argument("--iters", type=int, default=20000)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()

    import mpi4py

    mpi4py.rc.thread_level = "single"
    import numpy as np
    from cython_ext.core import Rotating
    from cython_ext.timing import measure
    from mpi4py import MPI

    from collectives import spec
    from collectives.call import CallSpec
    from collectives.impls import get
    from collectives.memory.context import HOST
    from collectives.schedules.topology import topology
    from collectives.timing_plan import TimingPlan

    comm = MPI.COMM_SELF
    call = CallSpec("allreduce", 1, 2, "float32")
    send, recv = spec.make_buffers(call, 0)
    warm = get("mpi").build(topology(comm), call, send, recv, HOST)
    walk = Rotating(comm, [warm] * args.parts)
    plan = TimingPlan(mode="pipelined", warmup=100, iters=args.iters, min_iters=args.iters, budget_s=0,
                      target_ci=0, max_warmup=0)
    print(f"{'round':>5} {'warm mean ns':>13} {'rotating mean ns':>17} {'difference ns':>14}")
    for round_ in range(args.rounds):
        (warm_s, _), (walk_s, _) = measure((warm, walk), comm, plan)
        a, b = float(np.mean(warm_s)) * 1e9, float(np.mean(walk_s)) * 1e9
        print(f"{round_:>5} {a:>13.1f} {b:>17.1f} {b - a:>14.1f}")


if __name__ == "__main__":
    main()
