"""Ring all-gather and ring reduce-scatter: p-1 steps, each to the right neighbour.

Any p works unchanged: every rank forwards one block per step. Bandwidth-optimal,
latency linear in p (the term PCCL's hierarchy attacks).
"""

from __future__ import annotations

from collectives.algorithms import register
from collectives.schedule import RECV, SCRATCH, SEND, Schedule, StepList, displacements


@register("ring")
class Ring:
    @staticmethod
    def allgather(nranks: int, rank: int, counts: tuple[int, ...], in_place: bool) -> Schedule:
        displs = displacements(counts)
        steps = StepList()
        if not in_place:
            steps.step(copy=((SEND, 0, counts[rank]), (RECV, displs[rank], counts[rank])))
        right, left = (rank + 1) % nranks, (rank - 1) % nranks
        for k in range(nranks - 1):
            sent, received = (rank - k) % nranks, (rank - k - 1) % nranks
            steps.step(
                send=(right, (RECV, displs[sent], counts[sent])),
                recv=(left, (RECV, displs[received], counts[received])),
            )
        return steps.build()

    @staticmethod
    def reduce_scatter(
        nranks: int, rank: int, counts: tuple[int, ...], in_place: bool, out_offset: int
    ) -> Schedule:
        """Partial sums travel right; after p-1 steps block ``rank`` is complete.

        Received partials land in one of two scratch slots (alternating, so the slot
        being sent is never overwritten) and are reduced in place with the local
        block; the last step writes straight into the output.
        """
        displs = displacements(counts)
        source = RECV if in_place else SEND
        steps = StepList()
        if nranks == 1:
            if source != RECV or displs[0] != out_offset:
                steps.step(copy=((source, displs[0], counts[0]), (RECV, out_offset, counts[0])))
            return steps.build()
        slot = max(counts)
        right, left = (rank + 1) % nranks, (rank - 1) % nranks
        for k in range(nranks - 1):
            sent, received = (rank - k - 1) % nranks, (rank - k - 2) % nranks
            if k == 0:
                send_block = (source, displs[sent], counts[sent])
            else:
                send_block = (SCRATCH, ((k - 1) % 2) * slot, counts[sent])
            landing = (SCRATCH, (k % 2) * slot, counts[received])
            result = (RECV, out_offset, counts[received]) if k == nranks - 2 else landing
            steps.step(
                send=(right, send_block),
                recv=(left, landing),
                reduce=(landing, (source, displs[received], counts[received]), result),
            )
        return steps.build(scratch=2 * slot)
