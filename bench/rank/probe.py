"""The machine-speed probe: a fixed reference measured next to every cell of a launch.

Three references that no change of this project touches: the MPI library's barrier, a fixed
8-byte all-reduce of the MPI library (the 2-rank case is a ping-pong: a small message there and
back) and a fixed 1 MiB memcpy. Each is timed a few times right after each cell (the same timing
loop, max over ranks) and the medians go into the cell's row (``probe_barrier_us``,
``probe_us``, ``probe_memcpy_us``). The gate can then judge a cell relative to the probe that
ran beside it (``gate --normalise probe``) and says "the whole machine got slower" once instead
of flagging hundreds of cells.
"""

from __future__ import annotations

import time

import numpy as np

from collectives.call import CallSpec
from collectives.impls import get
from collectives.memory.context import HOST

#: timed iterations of each reference per cell: cheap (~10 us quiet), enough for a median
PROBE_ITERS = 9
MEMCPY_BYTES = 1 << 20


class Probe:
    """Built once per launch on every rank; ``measure()`` is collective."""

    def __init__(self, topo) -> None:
        self.comm = topo.comm
        call = CallSpec("allreduce", self.comm.size, 2, "float32", "sum", False, None, None, None, 1)
        implementation = get("mpi")
        self.send = np.ones(2, dtype=np.float32)
        self.recv = np.zeros(2, dtype=np.float32)
        self.op = HOST.timed(self.comm, implementation.build(topo, call, self.send, self.recv, HOST))
        self.source = np.ones(MEMCPY_BYTES // 8, dtype=np.float64)
        self.target = np.empty_like(self.source)

    def measure(self) -> dict:
        from cython_ext.timing import time_op
        from mpi4py import MPI

        small = float(np.median(time_op(self.op, self.comm, "sync", 1, PROBE_ITERS, PROBE_ITERS, 0.0))) * 1e6
        barrier = []
        for _ in range(PROBE_ITERS):
            start = MPI.Wtime()
            self.comm.Barrier()
            barrier.append(MPI.Wtime() - start)
        copies = []
        for _ in range(3):
            start = time.perf_counter()
            np.copyto(self.target, self.source)
            copies.append(time.perf_counter() - start)
        local = np.array([np.median(barrier) * 1e6, np.median(copies) * 1e6])
        self.comm.Allreduce(MPI.IN_PLACE, local, op=MPI.MAX)
        return {"probe_us": small, "probe_barrier_us": float(local[0]), "probe_memcpy_us": float(local[1])}
