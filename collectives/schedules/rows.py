"""Schedules: the steps one rank performs, as an int64 array the executor runs.

Each row, in element units: on communicator ``comm`` (0 the whole one,
1 intra-node, 2 inter-node rail), send a block to ``send_peer`` while receiving
a block from ``recv_peer`` (-1: no message), then optionally copy or reduce
locally: dst = src, or dst = src (op) src2, over ``action_nblocks`` pieces of
``action_count`` elements, each operand with its own stride.

A row with ``post`` 1 leaves its messages in flight: the executor posts them and goes on to the next
row; the next row with ``post`` 0 completes every message in flight (its own too) before its action.
So messages that do not depend on each other go out at once (``direct``: every peer in one step)
while every row stays one matched message pair, and an executor that runs each row to completion
(``post`` ignored) runs the same schedule correctly, only without the overlap. While a message is in
flight nothing else of that rank may write what it sends or touch what it receives (the simulator
checks it); a schedule's last row, and the row before an MPI-library row, complete their messages.

A block is ``count`` elements at ``off``, or ``nblocks`` such pieces ``stride``
apart (a strided block lets a hierarchical phase write straight into the final
positions instead of permuting afterwards). Buffers: SEND, RECV and SCRATCH, a
per-call work area of ``scratch`` elements.

Two rules every generator keeps (the simulator checks both): matching messages
sit at the same row index on both ranks, and every rank of a communicator has
the same number of rows in a phase (idle ranks get empty rows), so phases chained
with ``then`` stay aligned. A local reduce may write over one of its own sources
only element for element (dst == src or dst == src2), never shifted.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

COLUMNS = (
    "comm",
    "send_peer", "send_buf", "send_off", "send_count", "send_nblocks", "send_stride",
    "recv_peer", "recv_buf", "recv_off", "recv_count", "recv_nblocks", "recv_stride",
    "action", "action_nblocks", "action_count",
    "src_buf", "src_off", "src_stride", "src2_buf", "src2_off", "src2_stride",
    "dst_buf", "dst_off", "dst_stride",
    "post",
)
#: the index of each column: the one map every reader of schedule rows uses (simulate, compose,
#: the device executor, the model; cython_ext/executor.pyx declares the same, tests check it)
COLUMN = {name: index for index, name in enumerate(COLUMNS)}
#: 1: this row's messages stay in flight until the next row with 0 (see the module's docstring)
POST = COLUMN["post"]
#: where a row's fields start: a message's six (peer, buf, off, count, nblocks, stride), the local
#: action's three (action, nblocks, count), each operand's three (buf, off, stride: src, src2, dst)
SEND_FIELDS, RECV_FIELDS = COLUMN["send_peer"], COLUMN["recv_peer"]
ACTION_FIELDS = slice(COLUMN["action"], COLUMN["action_count"] + 1)
OPERAND_FIELDS = (COLUMN["src_buf"], COLUMN["src2_buf"], COLUMN["dst_buf"])
#: the columns that are lengths in elements: a schedule for n elements a block is the one for one
#: element a block with these multiplied by n (Schedule.scaled)
LENGTH_COLUMNS = np.array([name.endswith(("_off", "_count", "_stride")) for name in COLUMNS])
SEND, RECV, SCRATCH = 0, 1, 2
BUFFER_NAMES = ("send", "recv", "scratch")
ACT_NONE, ACT_COPY, ACT_REDUCE = 0, 1, 2
#: the MPI library's own collective as one step (a hierarchical phase by ``mpi``, or by a transport
#: that runs it: collectives/executors/compose.py); src/dst are contiguous, ``action_count`` is the
#: per-rank count (the all-reduce's whole count), src_buf -1 = in place; ``action_nblocks`` > 1:
#: the ranks' blocks interleaved (StepList.mpi_collective, library_pieces)
ACT_MPI_ALLGATHER, ACT_MPI_REDUCE_SCATTER, ACT_MPI_ALLREDUCE = 3, 4, 5
COMM_WORLD, COMM_INTRA, COMM_INTER = 0, 1, 2
#: the collective of each library-row action, and back
LIBRARY_ACTIONS = {ACT_MPI_ALLGATHER: "allgather", ACT_MPI_REDUCE_SCATTER: "reduce_scatter",
                   ACT_MPI_ALLREDUCE: "allreduce"}
LIBRARY_ACTION_OF = {collective: action for action, collective in LIBRARY_ACTIONS.items()}


@dataclass(frozen=True)
class Block:
    """``nblocks`` pieces of ``count`` elements, ``stride`` apart, from ``off`` in ``buf``."""

    buf: int
    off: int
    count: int
    nblocks: int = 1
    stride: int = 0

    @property
    def total(self) -> int:
        return self.count * self.nblocks

    @property
    def contiguous(self) -> bool:
        return self.nblocks == 1 or self.stride == self.count

    def pieces(self) -> tuple[int, int, int]:
        """(nblocks, count, stride) with contiguous blocks folded to one piece."""
        if self.contiguous:
            return 1, self.total, self.total
        return self.nblocks, self.count, self.stride

    def shaped_like(self, other: Block) -> tuple[int, int, int]:
        """(nblocks, count, stride) of this block cut into ``other``'s pieces (for local actions)."""
        nblocks, count, _ = other.pieces()
        if self.total != other.total:
            raise ValueError(f"blocks differ in length: {self} vs {other}")
        if nblocks == 1:
            if not self.contiguous:
                return self.nblocks, self.count, self.stride
            return 1, count, count
        if self.contiguous:
            return nblocks, count, count
        if (self.nblocks, self.count) != (nblocks, count):
            raise ValueError(f"strided blocks of different shapes: {self} vs {other}")
        return nblocks, count, self.stride


def library_pieces(row) -> tuple[int, int, int]:
    """(pieces, elements a piece, stride) of a library row's rank blocks (StepList.mpi_collective):
    (1, count, count) when they lie back to back."""
    pieces, count = int(row[COLUMN["action_nblocks"]]), int(row[COLUMN["action_count"]])
    if pieces <= 1:
        return 1, count, count
    side = "src_stride" if int(row[COLUMN["action"]]) == ACT_MPI_REDUCE_SCATTER else "dst_stride"
    return pieces, count // pieces, int(row[COLUMN[side]])


def rank_block_index(off: int, count: int, nranks: int, pieces: int = 1, stride: int = 0) -> np.ndarray:
    """The element indices of the ranks' blocks of a library row's rank-blocked operand, in rank order
    (rank q's block as ``pieces`` pieces of count / pieces, the k-th at q * count / pieces + k * stride)."""
    if pieces <= 1:
        return np.arange(off, off + nranks * count, dtype=np.int64)
    piece = count // pieces
    starts = off + np.arange(nranks)[:, None] * piece + np.arange(pieces)[None, :] * stride
    return (starts[:, :, None] + np.arange(piece)[None, None, :]).reshape(-1)


def contiguous(buf: int, off: int, count: int) -> Block:
    return Block(buf, off, count)


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

    def on(self, comm: int) -> Schedule:
        """The same steps on another communicator (a hierarchical phase)."""
        steps = self.steps.copy()
        steps[:, COLUMN["comm"]] = comm
        return Schedule(steps, self.scratch)

    def __len__(self) -> int:
        return len(self.steps)

    def scaled(self, unit: int) -> Schedule:
        """The schedule of the same shape with every length ``unit`` times as long (the offsets,
        counts and strides, and the scratch; peers, buffers, piece numbers and actions stay)."""
        return Schedule(self.steps * np.where(LENGTH_COLUMNS, unit, 1), self.scratch * unit)


@dataclass(frozen=True)
class Blocks:
    """``Block``'s fields as columns, one block per schedule row (a field may be one number for all
    rows): the operands of rows written at once (``rows``)."""

    buf: np.ndarray | int
    off: np.ndarray | int
    count: np.ndarray | int
    nblocks: np.ndarray | int = 1
    stride: np.ndarray | int = 0

    @classmethod
    def of(cls, block: Block) -> Blocks:
        return cls(block.buf, block.off, block.count, block.nblocks, block.stride)

    def take(self, rows: np.ndarray) -> Blocks:
        return Blocks(*(np.broadcast_to(column, np.shape(self.off))[rows] for column in self.columns()))

    def where(self, mask: np.ndarray, other: Blocks) -> Blocks:
        """These blocks where ``mask``, ``other``'s elsewhere."""
        return Blocks(*(np.where(mask, mine, theirs) for mine, theirs in zip(self.columns(), other.columns(),
                                                                             strict=True)))

    def columns(self) -> tuple:
        return self.buf, self.off, self.count, self.nblocks, self.stride

    @property
    def total(self) -> np.ndarray:
        """Every row's elements (an array as long as ``off``)."""
        return np.broadcast_to(np.multiply(self.count, self.nblocks), np.shape(self.off))

    @property
    def contiguous(self) -> np.ndarray:
        return np.equal(self.nblocks, 1) | np.equal(self.stride, self.count)

    def pieces(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``Block.pieces`` of every row."""
        folded, total = self.contiguous, self.total
        return (np.where(folded, 1, self.nblocks), np.where(folded, total, self.count),
                np.where(folded, total, self.stride))

    def scratch_end(self) -> int:
        """The scratch elements these blocks reach (0 where none is in scratch)."""
        end = np.where(np.greater(self.nblocks, 1), np.add(self.off, np.multiply(np.subtract(self.nblocks, 1),
                                                                                  self.stride)), self.off)
        return int(np.max(np.where(np.equal(self.buf, SCRATCH), end + self.count, 0), initial=0))


def rows(comm: int, send: tuple[int, Blocks], recv: tuple[int, Blocks],
         reduce: tuple[Blocks, Blocks, Blocks] | None = None, post: np.ndarray | int = 0) -> Schedule:
    """Rows that each send to one peer and receive from one (the same peers in every row), and
    reduce ``reduce`` = (src, src2, dst) where given: the rows ``StepList.step`` writes one at a
    time, for generators with O(p) rows (ring), where a row per Python call costs ~14 us.

    StepList's rules, for columns: a message is its block's pieces; a reduce takes its pieces
    from the first non-contiguous operand (``Block.shaped_like``), every operand's stride cut
    to them. ``post``: the rows' post column (one number for all, or one a row)."""
    nrows = len(send[1].off)
    steps = np.zeros((nrows, len(COLUMNS)), dtype=np.int64)
    steps[:, COLUMN["comm"]] = comm
    scratch = 0
    for first, (peer, blocks) in ((SEND_FIELDS, send), (RECV_FIELDS, recv)):
        nblocks, count, stride = blocks.pieces()
        for column, values in enumerate((peer, blocks.buf, blocks.off, count, nblocks, stride), first):
            steps[:, column] = values
        scratch = max(scratch, blocks.scratch_end())
    steps[:, ACTION_FIELDS] = (ACT_NONE, 1, 0)
    steps[:, POST] = post
    if reduce is not None:
        scratch = max(scratch, _reduce_columns(steps, reduce))
    return Schedule(steps, scratch)


def _reduce_columns(steps: np.ndarray, operands: tuple[Blocks, Blocks, Blocks]) -> int:
    """Write the local-action columns (ACTION_FIELDS, OPERAND_FIELDS) of rows that all reduce; the
    scratch they reach."""
    shape = operands[0]
    for candidate in reversed(operands):  # the first non-contiguous operand wins: taken last
        shape = candidate.where(~candidate.contiguous, shape)
    nblocks, count, _ = shape.pieces()
    steps[:, ACTION_FIELDS] = np.column_stack(np.broadcast_arrays(ACT_REDUCE, nblocks, count))
    scratch = 0
    for position, block in enumerate(operands):
        mismatch = np.not_equal(block.total, shape.total) | (~block.contiguous & (
            np.not_equal(block.nblocks, nblocks) | np.not_equal(block.count, count)))
        if np.any(mismatch):
            row = int(np.flatnonzero(np.broadcast_to(mismatch, (len(steps),)))[0])
            raise ValueError(f"row {row}: reduce operand {position} does not match the action's pieces "
                             f"({int(np.broadcast_to(nblocks, (len(steps),))[row])} x "
                             f"{int(np.broadcast_to(count, (len(steps),))[row])})")
        stride = np.where(block.contiguous, count, block.stride)
        for column, values in enumerate((block.buf, block.off, stride), OPERAND_FIELDS[position]):
            steps[:, column] = values
        scratch = max(scratch, block.scratch_end())
    return scratch


def _message(peer: int, block: Block) -> list[int]:
    nblocks, count, stride = block.pieces()
    return [peer, block.buf, block.off, count, nblocks, stride]


class StepList:
    """Builds a schedule row by row."""

    def __init__(self, comm: int = COMM_WORLD) -> None:
        self.comm = comm
        self.rows: list[list[int]] = []
        self.scratch = 0

    def step(
        self,
        send: tuple[int, Block] | None = None,
        recv: tuple[int, Block] | None = None,
        copy: tuple[Block, Block] | None = None,
        reduce: tuple[Block, Block, Block] | None = None,
        post: bool = False,
    ) -> StepList:
        """Append one row. ``send``/``recv`` are (peer, block); ``copy`` is (src, dst);
        ``reduce`` is (src, src2, dst) with dst = src (op) src2, all the same length. ``post``:
        leave the messages in flight until the next row without it (the module's docstring)."""
        row = [self.comm] + [-1, 0, 0, 0, 1, 0] * 2 + [ACT_NONE, 1, 0] + [0, 0, 0] * 3 + [int(post)]
        if send is not None:
            row[SEND_FIELDS : SEND_FIELDS + 6] = _message(*send)
        if recv is not None:
            row[RECV_FIELDS : RECV_FIELDS + 6] = _message(*recv)
        operands = copy or reduce
        if operands:
            shape_source = next((b for b in operands if not b.contiguous), operands[0])
            nblocks, count, _ = shape_source.pieces()
            row[ACTION_FIELDS] = [ACT_COPY if copy else ACT_REDUCE, nblocks, count]
            slots = (operands[0], None, operands[1]) if copy else operands
            for position, block in enumerate(slots):
                if block is not None:
                    _, _, stride = block.shaped_like(shape_source)
                    first = OPERAND_FIELDS[position]
                    row[first : first + 3] = [block.buf, block.off, stride]
        self.rows.append(row)
        for block in [b for pair in (send, recv) if pair for b in pair[1:]] + list(operands or ()):
            if block.buf == SCRATCH:
                end = block.off + (block.nblocks - 1) * block.stride + block.count if block.nblocks > 1 \
                    else block.off + block.count
                self.scratch = max(self.scratch, end)
        return self

    def mpi_collective(self, action: int, src: Block | None, dst: Block, count: int, pieces: int = 1,
                       stride: int = 0) -> StepList:
        """One call of the MPI library's all-gather, reduce-scatter-block or all-reduce on this
        communicator: ``count`` elements per rank (all-reduce: in all), contiguous ``src`` (None: in
        place) and ``dst``.

        ``pieces`` > 1 interleaves the ranks' blocks of the rank-blocked operand (the all-gather's
        ``dst``, the reduce-scatter's ``src``, given from its first element): rank q's block is
        ``pieces`` pieces of count / pieces elements, the k-th at q * count / pieces + k * ``stride``
        (row: ``action_nblocks`` and that operand's stride column). Only a transport that is
        ``strided`` runs such a row (the hierarchy's phases in place, no packing): the MPI library
        would need a datatype per rank block, which its reduce-scatter cannot take."""
        for block in (src, dst):
            if block is not None and not block.contiguous:
                raise ValueError("MPI-library phases take contiguous blocks")
        if pieces > 1 and (action == ACT_MPI_ALLREDUCE or count % pieces or stride < count // pieces):
            raise ValueError(f"no interleaved library row for action {action}, {count} elements per rank "
                             f"in {pieces} pieces {stride} apart")
        if pieces > 1 and action == ACT_MPI_REDUCE_SCATTER and src is None:
            raise ValueError("an interleaved reduce-scatter reads its input in place of nothing: give src")
        interleaved_src = stride if pieces > 1 and action == ACT_MPI_REDUCE_SCATTER else 0
        interleaved_dst = stride if pieces > 1 and action == ACT_MPI_ALLGATHER else 0
        if (interleaved_src and src.buf == SCRATCH) or (interleaved_dst and dst.buf == SCRATCH):
            raise ValueError("an interleaved operand lives in send or recv, not scratch")
        row = [self.comm] + [-1, 0, 0, 0, 1, 0] * 2 + [action, max(pieces, 1), count]
        row += [src.buf, src.off, interleaved_src] if src is not None else [-1, 0, 0]
        row += [0, 0, 0, dst.buf, dst.off, interleaved_dst, 0]
        self.rows.append(row)
        for block in (src, dst):
            if block is not None and block.buf == SCRATCH:
                self.scratch = max(self.scratch, block.off + block.total)
        return self

    def build(self) -> Schedule:
        steps = np.array(self.rows, dtype=np.int64).reshape(-1, len(COLUMNS))
        return Schedule(np.ascontiguousarray(steps), self.scratch)


def overlapped(posted: Schedule, completing: Schedule) -> Schedule:
    """Two schedules' rows side by side, each pair of rows one group of messages in flight together:
    row i of ``posted`` puts its messages in flight (POST), row i of ``completing`` completes them with
    its own, then row i of ``posted``'s local action runs in a row of its own. Three rows a pair on
    every rank, so ranks that ran the two in lockstep still meet at the same rows; neither may hold
    posted or MPI-library rows. The two must touch disjoint elements (the pieces of a pipelined
    hierarchy, collectives/schedules/hier.py): the simulator checks it."""
    for schedule in (posted, completing):
        if len(schedule) and ((schedule.steps[:, POST] != 0).any()
                              or np.isin(schedule.steps[:, COLUMN["action"]], list(LIBRARY_ACTIONS)).any()):
            raise ValueError("overlapped takes schedules of plain rows (no posted rows, no MPI-library rows)")
    nrows = max(len(posted), len(completing))
    empty = StepList().step().build().steps[0]

    def padded(schedule: Schedule) -> np.ndarray:
        rows = np.tile(empty, (nrows, 1))
        rows[: len(schedule)] = schedule.steps
        return rows

    first = padded(posted)
    messages, actions = first.copy(), first.copy()
    messages[:, ACTION_FIELDS.start :] = empty[ACTION_FIELDS.start :]
    messages[:, POST] = (messages[:, SEND_FIELDS] >= 0) | (messages[:, RECV_FIELDS] >= 0)
    actions[:, SEND_FIELDS : ACTION_FIELDS.start] = empty[SEND_FIELDS : ACTION_FIELDS.start]
    steps = np.stack([messages, padded(completing), actions], axis=1).reshape(-1, len(COLUMNS))
    return Schedule(np.ascontiguousarray(steps), max(posted.scratch, completing.scratch))


class ContiguousLayout:
    """Blocks of possibly unequal length, back to back from ``base`` in ``buf``."""

    def __init__(self, buf: int, counts: Sequence[int] | np.ndarray, base: int = 0) -> None:
        self.buf = buf
        self.counts = np.asarray(counts, dtype=np.int64)
        self.ends = np.concatenate([[base], base + np.cumsum(self.counts)])  # ends[i] = start of block i
        self.offsets = self.ends[:-1]

    def block(self, index: int) -> Block:
        return Block(self.buf, int(self.offsets[index]), int(self.counts[index]))

    def span(self, first: int, number: int) -> Block:
        """Blocks first .. first+number-1 (no wrap-around) as one block."""
        return Block(self.buf, int(self.ends[first]), int(self.ends[first + number] - self.ends[first]))

    def blocks(self, indices: np.ndarray) -> Blocks:
        """``block(i)`` for every i of ``indices``, as columns."""
        return Blocks(self.buf, self.offsets[indices], self.counts[indices])


class StridedLayout:
    """Equal blocks; block i starts at base + i*block_stride and is ``nchunks`` chunks
    of ``chunk`` elements, ``chunk_stride`` apart (the hierarchical phases' layouts)."""

    def __init__(self, buf: int, base: int, chunk: int, block_stride: int,
                 nchunks: int = 1, chunk_stride: int = 0) -> None:
        self.buf, self.base, self.chunk = buf, base, chunk
        self.block_stride, self.nchunks, self.chunk_stride = block_stride, nchunks, chunk_stride

    def block(self, index: int) -> Block:
        return Block(self.buf, self.base + index * self.block_stride, self.chunk, self.nchunks, self.chunk_stride)

    def blocks(self, indices: np.ndarray) -> Blocks:
        """``block(i)`` for every i of ``indices``, as columns."""
        offsets = self.base + np.asarray(indices, dtype=np.int64) * self.block_stride
        return Blocks(self.buf, offsets, self.chunk, self.nchunks, self.chunk_stride)

    def span(self, first: int, number: int) -> Block:
        off = self.base + first * self.block_stride
        if self.nchunks == 1:
            if self.block_stride == self.chunk or number == 1:
                return Block(self.buf, off, number * self.chunk)
            return Block(self.buf, off, self.chunk, number, self.block_stride)
        if number == 1:
            return self.block(first)
        if self.block_stride == self.chunk:
            return Block(self.buf, off, number * self.chunk, self.nchunks, self.chunk_stride)
        raise ValueError("this layout's consecutive blocks do not form one strided block")


Layout = ContiguousLayout | StridedLayout
