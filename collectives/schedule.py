"""Schedules: the steps one rank performs, as an int64 array the executor runs.

Each row, in element units: on communicator ``comm`` (0 the whole one,
1 intra-node, 2 inter-node rail), send a block to ``send_peer`` while receiving
a block from ``recv_peer`` (-1: no message), then optionally copy or reduce
locally: dst = src, or dst = src (op) src2, over ``action_nblocks`` pieces of
``action_count`` elements, each operand with its own stride.

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

from dataclasses import dataclass
from itertools import accumulate

import numpy as np

COLUMNS = (
    "comm",
    "send_peer", "send_buf", "send_off", "send_count", "send_nblocks", "send_stride",
    "recv_peer", "recv_buf", "recv_off", "recv_count", "recv_nblocks", "recv_stride",
    "action", "action_nblocks", "action_count",
    "src_buf", "src_off", "src_stride", "src2_buf", "src2_off", "src2_stride",
    "dst_buf", "dst_off", "dst_stride",
)
SEND, RECV, SCRATCH = 0, 1, 2
BUFFER_NAMES = ("send", "recv", "scratch")
ACT_NONE, ACT_COPY, ACT_REDUCE = 0, 1, 2
#: the MPI library's own collective as one step (a hierarchical phase by ``mpi``);
#: src/dst are contiguous, ``action_count`` is the per-rank count, src_buf -1 = in place
ACT_MPI_ALLGATHER, ACT_MPI_REDUCE_SCATTER = 3, 4
COMM_WORLD, COMM_INTRA, COMM_INTER = 0, 1, 2
#: the collective of each library-row action, and back
LIBRARY_ACTIONS = {ACT_MPI_ALLGATHER: "allgather", ACT_MPI_REDUCE_SCATTER: "reduce_scatter"}
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
        steps[:, 0] = comm
        return Schedule(steps, self.scratch)

    def __len__(self) -> int:
        return len(self.steps)


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
    ) -> StepList:
        """Append one row. ``send``/``recv`` are (peer, block); ``copy`` is (src, dst);
        ``reduce`` is (src, src2, dst) with dst = src (op) src2, all the same length."""
        row = [self.comm] + [-1, 0, 0, 0, 1, 0] * 2 + [ACT_NONE, 1, 0] + [0, 0, 0] * 3
        if send is not None:
            row[1:7] = _message(*send)
        if recv is not None:
            row[7:13] = _message(*recv)
        operands = copy or reduce
        if operands:
            shape_source = next((b for b in operands if not b.contiguous), operands[0])
            nblocks, count, _ = shape_source.pieces()
            row[13:16] = [ACT_COPY if copy else ACT_REDUCE, nblocks, count]
            slots = (operands[0], None, operands[1]) if copy else operands
            for position, block in enumerate(slots):
                if block is not None:
                    _, _, stride = block.shaped_like(shape_source)
                    row[16 + 3 * position : 19 + 3 * position] = [block.buf, block.off, stride]
        self.rows.append(row)
        for block in [b for pair in (send, recv) if pair for b in pair[1:]] + list(operands or ()):
            if block.buf == SCRATCH:
                end = block.off + (block.nblocks - 1) * block.stride + block.count if block.nblocks > 1 \
                    else block.off + block.count
                self.scratch = max(self.scratch, end)
        return self

    def mpi_collective(self, action: int, src: Block | None, dst: Block, count: int) -> StepList:
        """One call of the MPI library's all-gather or reduce-scatter-block on this
        communicator: ``count`` elements per rank, contiguous ``src`` (None: in place) and ``dst``."""
        for block in (src, dst):
            if block is not None and not block.contiguous:
                raise ValueError("MPI-library phases take contiguous blocks")
        row = [self.comm] + [-1, 0, 0, 0, 1, 0] * 2 + [action, 1, count]
        row += [src.buf, src.off, 0] if src is not None else [-1, 0, 0]
        row += [0, 0, 0, dst.buf, dst.off, 0]
        self.rows.append(row)
        for block in (src, dst):
            if block is not None and block.buf == SCRATCH:
                self.scratch = max(self.scratch, block.off + block.total)
        return self

    def build(self) -> Schedule:
        steps = np.array(self.rows, dtype=np.int64).reshape(-1, len(COLUMNS))
        return Schedule(np.ascontiguousarray(steps), self.scratch)


class ContiguousLayout:
    """Blocks of possibly unequal length, back to back from ``base`` in ``buf``."""

    def __init__(self, buf: int, counts: tuple[int, ...], base: int = 0) -> None:
        self.buf, self.counts = buf, tuple(counts)
        self.ends = tuple(accumulate(self.counts, initial=base))  # ends[i] = start of block i
        self.offsets = self.ends[:-1]

    def block(self, index: int) -> Block:
        return Block(self.buf, self.offsets[index], self.counts[index])

    def span(self, first: int, number: int) -> Block:
        """Blocks first .. first+number-1 (no wrap-around) as one block."""
        return Block(self.buf, self.ends[first], self.ends[first + number] - self.ends[first])


class StridedLayout:
    """Equal blocks; block i starts at base + i*block_stride and is ``nchunks`` chunks
    of ``chunk`` elements, ``chunk_stride`` apart (the hierarchical phases' layouts)."""

    def __init__(self, buf: int, base: int, chunk: int, block_stride: int,
                 nchunks: int = 1, chunk_stride: int = 0) -> None:
        self.buf, self.base, self.chunk = buf, base, chunk
        self.block_stride, self.nchunks, self.chunk_stride = block_stride, nchunks, chunk_stride

    def block(self, index: int) -> Block:
        return Block(self.buf, self.base + index * self.block_stride, self.chunk, self.nchunks, self.chunk_stride)

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
