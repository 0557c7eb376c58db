"""``mpi``: the MPI library's own collectives, on host buffers or on device buffers (GPU-aware or staged)."""

from __future__ import annotations

from collectives.dtypes import dtype_code, op_code
from collectives.memory.backends import host_address
from collectives.memory.context import HOST
from collectives.transports import Transport, register
from collectives.transports.mpi.library import mpi_library


@register("mpi")
class MPILibrary(Transport):
    in_executor = True  # both executors call MPI_Allgather / MPI_Reduce_scatter_block rows themselves

    def reason(self, call, context=HOST, comm_index=0):
        from cython_ext import native

        return native.unsupported_reason(dtype_code(call.dtype), op_code(call.op), call.count)

    def collective(self, context, comm, collective, send, recv, count, dtype, op):
        if context.on_device:
            from collectives.executors.device_ops import mpi_collective

            return mpi_collective(context, comm, collective, send, recv, count, dtype, op)
        from cython_ext.native import NativeCollective

        return NativeCollective(comm, collective, host_address(send), host_address(recv), count, dtype_code(dtype),
                                op_code(op), send is None, keepalive=(send, recv))

    def moved_by(self, context, op=None):
        return context.mpi_transport

    def library(self, context):
        return mpi_library()
