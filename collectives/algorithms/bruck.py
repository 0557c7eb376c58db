"""Bruck all-gather: ceil(log2 p) steps for any p, one message each way per step.

Rank r keeps the blocks r, r+1, ..., r+p-1 (mod p) back to back in scratch, in that
rotated order. At step k (distance d = 2^k) it sends its first min(d, p-d) blocks to
rank r-d and receives as many from rank r+d, appended after the d it holds. No
remainder handling is needed: the last step just sends fewer than d blocks. A final
local rotation copies the blocks to their layout positions (two copies for a
contiguous layout or single-chunk blocks; for multi-chunk blocks one copy per chunk
or per block, whichever is fewer; the row count does not depend on the rank).
"""

from __future__ import annotations

from itertools import accumulate

from collectives.algorithms import register
from collectives.schedule import SCRATCH, Block, ContiguousLayout, Layout, Schedule, StepList, StridedLayout


@register("bruck")
class Bruck:
    @staticmethod
    def allgather(nranks: int, rank: int, layout: Layout, scratch_base: int = 0) -> Schedule:
        """ceil(log2 p) communication steps, then the local rotation rows."""
        steps = StepList()
        if nranks == 1:
            return steps.build()
        order = [(rank + j) % nranks for j in range(nranks)]
        offsets = list(accumulate((layout.block(i).total for i in order), initial=scratch_base))

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
