"""Run a schedule (collectives/schedules/rows.py) on device buffers.

The rows are the same data the host Cython executor runs; only the movers differ:
* messages by MPI point-to-point, on device pointers when the MPI library is GPU-aware,
  else staged through pinned host memory (device -> pinned, MPI, pinned -> device);
  strided blocks are packed into (and unpacked from) a contiguous device area first;
* local copies and reductions as array kernels (CuPy elementwise ops) on views of the
  device buffers, on the rank's stream;
* library phases (``ACT_MPI_*`` rows) by the MPI library's collective (rows another
  transport runs, NCCL/RCCL say, are cut out before: collectives/executors/compose.py).

The stream is synchronised before every MPI call, so MPI never reads a buffer a kernel
is still writing, nor writes one a kernel is still reading. Rows are compiled once into
a list of steps (closures over fixed views and MPI buffer specs); a call runs them.
Posted rows (rows.POST) run to completion one by one, as any row: the same result, without the
host executor's overlap of their messages.
The host executor (cython_ext/executor.pyx) is never handed a device pointer.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from collectives.addresses import host_address
from collectives.dtypes import dtype_code, numpy_dtype, op_code
from collectives.schedules.rows import (
    ACT_COPY,
    ACT_NONE,
    LIBRARY_ACTIONS,
)
from collectives.schedules.rows import COLUMN as C

TAG = 0x5CC1  # the host executor's tag
#: contiguous messages above this go in pieces, as in the host executor (int counts of MPI-3)
MAX_MESSAGE_BYTES = 1 << 30
UFUNCS = {"sum": "add", "prod": "multiply", "min": "minimum", "max": "maximum"}
Step = Callable[[], None]


def _mpi_buffer(backend, view) -> list:
    from mpi4py import MPI

    return [MPI.buffer.fromaddress(backend.ptr(view) if view.size else 0, view.nbytes), MPI.BYTE]


def _pieces(spec: list) -> list[list]:
    from mpi4py import MPI

    buffer = spec[0]
    address, nbytes = buffer.address, len(buffer)
    return [[MPI.buffer.fromaddress(address + start, min(MAX_MESSAGE_BYTES, nbytes - start)), MPI.BYTE]
            for start in range(0, nbytes, MAX_MESSAGE_BYTES)]


def exchange_step(comm, send: list | None, send_peer: int, recv: list | None, recv_peer: int) -> Step:
    """One message each way (either may be absent), as the host executor does it."""
    from mpi4py import MPI

    big = any(spec is not None and len(spec[0]) > MAX_MESSAGE_BYTES for spec in (send, recv))
    if big:
        def run() -> None:
            requests = [comm.Irecv(piece, recv_peer, TAG) for piece in (_pieces(recv) if recv else [])]
            requests += [comm.Isend(piece, send_peer, TAG) for piece in (_pieces(send) if send else [])]
            MPI.Request.Waitall(requests)
        return run
    if send is not None and recv is not None:
        return lambda: comm.Sendrecv(send, send_peer, TAG, recv, recv_peer, TAG)
    if send is not None:
        return lambda: comm.Send(send, send_peer, TAG)
    return lambda: comm.Recv(recv, recv_peer, TAG)


class DeviceScheduleOp:
    """One rank's schedule on (send, recv, scratch) device arrays; call it to run the collective once."""

    def __init__(self, context, comms: list, steps: np.ndarray, buffers: tuple, dtype: str, op: str) -> None:
        self.context, self.backend = context, context.backend
        self.comms, self.dtype, self.op = list(comms), dtype, op
        self.buffers = [b if b is not None else self.backend.empty(0, numpy_dtype(dtype)) for b in buffers]
        self.xp = self.backend.xp
        self.aware = context.gpu_aware.aware
        self._staging(steps)
        self.steps: list[Step] = [step for row in steps for step in self._compile(row)]

    def __call__(self) -> None:
        for step in self.steps:
            step()

    # -- views -----------------------------------------------------------------------------

    def _view(self, buf: int, off: int, count: int, nblocks: int, stride: int, shaped: bool = False):
        """A message block (1-D when contiguous) or, ``shaped``, an action operand (2-D when nblocks > 1)."""
        base = self.buffers[buf]
        if nblocks <= 1 or stride == count:
            flat = base[off : off + count * max(nblocks, 1)]
            return flat.reshape(nblocks, count) if shaped and nblocks > 1 else flat
        return self.backend.strided(base, off, count, nblocks, stride)

    def _block(self, row, prefix: str):
        return self._view(*(int(row[C[f"{prefix}_{part}"]]) for part in ("buf", "off", "count", "nblocks", "stride")))

    def _operand(self, row, prefix: str):
        nblocks, count = int(row[C["action_nblocks"]]), int(row[C["action_count"]])
        buf, off, stride = (int(row[C[f"{prefix}_{part}"]]) for part in ("buf", "off", "stride"))
        return self._view(buf, off, count, nblocks, stride, shaped=True)

    def _staging(self, steps: np.ndarray) -> None:
        """Contiguous device areas for packing strided messages; pinned host areas for staging."""
        dtype = numpy_dtype(self.dtype)
        sizes = {}
        for side in ("send", "recv"):
            totals = steps[:, C[f"{side}_count"]] * steps[:, C[f"{side}_nblocks"]]
            active = steps[:, C[f"{side}_peer"]] >= 0
            strided = active & (steps[:, C[f"{side}_nblocks"]] > 1)
            sizes[side] = (int(totals[strided].max(initial=0)), int(totals[active].max(initial=0)))
        self.pack = {side: self.backend.empty(sizes[side][0], dtype) for side in sizes}
        self.pinned = {side: self.backend.pinned(0 if self.aware else sizes[side][1], dtype) for side in sizes}

    # -- rows --------------------------------------------------------------------------------

    def _compile(self, row) -> list[Step]:
        steps: list[Step] = []
        if row[C["send_peer"]] >= 0 or row[C["recv_peer"]] >= 0:
            steps += self._message(row)
        action = int(row[C["action"]])
        if action in LIBRARY_ACTIONS:
            steps += self._library(row, action)
        elif action != ACT_NONE:
            steps += self._local(row, action)
        return steps

    def _message(self, row) -> list[Step]:
        backend, before, after = self.backend, [], []
        specs = {}
        for side in ("send", "recv"):
            peer = int(row[C[f"{side}_peer"]])
            if peer < 0:
                specs[side] = None
                continue
            block = self._block(row, side)
            flat = block
            if block.ndim == 2:  # strided: through a contiguous device area
                flat = self.pack[side][: block.size]
                shaped = flat.reshape(block.shape)
                if side == "send":
                    before.append(lambda s=shaped, b=block: self.xp.copyto(s, b))
                else:
                    after.append(lambda s=shaped, b=block: self.xp.copyto(b, s))
            if not self.aware:  # staged: through pinned host memory
                host = self.pinned[side][: flat.size]
                if side == "send":
                    before.append(lambda h=host, f=flat: backend.download(h, f))
                else:
                    after.insert(0, lambda h=host, f=flat: backend.upload(f, h))
                flat = host
            specs[side] = _mpi_buffer(backend, flat) if self.aware else _host_buffer(flat)
        move = exchange_step(self.comms[int(row[C["comm"]])], specs["send"], int(row[C["send_peer"]]),
                             specs["recv"], int(row[C["recv_peer"]]))
        return [*before, backend.synchronize, move, *after]

    def _local(self, row, action: int) -> list[Step]:
        dst, src = self._operand(row, "dst"), self._operand(row, "src")
        if action == ACT_COPY:
            if _same_elements(row, "src"):
                return []
            if int(row[C["src_buf"]]) == int(row[C["dst_buf"]]) and _overlap(row):
                return [lambda: self.xp.copyto(dst, src.copy())]
            return [lambda: self.xp.copyto(dst, src)]
        reduce = getattr(self.xp, UFUNCS[self.op])
        src2 = self._operand(row, "src2")
        # CuPy copies every input that may share memory with ``out`` unless it is the very same
        # object (cupy/_core/_kernel.pyx, _copy_in_args_if_needed): an accumulating row (dst = src)
        # would copy its operand on every call, inside the timed window. Hand it ``dst`` itself.
        src = dst if _same_elements(row, "src") else src
        src2 = dst if _same_elements(row, "src2") else src2
        return [lambda: reduce(src, src2, out=dst)]

    def _library(self, row, action: int) -> list[Step]:
        """A library row the MPI library runs (rows of other transports were cut out: executors/compose.py)."""
        from collectives.executors.compose import library_views

        comm = self.comms[int(row[C["comm"]])]
        src, dst, count = library_views(row, self.buffers, comm.Get_size())
        return self._mpi_collective(comm, LIBRARY_ACTIONS[action], src, dst, count, comm.Get_rank())

    def _mpi_collective(self, comm, kind: str, src, dst, count: int, position: int) -> list[Step]:
        from cython_ext.native import NativeCollective

        codes = (dtype_code(self.dtype), op_code(self.op), src is None)
        backend, gather = self.backend, kind == "allgather"
        if self.aware:
            native = NativeCollective(comm, kind, 0 if src is None else backend.ptr(src) if src.size else 0,
                                      backend.ptr(dst) if dst.size else 0, count, *codes, keepalive=(src, dst))
            return [backend.synchronize, native]
        host_dst = backend.pinned(dst.size, dst.dtype)
        host_src = None if src is None else backend.pinned(src.size, src.dtype)
        native = NativeCollective(comm, kind, 0 if host_src is None else host_address(host_src), host_address(host_dst),
                                  count, *codes, keepalive=(host_src, host_dst))
        if src is not None:
            download = (host_src, src)
        elif gather:  # in place: only this rank's block is input
            own = slice(position * count, (position + 1) * count)
            download = (host_dst[own], dst[own])
        else:
            download = (host_dst, dst)
        result = slice(0, dst.size if gather or src is not None else count)
        return [lambda: backend.download(*download), backend.synchronize, native,
                lambda: backend.upload(dst[result], host_dst[result])]


def _host_buffer(array: np.ndarray) -> list:
    from mpi4py import MPI

    return [MPI.buffer.fromaddress(host_address(array), array.nbytes), MPI.BYTE]


def _same_elements(row, prefix: str) -> bool:
    """Is an action's ``prefix`` operand (src | src2) exactly its destination's elements?"""
    if int(row[C[f"{prefix}_buf"]]) != int(row[C["dst_buf"]]) or row[C[f"{prefix}_off"]] != row[C["dst_off"]]:
        return False
    return int(row[C["action_nblocks"]]) <= 1 or row[C[f"{prefix}_stride"]] == row[C["dst_stride"]]


def _overlap(row) -> bool:
    """Do a copy's source and destination (same buffer) overlap without being the same elements?"""
    nblocks, count = int(row[C["action_nblocks"]]), int(row[C["action_count"]])

    def extent(prefix: str) -> tuple[int, int]:
        off, stride = int(row[C[f"{prefix}_off"]]), int(row[C[f"{prefix}_stride"]])
        return off, off + (nblocks - 1) * stride + count

    (a0, a1), (b0, b1) = extent("src"), extent("dst")
    return a0 < b1 and b0 < a1
