"""Buffer shapes of the three collectives (element counts, MPI semantics).

``count`` is the per-rank count of nccl-tests: the all-gather send count, the
reduce-scatter receive count, the all-reduce buffer length.
"""

from __future__ import annotations

COLLECTIVES = ("allgather", "reduce_scatter", "allreduce")


def buffer_counts(collective: str, nranks: int, count: int, in_place: bool) -> tuple[int, int]:
    """(send elements, receive elements) one rank needs. In place there is no send buffer."""
    if collective == "allgather":
        send, recv = count, nranks * count
    elif collective == "reduce_scatter":
        # In place the input occupies the whole receive buffer (MPI_IN_PLACE semantics).
        send, recv = nranks * count, (nranks * count if in_place else count)
    elif collective == "allreduce":
        send, recv = count, count
    else:
        raise ValueError(f"unknown collective {collective!r}; expected one of {COLLECTIVES}")
    return (0 if in_place else send), recv


def total_count(collective: str, nranks: int, count: int) -> int:
    """Elements of the nccl-tests ``size``: all-gather output, reduce-scatter input, all-reduce buffer."""
    return count if collective == "allreduce" else nranks * count


def even_blocks(total: int, nranks: int) -> tuple[int, ...]:
    """Split ``total`` elements into nranks blocks; the first ``total % nranks`` get one more."""
    base, extra = divmod(total, nranks)
    return tuple(base + (1 if i < extra else 0) for i in range(nranks))
