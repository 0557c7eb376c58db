"""Direct exchange (``direct``): every peer at once, one step on the critical path.

All-gather: each rank sends its block to every other rank and receives theirs; reduce-scatter:
each rank sends block j to rank j and reduces what it receives; all-reduce (``direct`` alone): the
whole buffer to every peer, each rank reducing all p buffers itself (the "one-shot" all-reduce of
the field; ``direct+direct`` is the two-shot one, reduce-scatter then all-gather).

The p - 1 exchanges are rows k = 1 .. p-1 (to rank + k, from rank - k), all but the last posted
(rows.POST): the executor puts them in flight at once, so the call costs one message latency plus
p - 1 messages' overhead and bytes, against log2 p latencies for recursive doubling or Bruck and p - 1
for a ring. It wins while latency dominates and the peers are few; every rank sends p - 1 times its
block, so it loses on bandwidth. Reductions run in rank order 0 .. p-1 on every rank, so an all-reduce's
ranks agree bit for bit.
"""

from __future__ import annotations

import numpy as np

from collectives.schedules.algorithms import register
from collectives.schedules.rows import COMM_WORLD, SCRATCH, Block, Blocks, Layout, Schedule, StepList, rows


def _exchange(nranks: int, rank: int, sent: Blocks, received: Blocks) -> Schedule:
    """Rows k = 1 .. p-1: ``sent`` row k-1 to rank + k, ``received`` row k-1 from rank - k; all
    but the last posted."""
    shift = np.arange(1, nranks, dtype=np.int64)
    return rows(COMM_WORLD, send=((rank + shift) % nranks, sent), recv=((rank - shift) % nranks, received),
                post=(shift < nranks - 1).astype(np.int64))


def _overlaps(a: Block, b: Block) -> bool:
    def end(block: Block) -> int:
        return block.off + (block.nblocks - 1) * block.stride + block.count if block.nblocks > 1 \
            else block.off + block.count
    return a.buf == b.buf and a.off < end(b) and b.off < end(a)


def _reduce_in_rank_order(steps: StepList, contributions: list[Block], own: int, result: Block,
                          scratch: Block) -> None:
    """result = c0 (op) c1 (op) ... (op) c[p-1]. Where ``result`` is the rank's own contribution
    (in place) the running value stays in ``scratch`` until that contribution is folded in."""
    aliased = _overlaps(result, contributions[own])
    running = contributions[0]
    for position in range(1, len(contributions)):
        target = scratch if aliased and position < own else result
        steps.step(reduce=(running, contributions[position], target))
        running = target
    if len(contributions) == 1 and running != result:
        steps.step(copy=(running, result))


@register("direct")
class DirectExchange:
    #: its rows post messages (a pipelined hierarchy, which posts rows itself, does not take it)
    posts = True

    @staticmethod
    def allgather(nranks: int, rank: int, layout: Layout, scratch_base: int = 0) -> Schedule:
        if nranks == 1:
            return StepList().build()
        shift = np.arange(1, nranks, dtype=np.int64)
        return _exchange(nranks, rank, layout.blocks(np.full(nranks - 1, rank)), layout.blocks((rank - shift) % nranks))

    @staticmethod
    def reduce_scatter(nranks: int, rank: int, source: Layout, result: Block, scratch_base: int = 0) -> Schedule:
        """Rank q's contribution to this rank's block lands in scratch slot (rank - q) mod p - 1."""
        return _gather_and_reduce(nranks, rank, source.blocks, source.block(rank), result, scratch_base)

    @staticmethod
    def allreduce(nranks: int, rank: int, source: Block, result: Block, scratch_base: int = 0) -> Schedule:
        """Every rank's whole buffer to every rank, each reducing all p in rank order."""
        def whole(indices: np.ndarray) -> Blocks:
            return Blocks(source.buf, np.full(len(indices), source.off), source.count, source.nblocks, source.stride)
        return _gather_and_reduce(nranks, rank, whole, source, result, scratch_base)


def _gather_and_reduce(nranks: int, rank: int, outgoing, own: Block, result: Block, scratch_base: int) -> Schedule:
    """Send ``outgoing(indices)`` row by row to rank + 1 .. rank + p-1, receive each peer's
    contribution to ``result`` into scratch, then reduce all p in rank order into ``result``."""
    steps = StepList()
    if nranks == 1:
        if own != result:
            steps.step(copy=(own, result))
        return steps.build()
    count = result.total
    shift = np.arange(1, nranks, dtype=np.int64)
    slots = Blocks(SCRATCH, scratch_base + (shift - 1) * count, count)
    exchange = _exchange(nranks, rank, outgoing((rank + shift) % nranks), slots)
    contributions = [own if q == rank else Block(SCRATCH, scratch_base + ((rank - q) % nranks - 1) * count, count)
                     for q in range(nranks)]
    running = Block(SCRATCH, scratch_base + (nranks - 1) * count, count)
    _reduce_in_rank_order(steps, contributions, rank, result, running)
    return exchange.then(steps.build())
