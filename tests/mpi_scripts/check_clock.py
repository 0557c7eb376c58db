"""Synchronised clocks under a synthetic skew (PCCL_BENCH_FAKE_CLOCK): every rank's view of the
common time must match rank 0's real clock, the drift must be found, and the window timing mode
must start the ranks together.

    PCCL_BENCH_FAKE_CLOCK=1:20000:40,... mpiexec -n N python check_clock.py

The ranks of one machine share MPI_Wtime, so the truth is known: the common time is rank 0's
clock, MPI_Wtime() (rank 0 is given no skew). Prints one JSON line per rank.
"""

from __future__ import annotations

import json
import os
import time

import mpi4py

mpi4py.rc.thread_level = "single"
from cython_ext.clock import SyncedClock, fake_skew  # noqa: E402
from cython_ext.timing import measure  # noqa: E402
from mpi4py import MPI  # noqa: E402

from collectives.call import CallSpec  # noqa: E402
from collectives.impls import get  # noqa: E402
from collectives.schedules.topology import topology  # noqa: E402
from collectives.spec import make_buffers  # noqa: E402
from collectives.timing_plan import TimingPlan  # noqa: E402


def main() -> None:
    comm = MPI.COMM_WORLD
    fake_offset, fake_drift = fake_skew(os.environ.get("PCCL_BENCH_FAKE_CLOCK", ""), comm.rank)
    clock = SyncedClock(fake_offset, fake_drift)
    errors, bounds, syncs = [], [], []
    for _ in range(21):  # syncs over two seconds: the drift is fitted
        comm.Barrier()
        before = clock.true_now()
        bounds.append(clock.sync(comm))
        after = clock.true_now()
        # right after a sync: the common time's error is the error of the offset just measured (its
        # drift term is ppm x the sync's length); signed, so that the test can say what the fit of
        # those offsets must have found, whatever the load made them
        error = clock.now() - clock.true_now()
        errors.append(abs(error))
        syncs.append({"at_s": 0.5 * (before + after), "took_s": after - before, "error_s": error,
                      "bound_s": bounds[-1], "drift": clock.drift})
        time.sleep(0.1)
    drift = clock.drift  # fitted from the syncs above (the cell below syncs again)
    call = CallSpec("allreduce", comm.size, 16)
    send, recv = make_buffers(call, comm.rank)
    op = get("mpi").build(topology(comm), call, send, recv)
    (samples, info), = measure(op, comm, TimingPlan(mode="window", warmup=5, iters=60, min_iters=20, budget_s=0.0),
                               clock)
    print(json.dumps({"rank": comm.rank, "fake_offset_s": fake_offset, "fake_drift": fake_drift,
                      "worst_error_s": max(errors), "last_error_s": errors[-1], "bound_s": max(bounds),
                      "drift": drift, "syncs": syncs, "samples": len(samples), "info": info}), flush=True)


if __name__ == "__main__":
    main()
