"""Per-collective measurement facts: sizes, deterministic inputs, the exact
expected output, and the nccl-tests bus-bandwidth factor.

Inputs are small integers, so every reduction over up to 256 ranks is exact in
every dtype (float16 holds integers up to 2048 exactly) and the expected output
is known bit for bit whatever order an algorithm reduces in. One "marked" rank
per element (rank i % p) contributes a value that grows with the element index,
so the expected output differs from element to element (up to 1021 apart) and
a block delivered to the wrong rank or the wrong place is caught.
"""

from __future__ import annotations

import numpy as np

from collectives.call import CallSpec
from collectives.dtypes import numpy_dtype

#: filler for receive buffers, so an element the collective never wrote is caught
SENTINEL = -2047  # outside every expected value, exact in float16


def busbw_factor(collective: str, nranks: int) -> float:
    """nccl-tests: busbw = algbw * factor."""
    if nranks <= 1:
        return 0.0
    if collective == "allreduce":
        return 2.0 * (nranks - 1) / nranks
    return (nranks - 1) / nranks


def gather_value(rank: int, index: np.ndarray) -> np.ndarray:
    """All-gather input of ``rank``: element j."""
    return (rank * 131 + index * 7) % 1024


MARK_PERIOD = 1021  # prime, so the marked values do not line up with power-of-two block sizes


def reduce_input(op: str, rank: int, index: np.ndarray, nranks: int, xp=np) -> np.ndarray:
    """Reduction input of ``rank`` (of ``nranks``) at global element ``index`` (an ``xp`` array)."""
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


_COMBINE = {"sum": "add", "prod": "multiply", "min": "minimum", "max": "maximum"}  # ufuncs of numpy and cupy


def make_buffers(call: CallSpec, rank: int) -> tuple[np.ndarray | None, np.ndarray]:
    """Send and receive buffers of ``rank`` filled for the check (send is None in place)."""
    dtype = numpy_dtype(call.dtype)
    send_count, recv_count = call.buffer_counts
    recv = np.full(recv_count, SENTINEL, dtype=dtype)
    if call.collective == "allgather":
        own = gather_value(rank, np.arange(call.count)).astype(dtype)
        if call.in_place:
            recv[rank * call.count : (rank + 1) * call.count] = own
            return None, recv
        return own, recv
    length = call.count * (call.nranks if call.collective == "reduce_scatter" else 1)
    data = reduce_input(call.op, rank, np.arange(length), call.nranks).astype(dtype)
    if call.in_place:
        recv[:length] = data
        return None, recv
    return data, recv


def _sum_of_small(index: np.ndarray, nranks: int, xp=np) -> np.ndarray:
    """sum over q < nranks of (q + 3 * index) % 8, in O(len(index)) whatever nranks is.

    (q + c) % 8 runs through 0..7 once every 8 ranks (28 per round); the last nranks % 8
    ranks add the table entry of their phase c = 3 * index % 8."""
    rounds, rest = divmod(nranks, 8)
    phase = np.arange(8)
    partial = ((np.arange(rest)[None, :] + phase[:, None]) % 8).sum(axis=1)  # [c] for the last ranks
    return rounds * 28 + xp.asarray(partial)[(3 * index) % 8]


def expected_output(call: CallSpec, rank: int, xp=np) -> np.ndarray:
    """The exact result ``rank`` must hold (the region of recv the collective defines).

    ``xp``: the array module to compute it with (cupy: on the GPU, next to the result)."""
    dtype = numpy_dtype(call.dtype)
    if call.collective == "allgather":
        index = xp.arange(call.count, dtype=np.int64)
        return xp.concatenate([gather_value(q, index) for q in range(call.nranks)]).astype(dtype)
    start = rank * call.count if call.collective == "reduce_scatter" else 0
    index = xp.arange(start, start + call.count, dtype=np.int64)
    if call.op == "sum":  # closed form: large all-reduce checks on many ranks stay fast
        marked = index % call.nranks
        total = _sum_of_small(index, call.nranks, xp) - (marked + 3 * index) % 8 + 1 + index % MARK_PERIOD
        return total.astype(dtype)
    combine = getattr(xp, _COMBINE[call.op])
    result = reduce_input(call.op, 0, index, call.nranks, xp).astype(np.int64)
    for q in range(1, call.nranks):
        result = combine(result, reduce_input(call.op, q, index, call.nranks, xp))
    return result.astype(dtype)


def count_wrong(call: CallSpec, rank: int, recv, xp=np) -> int:
    """Elements of this rank's result that differ bit for bit from the expected ones.

    ``xp``: the array module of ``recv`` (numpy, or cupy for device buffers: the
    comparison then runs on the GPU and only the count comes back)."""
    expected = expected_output(call, rank, xp)
    got = recv[: len(expected)]
    as_bits = f"u{expected.dtype.itemsize}"
    return int(xp.count_nonzero(got.view(as_bits) != expected.view(as_bits)))
