"""Run every rank's schedule in numpy, no MPI: a fast, exact check of an algorithm."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from collectives.schedules.rows import (
    ACT_COPY,
    ACT_MPI_ALLGATHER,
    ACT_MPI_ALLREDUCE,
    ACT_MPI_REDUCE_SCATTER,
    ACT_REDUCE,
    LIBRARY_ACTIONS,
    RECV,
    SCRATCH,
    SEND,
    Schedule,
    library_pieces,
    rank_block_index,
)
from collectives.schedules.rows import COLUMN as C

REDUCERS: dict[str, Callable[[np.ndarray, np.ndarray], np.ndarray]] = {
    "sum": np.add, "prod": np.multiply, "min": np.minimum, "max": np.maximum,
}
#: (comm index, world rank) -> world ranks of that communicator, in its rank order
Groups = Callable[[int, int], list[int]]


class ScheduleMismatch(AssertionError):
    """Two ranks disagree about a message (peer, step or length), or a rank touches what a message
    of its own still in flight (rows.POST) sends or receives."""


def _indices(off: int, count: int, nblocks: int, stride: int) -> slice | np.ndarray:
    """Where ``nblocks`` blocks of ``count`` elements, ``stride`` apart, lie: a slice when they touch
    (most rows: indexing by a slice costs a fraction of an index array, and the tests simulate
    millions of rows)."""
    if nblocks == 1 or stride == count:
        return slice(off, off + nblocks * count)
    return (off + np.arange(nblocks)[:, None] * stride + np.arange(count)[None, :]).reshape(-1)


def _length(index: slice | np.ndarray) -> int:
    return index.stop - index.start if isinstance(index, slice) else len(index)


def _within(buffer: np.ndarray, index: slice | np.ndarray) -> slice | np.ndarray:
    """``index``, refused as an index array would be where it leaves ``buffer`` (a slice would be cut short)."""
    if isinstance(index, slice) and (index.start < 0 or index.stop > len(buffer)):
        raise IndexError(f"elements {index.start}..{index.stop} of a buffer of {len(buffer)}")
    return index


#: each block's five columns in the row, in _block's order
_BLOCK_COLUMNS = {prefix: tuple(C[f"{prefix}_{name}"] for name in ("buf", "off", "count", "nblocks", "stride"))
                  for prefix in ("send", "recv")}
_OPERAND_COLUMNS = {name: tuple(C[f"{name}_{part}"] for part in ("buf", "off", "stride"))
                    for name in ("src", "src2", "dst")}


def _block(row: list[int], prefix: str) -> tuple[int, slice | np.ndarray]:
    buf, off, count, nblocks, stride = (row[column] for column in _BLOCK_COLUMNS[prefix])
    return buf, _indices(off, count, nblocks, stride)


def simulate(
    schedules: list[Schedule], sendbufs: list[np.ndarray], recvbufs: list[np.ndarray], op: str = "sum",
    groups: Groups | None = None,
) -> list[np.ndarray]:
    """Execute ``schedules[r]`` for every rank r in lockstep; returns the receive buffers."""
    nranks = len(schedules)
    everyone = list(range(nranks))
    groups = groups or (lambda comm, rank: everyone)
    reducer = REDUCERS[op]
    dtype = recvbufs[0].dtype
    buffers = [
        {SEND: sendbufs[r], RECV: recvbufs[r], SCRATCH: np.zeros(schedules[r].scratch, dtype)}
        for r in range(nranks)
    ]
    steps = [s.steps.tolist() for s in schedules]  # Python ints: the loop below reads every field of every row
    nsteps = max((len(s) for s in steps), default=0)
    in_flight = [_InFlight() for _ in range(nranks)]
    for k in range(nsteps):
        rows = [s[k] if k < len(s) else None for s in steps]
        for r, row in enumerate(rows):
            if row is not None:
                in_flight[r].check(row, buffers[r], f"step {k}: rank {r}")
        outbox = {}
        for r, row in enumerate(rows):
            if row is not None and row[C["send_peer"]] >= 0:
                peer = groups(row[C["comm"]], r)[row[C["send_peer"]]]
                buf, index = _block(row, "send")
                outbox[(r, peer)] = buffers[r][buf][_within(buffers[r][buf], index)].copy()
        _native_collectives(rows, buffers, groups, reducer)
        for r, row in enumerate(rows):
            if row is None:
                continue
            if row[C["recv_peer"]] >= 0:
                peer = groups(row[C["comm"]], r)[row[C["recv_peer"]]]
                message = outbox.pop((peer, r), None)
                if message is None:
                    raise ScheduleMismatch(f"step {k}: rank {r} receives from {peer}, which sends nothing to it")
                buf, index = _block(row, "recv")
                if len(message) != _length(index):
                    raise ScheduleMismatch(
                        f"step {k}: rank {r} expects {_length(index)} from {peer}, got {len(message)}")
                buffers[r][buf][_within(buffers[r][buf], index)] = message
            _act(row, buffers[r], reducer)
        if outbox:
            (src, dst), _ = next(iter(outbox.items()))
            raise ScheduleMismatch(f"step {k}: rank {src} sends to {dst}, which does not receive from it")
    for r, flight in enumerate(in_flight):
        if flight.masks:
            raise ScheduleMismatch(f"rank {r}: the schedule ends with messages in flight (its last row is posted)")
    return recvbufs


class _InFlight:
    """One rank's messages posted and not yet completed (rows.POST), as masks over its buffers: what
    they send and what they receive. The simulator moves every message at its row; the rule checked
    here is what makes that the result of any timing the executor's nonblocking messages take."""

    def __init__(self) -> None:
        self.masks: dict[tuple[str, int], np.ndarray] = {}  # (send | recv, buffer) -> elements

    def _touches(self, kind: str, buf: int, index, buffers: dict) -> bool:
        mask = self.masks.get((kind, buf))
        return mask is not None and bool(mask[_within(buffers[buf], index)].any())

    def _mark(self, kind: str, buf: int, index, buffers: dict) -> None:
        mask = self.masks.setdefault((kind, buf), np.zeros(len(buffers[buf]), dtype=bool))
        mask[_within(buffers[buf], index)] = True

    def check(self, row: list[int], buffers: dict, where: str) -> None:
        if int(row[C["action"]]) in LIBRARY_ACTIONS and self.masks:
            raise ScheduleMismatch(f"{where}: an MPI-library row while messages are in flight")
        posted = row[C["post"]] == 1
        if not (self.masks or posted):
            return
        for kind in ("send", "recv"):
            if row[C[f"{kind}_peer"]] < 0:
                continue
            buf, index = _block(row, kind)
            against = ("recv",) if kind == "send" else ("send", "recv")
            if any(self._touches(other, buf, index, buffers) for other in against):
                raise ScheduleMismatch(f"{where}: its {kind} touches what a message in flight "
                                       f"{'receives' if kind == 'send' else 'sends or receives'}")
            self._mark(kind, buf, index, buffers)
        if posted and row[C["action"]] in (ACT_COPY, ACT_REDUCE):  # runs while this row's messages fly
            nblocks, count = row[C["action_nblocks"]], row[C["action_count"]]
            operands = ("src", "dst") if row[C["action"]] == ACT_COPY else ("src", "src2", "dst")
            for name in operands:
                buf, off, stride = (row[column] for column in _OPERAND_COLUMNS[name])
                index = _indices(off, count, nblocks, stride)
                against = ("send", "recv") if name == "dst" else ("recv",)
                if any(self._touches(other, buf, index, buffers) for other in against):
                    raise ScheduleMismatch(f"{where}: its action's {name} touches a message in flight")
        if not posted:
            self.masks.clear()


def _native_collectives(rows: list, buffers: list[dict], groups: Groups, reducer) -> None:
    """Steps that call the MPI library's collective: computed from all members' buffers (the ranks'
    blocks interleaved where the row says so: rows.library_pieces)."""
    native = {r: row for r, row in enumerate(rows) if row is not None and int(row[C["action"]]) in LIBRARY_ACTIONS}
    results = {}
    for r, row in native.items():
        members = groups(int(row[C["comm"]]), r)
        count, action = int(row[C["action_count"]]), int(row[C["action"]])
        pieces, _, stride = library_pieces(row)
        inputs = []
        for position, m in enumerate(members):
            other = native.get(m)
            if other is None or int(other[C["action"]]) != action:
                raise ScheduleMismatch(f"rank {m} does not join the MPI collective of rank {r}")
            buf, off = int(other[C["src_buf"]]), int(other[C["src_off"]])
            if buf < 0:  # in place: the input is in dst (the all-gather's at its own position)
                buf, off = int(other[C["dst_buf"]]), int(other[C["dst_off"]])
                if action == ACT_MPI_ALLGATHER:
                    index = rank_block_index(off, count, len(members), pieces, stride)
                    inputs.append(buffers[m][buf][index[position * count : (position + 1) * count]].copy())
                    continue
            if action == ACT_MPI_REDUCE_SCATTER:
                index = rank_block_index(off, count, len(members), pieces, stride)
            else:
                index = np.arange(off, off + count)
            inputs.append(buffers[m][buf][index].copy())
        if action == ACT_MPI_ALLGATHER:
            results[r] = (np.concatenate(inputs) if inputs else np.empty(0), len(members))
        else:
            total = inputs[0]
            for other in inputs[1:]:
                total = reducer(total, other)
            mine = members.index(r)
            whole = action == ACT_MPI_ALLREDUCE
            results[r] = (total if whole else total[mine * count : (mine + 1) * count], len(members))
    for r, (data, nmembers) in results.items():
        row = native[r]
        buf, off = int(row[C["dst_buf"]]), int(row[C["dst_off"]])
        if int(row[C["action"]]) == ACT_MPI_ALLGATHER:
            pieces, _, stride = library_pieces(row)
            count = int(row[C["action_count"]])
            buffers[r][buf][rank_block_index(off, count, nmembers, pieces, stride)] = data
        else:
            buffers[r][buf][off : off + len(data)] = data


def _act(row: list[int], buffers: dict, reducer) -> None:
    action = row[C["action"]]
    if action not in (ACT_COPY, ACT_REDUCE):
        return
    nblocks, count = row[C["action_nblocks"]], row[C["action_count"]]

    def operand(name: str) -> tuple[np.ndarray, slice | np.ndarray]:
        buf, off, stride = (row[column] for column in _OPERAND_COLUMNS[name])
        return buffers[buf], _within(buffers[buf], _indices(off, count, nblocks, stride))

    src, src_index = operand("src")
    dst, dst_index = operand("dst")
    if action == ACT_COPY:
        dst[dst_index] = src[src_index]
    else:
        src2, src2_index = operand("src2")
        dst[dst_index] = reducer(src[src_index], src2[src2_index])
