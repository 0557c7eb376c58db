"""Deterministic inputs whose reductions are exact in every dtype (nccl-tests' verifiable data).

Inputs are small integers, so every reduction over up to 256 ranks is exact in every
dtype (float16 holds integers up to 2048 exactly) and the expected output is known bit
for bit whatever order an algorithm reduces in. One "marked" rank per element (rank
i % p) contributes a value that grows with the element index, so the expected output
differs from element to element (up to 1021 apart) and a block delivered to the wrong
rank or the wrong place is caught.
"""

from __future__ import annotations

import math

import numpy as np

#: filler for receive buffers, so an element the collective never wrote is caught
SENTINEL = -2047  # outside every expected value, exact in float16
MARK_PERIOD = 1021  # prime, so the marked values do not line up with power-of-two block sizes
_COMBINE = {"sum": "add", "prod": "multiply", "min": "minimum", "max": "maximum"}  # ufuncs of numpy and cupy
_FOLD = {"sum": "sum", "prod": "prod", "min": "min", "max": "max"}  # their reductions along an axis, in both


#: every input and result repeats along the element index with this period (what each formula
#: takes the index modulo), so a long buffer is one period computed and repeated: memory speed
GATHER_PERIOD = 1024
REDUCE_PERIODS = {"sum": (8,), "prod": (3,), "min": (2,), "max": (2,)}


def reduce_period(op: str, nranks: int) -> int:
    return math.lcm(nranks, MARK_PERIOD, *REDUCE_PERIODS[op])


def periodic(values_at, start: int, length: int, period: int, dtype, xp=np):
    """``values_at(index).astype(dtype)`` for index = start .. start+length-1, computed over one
    period and repeated (exact: the values depend on the index only modulo ``period``)."""
    if length <= 2 * period:
        return values_at(xp.arange(start, start + length, dtype=np.int64)).astype(dtype)
    one = values_at(xp.arange(start, start + period, dtype=np.int64)).astype(dtype)
    return xp.tile(one, -(-length // period))[:length]


def gather_value(rank: int, index: np.ndarray) -> np.ndarray:
    """All-gather input of ``rank``: element j."""
    return (rank * 131 + index * 7) % 1024


#: the most elements of ranks' inputs ``reduced`` holds at once (32 MiB of int64)
REDUCE_BLOCK_ELEMENTS = 1 << 22


def reduce_input(op: str, rank, index: np.ndarray, nranks: int, xp=np) -> np.ndarray:
    """Reduction input of ``rank`` (of ``nranks``; an int, or a column of ranks) at global element ``index``
    (an ``xp`` array)."""
    marked = index % nranks == rank
    grows = 1 + index % MARK_PERIOD
    if op == "sum":  # total = (p - 1) * small + grows: at most 7 * 255 + 1021 < 2048
        return xp.where(marked, grows, (rank + 3 * index) % 8)
    if op == "prod":  # +-grows
        return xp.where(marked, grows, xp.where((rank + index) % 3 == 0, -1, 1))
    # min and max: even elements are decided by the marked rank, odd ones by the spread of all ranks
    spread = (rank * 37 + index * 11) % 1021 - 510
    decided = (600 + index % 1021) * (-1 if op == "min" else 1)
    return xp.where(marked & (index % 2 == 0), decided, spread)


def _sum_of_small(index: np.ndarray, nranks: int, xp=np) -> np.ndarray:
    """sum over q < nranks of (q + 3 * index) % 8, in O(len(index)) whatever nranks is.

    (q + c) % 8 runs through 0..7 once every 8 ranks (28 per round); the last nranks % 8
    ranks add the table entry of their phase c = 3 * index % 8."""
    rounds, rest = divmod(nranks, 8)
    phase = np.arange(8)
    partial = ((np.arange(rest)[None, :] + phase[:, None]) % 8).sum(axis=1)  # [c] for the last ranks
    return rounds * 28 + xp.asarray(partial)[(3 * index) % 8]


def reduced_range(op: str, start: int, length: int, nranks: int, dtype, xp=np):
    """The exact reduction over all ranks at elements start .. start+length-1."""
    return periodic(lambda index: reduced(op, index, nranks, np.int64, xp), start, length,
                    reduce_period(op, nranks), dtype, xp)


def reduced(op: str, index, nranks: int, dtype, xp=np):
    """The exact reduction over all ranks of ``reduce_input`` at ``index``."""
    if op == "sum":  # closed form: large checks on many ranks stay fast
        marked = index % nranks
        total = _sum_of_small(index, nranks, xp) - (marked + 3 * index) % 8 + 1 + index % MARK_PERIOD
        return total.astype(dtype)
    combine = getattr(xp, _COMBINE[op])
    result = reduce_input(op, 0, index, nranks, xp).astype(np.int64)
    # the ranks' inputs a block at a time, as one (ranks, elements) array: not a Python loop of p steps
    # (every rank computes this for its check), and at most about REDUCE_BLOCK_ELEMENTS at once
    block = max(1, REDUCE_BLOCK_ELEMENTS // max(len(index), 1))
    for first in range(1, nranks, block):
        ranks = xp.arange(first, min(first + block, nranks), dtype=np.int64)[:, None]
        inputs = reduce_input(op, ranks, index[None, :], nranks, xp).astype(np.int64)
        result = combine(result, getattr(xp, _FOLD[op])(inputs, axis=0))
    return result.astype(dtype)


def reduction_buffers(call, rank: int, length: int) -> tuple[np.ndarray | None, np.ndarray]:
    """Send/recv of a reduction whose input is ``length`` elements from global index 0."""
    from collectives.dtypes import numpy_dtype

    dtype = numpy_dtype(call.dtype)
    recv = np.full(call.buffer_counts[1], SENTINEL, dtype=dtype)
    data = periodic(lambda index: reduce_input(call.op, rank, index, call.nranks), 0, length,
                    reduce_period(call.op, call.nranks), dtype)
    if call.in_place:
        recv[:length] = data
        return None, recv
    return data, recv
