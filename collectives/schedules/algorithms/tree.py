"""Binomial-tree all-reduce (``tree``): the whole buffer reduced to rank 0, then broadcast from it.

ceil(log2 p) steps each way, any p. Flat, it takes twice the steps of ``rdfull``; its use is as a
pccl-hier intra phase before a whole-buffer inter phase (``intra: tree``, ``inter: rdfull``): the
node's sum is left at local rank 0 alone, so only one rank per node crosses between nodes, as in
MPICH's node-aware small all-reduce (intra reduce, the leaders' all-reduce, intra broadcast), where
``rdfull/rdfull`` sends from every rank of a node at once. Only rank 0 reduces the final value, and
every rank receives it, so results agree bit for bit.
"""

from __future__ import annotations

from collectives.schedules.algorithms import register
from collectives.schedules.rows import SCRATCH, Block, Schedule, StepList


def _rounds(nranks: int) -> int:
    return (nranks - 1).bit_length()


@register("tree")
class BinomialTree:
    @staticmethod
    def reduce(nranks: int, rank: int, source: Block, result: Block, scratch_base: int = 0) -> Schedule:
        """Rank 0's ``result`` holds the reduction of every rank's ``source``; the others' ``result``
        is scratch (partial sums)."""
        steps = StepList()
        incoming = Block(SCRATCH, scratch_base, result.total)
        current, sent = source, False
        for round_ in range(_rounds(nranks)):
            mask = 1 << round_
            if sent:
                steps.step()
            elif rank & mask:  # hand the partial sum to the parent; idle after
                steps.step(send=(rank - mask, current))
                sent = True
            elif rank + mask < nranks:
                steps.step(recv=(rank + mask, incoming), reduce=(current, incoming, result))
                current = result
            else:
                steps.step()
        if nranks == 1 and source != result:
            steps.step(copy=(source, result))
        return steps.build()

    @staticmethod
    def bcast(nranks: int, rank: int, block: Block) -> Schedule:
        """Rank 0's ``block`` to every rank's ``block``."""
        steps = StepList()
        for round_ in reversed(range(_rounds(nranks))):
            mask = 1 << round_
            if rank % (2 * mask) == 0 and rank + mask < nranks:
                steps.step(send=(rank + mask, block))
            elif rank % (2 * mask) == mask:
                steps.step(recv=(rank - mask, block))
            else:
                steps.step()
        return steps.build()

    @staticmethod
    def allreduce(nranks: int, rank: int, source: Block, result: Block, scratch_base: int = 0) -> Schedule:
        reduced = BinomialTree.reduce(nranks, rank, source, result, scratch_base)
        return reduced.then(BinomialTree.bcast(nranks, rank, result))
