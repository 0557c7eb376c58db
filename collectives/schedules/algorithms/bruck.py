"""Bruck all-gather and its mirror, Bruck reduce-scatter: ceil(log2 p) steps for any p,
one message each way per step.

Rank r keeps the blocks r, r+1, ..., r+p-1 (mod p) back to back in scratch, in that
rotated order. At step k (distance d = 2^k) it sends its first min(d, p-d) blocks to
rank r-d and receives as many from rank r+d, appended after the d it holds. No
remainder handling is needed: the last step just sends fewer than d blocks. A final
local rotation copies the blocks to their layout positions (two copies for a
contiguous layout or single-chunk blocks; for multi-chunk blocks one copy per chunk
or per block, whichever is fewer; the row count does not depend on the rank).

The reduce-scatter runs the same dissemination pattern backwards. A local rotation
first copies the input into scratch in the same rotated order (position j holds this
rank's contributions to block r+j). Then, for the distances of the all-gather in reverse
order (the largest first), rank r sends the partial sums at positions d .. d+n-1 (blocks
r+d .. r+d+n-1) to rank r+d and receives as many from rank r-d, which it adds into its
positions 0 .. n-1: the same blocks, so the reduction is element for element. After the
step with distance d only positions 0 .. d-1 are still needed; after d = 1 position 0
is block r, summed over all ranks (the last step reduces straight into the result).
Each contribution travels the reverse of the all-gather's path, so it is added exactly
once. Remainder: as in the all-gather, the first (largest) distance moves only p - d
blocks; nothing else changes.
"""

from __future__ import annotations

import numpy as np

from collectives.schedules.algorithms import register
from collectives.schedules.rows import SCRATCH, Block, ContiguousLayout, Layout, Schedule, StepList, StridedLayout


@register("bruck")
class Bruck:
    @staticmethod
    def allgather(nranks: int, rank: int, layout: Layout, scratch_base: int = 0) -> Schedule:
        """ceil(log2 p) communication steps, then the local rotation rows."""
        steps = StepList()
        if nranks == 1:
            return steps.build()
        order = (rank + np.arange(nranks)) % nranks
        offsets = _offsets(layout, order, scratch_base)

        def held(position: int, number: int) -> Block:
            """Scratch blocks at rotated positions position .. position+number-1."""
            return Block(SCRATCH, offsets[position], offsets[position + number] - offsets[position])

        own = layout.block(rank)
        distance = 1
        while distance < nranks:
            number = min(distance, nranks - distance)
            to, source = (rank - distance) % nranks, (rank + distance) % nranks
            if distance == 1:  # send the own block from its place; keep a copy for later steps
                steps.step(send=(to, own), recv=(source, held(1, 1)),
                           copy=(own, held(0, 1)) if nranks > 2 else None)
            else:
                steps.step(send=(to, held(0, number)), recv=(source, held(distance, number)))
            distance *= 2
        # Position j holds block rank + j: positions 1 .. p-rank-1 go to blocks rank+1 .. p-1,
        # positions p-rank .. p-1 to blocks 0 .. rank-1 (the own block is already in place).
        runs = [(1, rank + 1, nranks - rank - 1), (nranks - rank, 0, rank)]
        for src, dst in _rotation(layout, nranks, runs, offsets):
            if src is None or dst.total == 0:
                steps.step()
            else:
                steps.step(copy=(src, dst))
        return steps.build()

    @staticmethod
    def reduce_scatter(nranks: int, rank: int, source: Layout, result: Block, scratch_base: int = 0) -> Schedule:
        """The rotation rows, then ceil(log2 p) communication steps (module docstring).

        Scratch: the p rotated blocks from ``scratch_base``, then one landing area as long as
        the largest message. ``source`` is only read in the rotation and ``result`` written in
        the last row, so either may be the receive buffer and they may overlap."""
        steps = StepList()
        if nranks == 1:
            if source.block(0) != result:
                steps.step(copy=(source.block(0), result))
            return steps.build()
        order = (rank + np.arange(nranks)) % nranks
        offsets = _offsets(source, order, scratch_base)

        def held(position: int, number: int) -> Block:
            return Block(SCRATCH, offsets[position], offsets[position + number] - offsets[position])

        # Positions 0 .. p-rank-1 are blocks rank .. p-1, positions p-rank .. p-1 blocks 0 .. rank-1.
        runs = [(0, rank, nranks - rank), (nranks - rank, 0, rank)]
        for scratch, block in _rotation(source, nranks, runs, offsets):
            if scratch is None or block.total == 0:
                steps.step()
            else:
                steps.step(copy=(block, scratch))
        distances = []
        distance = 1
        while distance < nranks:
            distances.append(distance)
            distance *= 2
        numbers = [min(d, nranks - d) for d in distances]
        landing_base = offsets[-1]  # each step's message is reduced in its own row: one area suffices
        for distance, number in zip(reversed(distances), reversed(numbers), strict=True):
            to, source_rank = (rank + distance) % nranks, (rank - distance) % nranks
            kept = held(0, number)
            landing = Block(SCRATCH, landing_base, kept.total)
            target = result if distance == 1 else kept
            steps.step(send=(to, held(distance, number)), recv=(source_rank, landing),
                       reduce=(landing, kept, target))
        return steps.build()


def _offsets(layout: Layout, order: np.ndarray, base: int) -> list[int]:
    """Where the blocks ``order`` start when held back to back from ``base`` (and where the last ends)."""
    return [base, *(base + np.cumsum(layout.blocks(order).total)).tolist()]


def _rotation(layout: Layout, nranks: int, runs: list[tuple[int, int, int]],
              offsets: list[int]) -> list[tuple[Block | None, Block]]:
    """Copies (scratch -> layout) for runs of (first position, first block, number) of
    blocks held back to back in scratch; as many rows on every rank (None: no copy)."""
    empty = (None, Block(SCRATCH, 0, 0))
    copies: list[tuple[Block | None, Block]] = []
    strided = isinstance(layout, StridedLayout) and layout.nchunks > 1
    if isinstance(layout, ContiguousLayout) or (isinstance(layout, StridedLayout) and not strided):
        # Spans of these layouts are block-major, like the scratch.
        for position, first, number in runs:
            if number == 0:
                copies.append(empty)
            else:
                run = layout.span(first, number)
                copies.append((Block(SCRATCH, offsets[position], run.total), run))
        return copies
    if strided and 2 * layout.nchunks < nranks - 1:
        # One copy per chunk index c: chunk c of every block in the run.
        chunk, nchunks = layout.chunk, layout.nchunks
        for position, first, number in runs:
            for c in range(nchunks):
                if number == 0:
                    copies.append(empty)
                    continue
                src = Block(SCRATCH, offsets[position] + c * chunk, chunk, number, nchunks * chunk)
                dst = Block(layout.buf, layout.base + first * layout.block_stride + c * layout.chunk_stride,
                            chunk, number, layout.block_stride)
                copies.append((src, dst))
        return copies
    # One copy per block (any layout).
    for position, first, number in runs:
        for j in range(position, position + number):
            held = Block(SCRATCH, offsets[j], offsets[j + 1] - offsets[j])
            copies.append((held, layout.block(first + j - position)))
    return copies
