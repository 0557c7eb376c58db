"""Recursive doubling all-gather (``rd``) and recursive halving reduce-scatter (``rh``).

p a power of two: log2(p) steps, one message each way per step, partner rank XOR d.
Doubling uses d = 1, 2, 4 ... and sends the run of blocks gathered so far; halving
uses d = p/2, p/4 ... 1 and sends the partial sums of the half of its current window
that the partner keeps, so the result ends in natural order (rank i holds block i).

Any other p folds to P = 2^floor(log2 p) ranks (as MPICH does). With r = p - P, the
ranks 2i and 2i+1 (i < r) form pairs whose odd member, the *extra* rank, sits out the
recursive steps. The other P ranks run the power-of-two algorithm as virtual ranks
(virtual v is rank 2v for v < r, rank v + r above), and virtual block v stands for the
real blocks f(v) .. f(v+1)-1 with f(v) = 2v for v <= r, v + r above. A run of virtual
blocks is therefore a run of real blocks, and every recursive step stays one message.

- ``rd``: first step, each extra rank sends its block to its partner; then
  floor(log2 p) doubling steps; last step, each partner sends all p blocks (one
  message; the extra rank's own block comes back unchanged) to its extra rank.
- ``rh``: first step, each extra rank sends its whole input to its partner, which adds
  it to its own; then floor(log2 p) halving steps; last step, each partner sends the
  extra rank its finished block.

So p not a power of two costs floor(log2 p) + 2 steps. Ranks idle in a step get an
empty row, so every rank has the same number of rows and matching messages share a row.
"""

from __future__ import annotations

from itertools import accumulate

import numpy as np

from collectives.schedules.algorithms import register
from collectives.schedules.rows import SCRATCH, Block, ContiguousLayout, Layout, Schedule, StepList, StridedLayout


class _Fold:
    """The power-of-two core of ``nranks`` ranks (see the module docstring)."""

    def __init__(self, nranks: int) -> None:
        self.size = 1 << (nranks.bit_length() - 1)
        self.extra = nranks - self.size

    def virtual(self, rank: int) -> int | None:
        """Virtual rank of ``rank``; None for an extra rank."""
        if rank >= 2 * self.extra:
            return rank - self.extra
        return None if rank % 2 else rank // 2

    def real(self, virtual: int) -> int:
        return 2 * virtual if virtual < self.extra else virtual + self.extra

    def blocks(self, first: int, number: int) -> tuple[int, int]:
        """(first, number) of the real blocks that virtual blocks first .. first+number-1 stand for."""
        start = self.first_block(first)
        return start, self.first_block(first + number) - start

    def first_block(self, virtual: int) -> int:
        return 2 * virtual if virtual <= self.extra else virtual + self.extra

    def doublings(self) -> list[int]:
        """The partner distances of recursive doubling among the core ranks: 1, 2, 4 ... < size."""
        return [1 << k for k in range(self.size.bit_length() - 1)]

    def take_in(self, steps: StepList, rank: int, sent: Block, received: Block | None,
                reduce: tuple[Block, Block, Block] | None = None, core_copy: tuple[Block, Block] | None = None) -> None:
        """The fold's first row: each extra rank sends ``sent`` to its partner, which receives it as
        ``received`` (and reduces it in: ``reduce``); ranks without a partner copy ``core_copy`` or idle."""
        role = self.pair(rank)
        if role == "extra":
            steps.step(send=(rank - 1, sent))
        elif role == "partner":
            steps.step(recv=(rank + 1, received), reduce=reduce)
        elif core_copy is not None:
            steps.step(copy=core_copy)
        else:
            steps.step()

    def hand_back(self, steps: StepList, rank: int, block: Block) -> None:
        """The fold's last row: each partner sends ``block`` to its extra rank (others idle)."""
        if not self.extra:
            return
        role = self.pair(rank)
        if role == "extra":
            steps.step(recv=(rank - 1, block))
        elif role == "partner":
            steps.step(send=(rank + 1, block))
        else:
            steps.step()

    def pair(self, rank: int) -> str:
        """'extra', 'partner' (of rank + 1) or 'core' (no partner)."""
        if rank >= 2 * self.extra:
            return "core"
        return "extra" if rank % 2 else "partner"


class _Run:
    """Blocks of given lengths back to back (a ContiguousLayout with O(1) spans)."""

    def __init__(self, buf: int, counts: list[int], base: int) -> None:
        self.buf = buf
        self.offsets = list(accumulate(counts, initial=base))

    def block(self, index: int) -> Block:
        return self.span(index, 1)

    def span(self, first: int, number: int) -> Block:
        return Block(self.buf, self.offsets[first], self.offsets[first + number] - self.offsets[first])


def packed(layout: Layout, first: int, number: int, buf: int, base: int) -> Layout | _Run:
    """A layout for blocks first .. first+number-1 of ``layout`` stored back to back from
    ``base`` in ``buf``, in the element order of ``layout.span(first, number)``: its
    spans match the same spans of ``layout`` element for element."""
    if isinstance(layout, ContiguousLayout):
        return _Run(buf, layout.blocks(np.arange(first, first + number)).total.tolist(), base)
    if isinstance(layout, StridedLayout):
        if layout.nchunks == 1:
            return StridedLayout(buf, base, layout.chunk, layout.chunk)
        # A span of several blocks is chunk-major: chunk c of every block, then chunk c+1.
        return StridedLayout(buf, base, layout.chunk, layout.chunk, layout.nchunks, number * layout.chunk)
    raise TypeError(f"no packed form of {type(layout).__name__}")


def _halving_plan(fold: _Fold, virtual: int | None) -> list[tuple[int, tuple[int, int], tuple[int, int]]]:
    """The halving steps of virtual rank ``virtual`` as (peer, sent run, kept run) in real blocks."""
    plan = []
    distance = fold.size // 2
    while virtual is not None and distance >= 1:
        low = virtual & ~(2 * distance - 1)
        kept, sent = (low + distance, low) if virtual & distance else (low, low + distance)
        plan.append((fold.real(virtual ^ distance), fold.blocks(sent, distance), fold.blocks(kept, distance)))
        distance //= 2
    return plan


@register("rd")
class RecursiveDoubling:
    #: its messages are runs of consecutive blocks (layout.span): a layout whose blocks are each cut
    #: into pieces (a pipelined hierarchy's intra phase) has no such run as one strided block
    sends_spans = True

    @staticmethod
    def allgather(nranks: int, rank: int, layout: Layout, scratch_base: int = 0) -> Schedule:
        """log2(p) steps for a power of two, else floor(log2 p) + 2 (fold; module docstring).

        Messages are ``layout.span`` runs received straight into place (no scratch)."""
        steps = StepList()
        fold = _Fold(nranks)
        virtual = fold.virtual(rank)
        if fold.extra:
            partner = fold.pair(rank) == "partner"  # only a partner has a rank + 1 to receive from
            fold.take_in(steps, rank, layout.block(rank), layout.block(rank + 1) if partner else None)
        for distance in fold.doublings():
            if virtual is None:
                steps.step()
            else:
                mine = virtual & ~(distance - 1)
                peer = fold.real(virtual ^ distance)
                steps.step(send=(peer, layout.span(*fold.blocks(mine, distance))),
                           recv=(peer, layout.span(*fold.blocks(mine ^ distance, distance))))
        fold.hand_back(steps, rank, layout.span(0, nranks))
        return steps.build()


@register("rh")
class RecursiveHalving:
    sends_spans = True  # as rd's

    @staticmethod
    def reduce_scatter(nranks: int, rank: int, source: Layout, result: Block,
                       scratch_base: int = 0) -> Schedule:
        """log2(p) steps for a power of two, else floor(log2 p) + 2 (fold; module docstring).

        Each received partial lands in one of two scratch slots (alternating, so the
        partial being sent is never overwritten) and is reduced in place with the kept
        half; the last step of a rank with no extra partner reduces straight into
        ``result``. ``source`` is only read, and ``result`` written in the last row, so
        either may be the receive buffer and they may overlap.
        """
        steps = StepList()
        if nranks == 1:
            if source.block(0) != result:
                steps.step(copy=(source.block(0), result))
            return steps.build()
        fold = _Fold(nranks)
        role, virtual = fold.pair(rank), fold.virtual(rank)

        plan = _halving_plan(fold, virtual)
        landings = ([source.span(0, nranks).total] if role == "partner" else []) + [
            source.span(*kept).total for _, _, kept in plan]
        slots = (scratch_base, scratch_base + max(landings[0::2], default=0))

        def landing(index: int, count: int) -> Block:
            return Block(SCRATCH, slots[index % 2], count)

        partial: Layout | _Run = source  # block i of ``partial`` is real block ``first + i``
        first, nlandings = 0, 0
        if fold.extra:
            if role == "extra":
                steps.step(send=(rank - 1, source.span(0, nranks)))
            elif role == "partner":
                everything = source.span(0, nranks)
                into = landing(0, everything.total)
                steps.step(recv=(rank + 1, into), reduce=(into, everything, into))
                partial, nlandings = packed(source, 0, nranks, SCRATCH, into.off), 1
            else:
                steps.step()
        for k in range(fold.size.bit_length() - 1):
            if virtual is None:
                steps.step()
                continue
            peer, sent, kept = plan[k]
            into = landing(nlandings, source.span(*kept).total)
            last = k == len(plan) - 1 and role == "core"
            steps.step(send=(peer, partial.span(sent[0] - first, sent[1])), recv=(peer, into),
                       reduce=(into, partial.span(kept[0] - first, kept[1]), result if last else into))
            partial, first, nlandings = packed(source, *kept, SCRATCH, into.off), kept[0], nlandings + 1
        if fold.extra:
            if role == "extra":
                steps.step(recv=(rank - 1, result))
            elif role == "partner":  # ``partial`` holds blocks rank and rank + 1
                steps.step(send=(rank + 1, partial.span(1, 1)), copy=(partial.span(0, 1), result))
            else:
                steps.step()
        return steps.build()
