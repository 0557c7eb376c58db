"""Ring all-gather and ring reduce-scatter: p-1 steps, each to the right neighbour.

Any p works unchanged: every rank forwards one block per step. Bandwidth-optimal,
latency linear in p (the term PCCL's hierarchy attacks). The p-1 rows are written at
once as columns (schedule.rows): at thousands of ranks a row per Python call cost
~14 us a row, 0.2 s for one rank's all-reduce at p = 8192.
"""

from __future__ import annotations

import numpy as np

from collectives.schedules.algorithms import register
from collectives.schedules.rows import COMM_WORLD, SCRATCH, Block, Blocks, Layout, Schedule, StepList, rows


@register("ring")
class Ring:
    @staticmethod
    def allgather(nranks: int, rank: int, layout: Layout, scratch_base: int = 0) -> Schedule:
        step = np.arange(nranks - 1, dtype=np.int64)
        sent, received = (rank - step) % nranks, (rank - step - 1) % nranks
        return rows(COMM_WORLD, send=((rank + 1) % nranks, layout.blocks(sent)),
                    recv=((rank - 1) % nranks, layout.blocks(received)))

    @staticmethod
    def reduce_scatter(nranks: int, rank: int, source: Layout, result: Block, scratch_base: int = 0) -> Schedule:
        """Partial sums travel right; after p-1 steps block ``rank`` is complete.

        Received partials land in one of two scratch slots (alternating, so the slot
        being sent is never overwritten) and are reduced in place with the local
        block; the last step reduces straight into ``result``.
        """
        if nranks == 1:
            steps = StepList()
            if source.block(0) != result:
                steps.step(copy=(source.block(0), result))
            return steps.build()
        step = np.arange(nranks - 1, dtype=np.int64)
        sent, received = (rank - step - 1) % nranks, (rank - step - 2) % nranks
        local = source.blocks(received)
        slot = int(np.max(source.blocks(np.arange(nranks)).total))
        landing = Blocks(SCRATCH, scratch_base + (step % 2) * slot, local.total)
        # the first step sends its own block; each later one forwards the partial it just reduced
        outgoing = source.blocks(sent).where(step == 0, landing.take(np.maximum(step - 1, 0)))
        target = Blocks.of(result).where(step == nranks - 2, landing)
        return rows(COMM_WORLD, send=((rank + 1) % nranks, outgoing), recv=((rank - 1) % nranks, landing),
                    reduce=(landing, local, target))
