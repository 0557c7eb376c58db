"""Schedules: the steps one rank performs, as an int64 array the executor runs.

Each row, in element units: send ``send_count`` elements from
``send_buf[send_off:]`` to ``send_peer`` while receiving ``recv_count`` into
``recv_buf[recv_off:]`` from ``recv_peer`` (a peer of -1 means no message),
then an optional local action: copy src -> dst, or reduce dst = src (op) src2.
Buffers are SEND, RECV and SCRATCH (a per-call work area of ``scratch``
elements). Matching messages sit at the same row index on both ranks, which
is what the simulator checks.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

COLUMNS = (
    "send_peer", "send_buf", "send_off", "send_count",
    "recv_peer", "recv_buf", "recv_off", "recv_count",
    "action", "src_buf", "src_off", "src2_buf", "src2_off", "dst_buf", "dst_off", "action_count",
)
SEND, RECV, SCRATCH = 0, 1, 2
BUFFER_NAMES = ("send", "recv", "scratch")
ACT_NONE, ACT_COPY, ACT_REDUCE = 0, 1, 2

Block = tuple[int, int, int]  # (buffer, offset, count)


@dataclass(frozen=True)
class Schedule:
    """One rank's steps plus the scratch elements they need."""

    steps: np.ndarray
    scratch: int = 0

    def __post_init__(self) -> None:
        self.steps.setflags(write=False)

    def then(self, other: Schedule) -> Schedule:
        """Run ``self`` then ``other`` on the same buffers (e.g. reduce-scatter + all-gather)."""
        return Schedule(np.concatenate([self.steps, other.steps]), max(self.scratch, other.scratch))

    def __len__(self) -> int:
        return len(self.steps)


class StepList:
    """Builds a schedule row by row."""

    def __init__(self) -> None:
        self.rows: list[list[int]] = []

    def step(
        self,
        send: tuple[int, Block] | None = None,
        recv: tuple[int, Block] | None = None,
        copy: tuple[Block, Block] | None = None,
        reduce: tuple[Block, Block, Block] | None = None,
    ) -> StepList:
        """Append one row. ``send``/``recv`` are (peer, block); ``copy`` is (src, dst);
        ``reduce`` is (src, src2, dst) with dst = src (op) src2 over src's count."""
        row = [-1, 0, 0, 0, -1, 0, 0, 0, ACT_NONE, 0, 0, 0, 0, 0, 0, 0]
        if send is not None:
            peer, (buf, off, count) = send
            row[0:4] = [peer, buf, off, count]
        if recv is not None:
            peer, (buf, off, count) = recv
            row[4:8] = [peer, buf, off, count]
        if copy is not None:
            (sbuf, soff, count), (dbuf, doff, _) = copy
            row[8:16] = [ACT_COPY, sbuf, soff, 0, 0, dbuf, doff, count]
        elif reduce is not None:
            (sbuf, soff, count), (s2buf, s2off, _), (dbuf, doff, _) = reduce
            row[8:16] = [ACT_REDUCE, sbuf, soff, s2buf, s2off, dbuf, doff, count]
        self.rows.append(row)
        return self

    def build(self, scratch: int = 0) -> Schedule:
        steps = np.array(self.rows, dtype=np.int64).reshape(-1, len(COLUMNS))
        return Schedule(np.ascontiguousarray(steps), scratch)


def displacements(counts: tuple[int, ...]) -> tuple[int, ...]:
    out, offset = [], 0
    for count in counts:
        out.append(offset)
        offset += count
    return tuple(out)
