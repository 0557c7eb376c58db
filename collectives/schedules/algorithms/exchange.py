"""Whole-buffer recursive doubling all-reduce (``rdfull``): the latency-optimal all-reduce.

Each step exchanges the whole buffer with the partner at distance 1, 2, 4 ... and
reduces it in: log2 p steps of n elements, against 2 log2 p steps of shrinking
blocks for reduce-scatter + all-gather. It wins while latency dominates (small
buffers) and loses on bandwidth. Every rank reduces the same operands in the same
tree (a op b with a, b swapped between partners), so results agree bit for bit.

p not a power of two folds as ``rd``/``rh`` do: each extra rank (odd rank of the
first r = p - 2^floor(log2 p) pairs) sends its buffer to its partner, sits out the
doubling steps, and receives the result at the end: floor(log2 p) + 2 steps.
"""

from __future__ import annotations

from collectives.schedules.algorithms import register
from collectives.schedules.algorithms.recursive import _Fold
from collectives.schedules.rows import SCRATCH, Block, Schedule, StepList


@register("rdfull")
class WholeBufferDoubling:
    @staticmethod
    def allreduce(nranks: int, rank: int, source: Block, result: Block, scratch_base: int = 0) -> Schedule:
        steps = StepList()
        incoming = Block(SCRATCH, scratch_base, result.total)
        fold = _Fold(nranks)
        role, virtual = fold.pair(rank), fold.virtual(rank)
        current = source  # where this rank's running value is; result after the first reduction
        if fold.extra:
            copy = (source, result) if source != result else None
            fold.take_in(steps, rank, source, incoming, reduce=(source, incoming, result), core_copy=copy)
            if role == "partner" or (role == "core" and copy):
                current = result
        for distance in fold.doublings():
            if virtual is None:
                steps.step()
            else:
                peer = fold.real(virtual ^ distance)
                steps.step(send=(peer, current), recv=(peer, incoming), reduce=(current, incoming, result))
                current = result
        fold.hand_back(steps, rank, result)
        if current != result and role != "extra":  # p == 1 out of place
            steps.step(copy=(source, result))
        return steps.build()
