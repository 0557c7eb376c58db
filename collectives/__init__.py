"""pccl-bench's collectives library, usable without the benchmark harness.

    from mpi4py import MPI
    import numpy as np
    import collectives

    comm = MPI.COMM_WORLD
    send = np.full(4, comm.rank, dtype=np.float32)
    recv = np.empty(4 * comm.size, dtype=np.float32)
    collectives.allgather(comm, send, recv, impl="pccl-flat", algorithm="ring")
    collectives.allgather(comm, send, recv, impl="pccl-hier", inter="rd", intra="ring", ranks_per_node=2)

Pass ``sendbuf=None`` for in-place calls (MPI_IN_PLACE semantics). Each call
builds its schedule (cached) and runs it once; for repeated calls on the same
buffers use ``prepare`` and call the returned op.
"""

from __future__ import annotations

import numpy as np

from collectives import spec
from collectives.call import CallSpec
from collectives.dtypes import DTYPES
from collectives.impls import IMPLEMENTATIONS, get
from collectives.schedules.topology import as_topology

__all__ = ["CallSpec", "IMPLEMENTATIONS", "allgather", "allreduce", "prepare", "reduce_scatter"]

_DTYPE_NAMES = {spec[0]: name for name, spec in DTYPES.items()}


def prepare(collective: str, comm, sendbuf: np.ndarray | None, recvbuf: np.ndarray, *,
            op: str = "sum", impl: str = "pccl-flat", algorithm: str | None = None,
            intra: str | None = None, inter: str | None = None, ranks_per_node: int | None = None):
    """Validate the buffers and return a callable op that performs the collective.

    ``intra``/``inter`` choose the phases of ``impl="pccl-hier"``; ``ranks_per_node``
    cuts each real node into virtual nodes of that many ranks (default: real nodes).
    """
    dtype = _DTYPE_NAMES.get(recvbuf.dtype)
    if dtype is None:
        raise TypeError(f"unsupported dtype {recvbuf.dtype}; expected one of {tuple(DTYPES)}")
    if sendbuf is not None and sendbuf.dtype != recvbuf.dtype:
        raise TypeError(f"send and receive dtypes differ: {sendbuf.dtype} vs {recvbuf.dtype}")
    for buf in (sendbuf, recvbuf):
        if buf is not None and not buf.flags.c_contiguous:
            raise ValueError("buffers must be C-contiguous")
    nranks, in_place = comm.Get_size(), sendbuf is None
    count = spec.get(collective).count_from_recv(nranks, recvbuf.size, in_place)
    call = CallSpec(collective, nranks, count, dtype, op, in_place, algorithm, intra, inter)
    want_send, want_recv = call.buffer_counts
    have_send = 0 if sendbuf is None else sendbuf.size
    if (have_send, recvbuf.size) != (want_send, want_recv):
        raise ValueError(
            f"{collective} on {nranks} ranks with count {count} needs send/recv sizes "
            f"{want_send}/{want_recv}, got {have_send}/{recvbuf.size}"
        )
    implementation = get(impl)
    reason = implementation.unsupported_reason(call)
    if reason:
        raise ValueError(f"{impl} cannot run {collective}: {reason}")
    return implementation.build(as_topology(comm, ranks_per_node), call, sendbuf, recvbuf)


def allgather(comm, sendbuf, recvbuf, **options) -> np.ndarray:
    prepare("allgather", comm, sendbuf, recvbuf, **options)()
    return recvbuf


def reduce_scatter(comm, sendbuf, recvbuf, **options) -> np.ndarray:
    prepare("reduce_scatter", comm, sendbuf, recvbuf, **options)()
    return recvbuf


def allreduce(comm, sendbuf, recvbuf, **options) -> np.ndarray:
    prepare("allreduce", comm, sendbuf, recvbuf, **options)()
    return recvbuf
