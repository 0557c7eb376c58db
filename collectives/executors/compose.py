"""A schedule whose library rows run by other transports: cut, and chained with the executor's parts.

The executor of the context (host Cython, or device) runs every row it can; a library row
(``ACT_MPI_*``: one whole collective on a communicator) whose (communicator, action) is
given to a transport that the executors do not run themselves (``xccl``, ``rdma``) becomes
that transport's op, and the call is the chain of the parts, built once.
"""

from __future__ import annotations

import numpy as np

from collectives.schedules.rows import ACT_MPI_ALLGATHER, ACT_MPI_ALLREDUCE, LIBRARY_ACTIONS, library_pieces
from collectives.schedules.rows import COLUMN as C


def library_views(row, buffers, nranks: int):
    """(src or None in place, dst, count per rank) of a library row, as slices of ``buffers``
    laid out as MPI's: all-gather count -> p*count, reduce-scatter p*count -> count, all-reduce
    count -> count. Where the ranks' blocks are interleaved (library_pieces) the rank-blocked
    operand's slice runs from its first element to the end of the last rank's last piece."""
    count, action = int(row[C["action_count"]]), int(row[C["action"]])
    pieces, piece, stride = library_pieces(row)
    blocked = (pieces - 1) * stride + nranks * piece if pieces > 1 else count * nranks
    source_length, result_length = {ACT_MPI_ALLGATHER: (count, blocked),
                                    ACT_MPI_ALLREDUCE: (count, count)}.get(action, (blocked, count))
    in_place = int(row[C["src_buf"]]) < 0
    dst_off = int(row[C["dst_off"]])
    dst = buffers[int(row[C["dst_buf"]])][dst_off : dst_off + max(result_length, source_length if in_place else 0)]
    if in_place:
        return None, dst, count
    src_off = int(row[C["src_off"]])
    return buffers[int(row[C["src_buf"]])][src_off : src_off + source_length], dst, count


def schedule_op(context, comms: list, steps: np.ndarray, buffers: tuple, dtype: str, op: str,
                cuts: dict | None = None):
    """An op running ``steps`` on (send, recv, scratch) ``buffers`` of the context's backend.

    ``cuts``: (communicator index, ACT_MPI_* action) -> Transport for the library rows it runs.
    Collective over every communicator, like the ops it builds."""
    cuts = {key: transport for key, transport in (cuts or {}).items() if not transport.in_executor}
    if not cuts:
        return context.executor(comms, steps, buffers, dtype, op)
    parts, keys, start = [], [], 0

    def executor_part(rows: np.ndarray) -> None:
        parts.append(context.executor(comms, np.ascontiguousarray(rows), buffers, dtype, op))
        keys.append(None)

    for k, row in enumerate(steps):
        key = (int(row[C["comm"]]), int(row[C["action"]]))
        transport = cuts.get(key)
        if transport is None:
            continue
        if k > start:
            executor_part(steps[start:k])
        pieces, _, stride = library_pieces(row)
        if pieces > 1 and not transport.strided:
            raise ValueError(f"{transport.name} takes no interleaved rank blocks (a schedule that gives it some "
                             "is wrong: collectives/schedules/hier.py)")
        comm = comms[key[0]]
        src, dst, count = library_views(row, buffers, comm.Get_size())
        if context.on_device and not transport.stream_ordered:
            parts.append(context.backend.synchronize)  # kernels before it must have written its input
            keys.append(None)
        interleave = {"pieces": pieces, "stride": stride} if pieces > 1 else {}
        parts.append(transport.collective(context, comm, LIBRARY_ACTIONS[key[1]], src, dst, count, dtype, op,
                                          **interleave))
        keys.append(key)
        start = k + 1
    if start < len(steps):
        executor_part(steps[start:])
    return context.sequence(comms[0], parts, keepalive=(buffers, steps), keys=keys)


def phase_ops(op, comm_index: int, action: int) -> list:
    """The parts of a composed op that a transport built for (communicator, library action): what
    the ``transport`` column asks of each (none when the op is one executor's, nothing cut)."""
    keys = getattr(op, "keys", None) or ()
    return [part for part, key in zip(op.parts, keys, strict=True) if key == (comm_index, action)] if keys else []
