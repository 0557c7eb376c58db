"""Whole collectives on device buffers: the MPI library's (GPU-aware or staged) and NCCL/RCCL's.

A device op is a plain callable: it enqueues or performs one call on the rank's stream
and returns; the context's ``timed`` (a PyCallOp) synchronises the stream after it in the timing loop.
Before MPI touches a device buffer the stream is synchronised. Staged: device ->
pinned host, the MPI library's collective on the pinned buffers (the host Cython op),
pinned -> device.
"""

from __future__ import annotations

from collections.abc import Callable

from collectives.addresses import host_address
from collectives.dtypes import dtype_code, op_code

Step = Callable[[], None]


class DeviceCall:
    """Steps run in order; ``keepalive`` holds the arrays whose addresses the steps use. ``keys``
    as cython_ext.core.Sequence's: which (communicator, action) a transport ran each part for."""

    def __init__(self, parts: list[Step], keepalive: object = None, keys: list | None = None) -> None:
        self.parts, self.keepalive = parts, keepalive
        self.keys = list(keys) if keys is not None else [None] * len(parts)

    def __call__(self) -> None:
        for part in self.parts:
            part()


def _ptr(backend, array) -> int:
    return backend.ptr(array) if array is not None and array.size else 0


def xccl_call(context, comm, collective: str, send, recv, count: int, dtype: str, op: str, position: int) -> Step:
    """One NCCL/RCCL collective with MPI semantics; ``send`` None is in place (MPI_IN_PLACE).

    Making the communicator is collective over ``comm`` (once per communicator and GPU)."""
    communicator = context.xccl_comm(comm)
    codes = context.communicators
    kind, reduction = codes.dtype(dtype), codes.op(op)
    backend = context.backend
    stream = getattr(getattr(backend, "stream", None), "ptr", 0)
    dst, itemsize = _ptr(backend, recv), recv.itemsize
    if collective == "allgather":  # in place: this rank's block already sits at its position
        src = _ptr(backend, send) if send is not None else dst + position * count * itemsize
        return lambda: communicator.allGather(src, dst, count, kind, stream)
    if collective == "allreduce":
        src = _ptr(backend, send) if send is not None else dst
        return lambda: communicator.allReduce(src, dst, count, kind, reduction, stream)
    if send is not None:
        src = _ptr(backend, send)
        return lambda: communicator.reduceScatter(src, dst, count, kind, reduction, stream)
    # In place, MPI puts the result at the start of the buffer; NCCL leaves it at the rank's block.
    own, first = recv[position * count : (position + 1) * count], recv[:count]

    def in_place() -> None:
        communicator.reduceScatter(dst, dst + position * count * itemsize, count, kind, reduction, stream)
        if position:
            backend.xp.copyto(first, own)

    return in_place


def xccl_collective(context, comm, collective: str, send, recv, count: int, dtype: str, op: str) -> DeviceCall:
    step = xccl_call(context, comm, collective, send, recv, count, dtype, op, comm.Get_rank())
    return DeviceCall([step], (send, recv))


def mpi_collective(context, comm, collective: str, send, recv, count: int, dtype: str, op: str) -> DeviceCall:
    """MPI_Allgather / MPI_Reduce_scatter_block / MPI_Allreduce on device buffers."""
    from cython_ext.native import NativeCollective

    backend, in_place = context.backend, send is None
    codes = (dtype_code(dtype), op_code(op), in_place)
    if context.gpu_aware.aware:
        native = NativeCollective(comm, collective, _ptr(backend, send), _ptr(backend, recv), count, *codes,
                                  keepalive=(send, recv))
        return DeviceCall([backend.synchronize, native], (send, recv))
    host_recv = backend.pinned(recv.size, recv.dtype)
    host_send = None if in_place else backend.pinned(send.size, send.dtype)
    native = NativeCollective(comm, collective, host_address(host_send), host_address(host_recv), count, *codes,
                              keepalive=(host_send, host_recv))
    everything = slice(0, recv.size)
    if not in_place:
        downloads, result = [(host_send, send)], everything
    elif collective == "allgather":
        own = slice(comm.Get_rank() * count, (comm.Get_rank() + 1) * count)
        downloads, result = [(host_recv[own], recv[own])], everything
    else:
        downloads, result = [(host_recv, recv)], slice(0, count)
    steps = [lambda: [backend.download(dst, src) for dst, src in downloads], backend.synchronize, native,
             lambda: backend.upload(recv[result], host_recv[result])]
    return DeviceCall(steps, (send, recv, host_send, host_recv))


class DeviceNonblocking:
    """A non-blocking collective on device buffers: ``post`` starts it, ``test`` (None: nothing to
    test) lets it progress, ``wait`` ends it; called, post then wait (its pure time). The context's
    ``overlapped`` puts a GPU compute between them (collectives/memory/device_compute.py)."""

    def __init__(self, post: Step, wait: Step, test: Step | None = None, keepalive: object = None) -> None:
        self.post, self.wait, self.test, self.keepalive = post, wait, test, keepalive

    def __call__(self) -> None:
        self.post()
        self.wait()


def mpi_nonblocking(context, comm, collective: str, send, recv, count: int, dtype: str, op: str) -> DeviceNonblocking:
    """MPI_Iallgather / MPI_Ireduce_scatter_block / MPI_Iallreduce on device buffers (a GPU-aware MPI:
    the transport refuses staged MPI), the stream synchronised before the post; MPI_Wait ends it."""
    from cython_ext.nonblocking import NonblockingCollective

    backend = context.backend
    posted = NonblockingCollective(comm, collective, _ptr(backend, send), _ptr(backend, recv), count,
                                   dtype_code(dtype), op_code(op), send is None, keepalive=(send, recv))

    def post() -> None:
        backend.synchronize()
        posted.start()

    return DeviceNonblocking(post, posted.finish, posted.poll, (send, recv, posted))


def xccl_nonblocking(context, comm, collective: str, send, recv, count: int, dtype: str, op: str) -> DeviceNonblocking:
    """NCCL/RCCL's collective enqueued on the rank's stream (the post: it returns at once, the GPU moves
    the data), the stream's synchronisation the wait; nothing to test."""
    step = xccl_call(context, comm, collective, send, recv, count, dtype, op, comm.Get_rank())
    return DeviceNonblocking(step, context.backend.synchronize, None, (send, recv))
