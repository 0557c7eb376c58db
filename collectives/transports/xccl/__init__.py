"""``xccl``: NCCL (CUDA) or RCCL (ROCm) through ``cupy.cuda.nccl``; GPU buffers only.

The communicator is made once per (MPI communicator, GPU), its unique id broadcast over
MPI; NCCL's in-place conventions are mapped to MPI's (collectives/executors/device_ops.py)."""

from __future__ import annotations

from collectives.memory.context import HOST
from collectives.transports import Transport, register


@register("xccl")
class VendorLibrary(Transport):
    stream_ordered = True

    def reason(self, call, context=HOST, comm_index=0):
        return context.xccl_reason(comm_index) or None

    def nonblocking_reason(self, call, context):
        # NCCL/RCCL only enqueue on the rank's stream: the GPU moves the data while the host (or a
        # compute kernel on another stream) works; on the host, ``reason`` refuses the cell
        return None

    def nonblocking(self, context, comm, collective, send, recv, count, dtype, op):
        from collectives.executors.device_ops import xccl_nonblocking

        return xccl_nonblocking(context, comm, collective, send, recv, count, dtype, op)

    def collective(self, context, comm, collective, send, recv, count, dtype, op):
        from collectives.executors.device_ops import xccl_collective

        return xccl_collective(context, comm, collective, send, recv, count, dtype, op)

    def moved_by(self, context, op=None):
        return context.xccl_transport if context.on_device else "nccl"

    def library(self, context):
        if context.on_device:
            return context.xccl.library, context.xccl.version
        return "NCCL/RCCL", ""
