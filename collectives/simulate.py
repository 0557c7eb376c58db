"""Run every rank's schedule in numpy, no MPI: a fast, exact check of an algorithm."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from collectives.schedule import ACT_COPY, ACT_REDUCE, RECV, SCRATCH, SEND, Schedule

REDUCERS: dict[str, Callable[[np.ndarray, np.ndarray], np.ndarray]] = {
    "sum": np.add, "prod": np.multiply, "min": np.minimum, "max": np.maximum,
}


class ScheduleMismatch(AssertionError):
    """Two ranks disagree about a message (peer, step or length)."""


def simulate(
    schedules: list[Schedule], sendbufs: list[np.ndarray], recvbufs: list[np.ndarray], op: str = "sum"
) -> list[np.ndarray]:
    """Execute ``schedules[r]`` for every rank r in lockstep; returns the receive buffers."""
    nranks = len(schedules)
    reducer = REDUCERS[op]
    dtype = recvbufs[0].dtype
    buffers = [
        {SEND: sendbufs[r], RECV: recvbufs[r], SCRATCH: np.zeros(schedules[r].scratch, dtype)}
        for r in range(nranks)
    ]
    nsteps = max((len(s) for s in schedules), default=0)
    for k in range(nsteps):
        rows = [s.steps[k] if k < len(s) else None for s in schedules]
        outbox = {}
        for r, row in enumerate(rows):
            if row is not None and row[0] >= 0:
                buf, off, count = row[1:4]
                outbox[(r, int(row[0]))] = buffers[r][buf][off : off + count].copy()
        for r, row in enumerate(rows):
            if row is None:
                continue
            if row[4] >= 0:
                peer = int(row[4])
                message = outbox.pop((peer, r), None)
                if message is None:
                    raise ScheduleMismatch(f"step {k}: rank {r} receives from {peer}, which sends nothing to it")
                buf, off, count = row[5:8]
                if len(message) != count:
                    raise ScheduleMismatch(f"step {k}: rank {r} expects {count} from {peer}, got {len(message)}")
                buffers[r][buf][off : off + count] = message
            action, sbuf, soff, s2buf, s2off, dbuf, doff, count = (int(x) for x in row[8:16])
            if action == ACT_COPY:
                buffers[r][dbuf][doff : doff + count] = buffers[r][sbuf][soff : soff + count]
            elif action == ACT_REDUCE:
                a = buffers[r][sbuf][soff : soff + count]
                b = buffers[r][s2buf][s2off : s2off + count]
                buffers[r][dbuf][doff : doff + count] = reducer(a, b)
        if outbox:
            (src, dst), _ = next(iter(outbox.items()))
            raise ScheduleMismatch(f"step {k}: rank {src} sends to {dst}, which does not receive from it")
    return recvbufs
