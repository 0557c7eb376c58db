"""Ring all-gather and ring reduce-scatter: p-1 steps, each to the right neighbour.

Any p works unchanged: every rank forwards one block per step. Bandwidth-optimal,
latency linear in p (the term PCCL's hierarchy attacks).
"""

from __future__ import annotations

from collectives.algorithms import register
from collectives.schedule import SCRATCH, Block, Layout, Schedule, StepList


@register("ring")
class Ring:
    @staticmethod
    def allgather(nranks: int, rank: int, layout: Layout, scratch_base: int = 0) -> Schedule:
        steps = StepList()
        right, left = (rank + 1) % nranks, (rank - 1) % nranks
        for k in range(nranks - 1):
            sent, received = (rank - k) % nranks, (rank - k - 1) % nranks
            steps.step(send=(right, layout.block(sent)), recv=(left, layout.block(received)))
        return steps.build()

    @staticmethod
    def reduce_scatter(nranks: int, rank: int, source: Layout, result: Block, scratch_base: int = 0) -> Schedule:
        """Partial sums travel right; after p-1 steps block ``rank`` is complete.

        Received partials land in one of two scratch slots (alternating, so the slot
        being sent is never overwritten) and are reduced in place with the local
        block; the last step reduces straight into ``result``.
        """
        steps = StepList()
        if nranks == 1:
            if source.block(0) != result:
                steps.step(copy=(source.block(0), result))
            return steps.build()
        slot = max(source.block(i).total for i in range(nranks))
        right, left = (rank + 1) % nranks, (rank - 1) % nranks
        previous = None
        for k in range(nranks - 1):
            sent, received = (rank - k - 1) % nranks, (rank - k - 2) % nranks
            local = source.block(received)
            landing = Block(SCRATCH, scratch_base + (k % 2) * slot, local.total)
            target = result if k == nranks - 2 else landing
            steps.step(
                send=(right, source.block(sent) if previous is None else previous),
                recv=(left, landing),
                reduce=(landing, local, target),
            )
            previous = landing
        return steps.build()
