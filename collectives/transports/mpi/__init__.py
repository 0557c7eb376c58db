"""``mpi``: the MPI library's own collectives, on host buffers or on device buffers (GPU-aware or staged).

The collectives cython_ext/native.pyx calls straight from C (``native.KINDS``) run there, without
the GIL; any other collective whose spec names the MPI library's call (``mpi_call``, through
mpi4py) runs that, on host buffers."""

from __future__ import annotations

from collectives import spec
from collectives.addresses import host_address
from collectives.dtypes import dtype_code, op_code
from collectives.libraries.mpi_library import mpi_library
from collectives.memory.context import HOST
from collectives.transports import Transport, register


@register("mpi")
class MPILibrary(Transport):
    in_executor = True  # both executors call MPI_Allgather / MPI_Reduce_scatter_block rows themselves

    def collective_reason(self, collective, context):
        from cython_ext import native

        if collective in native.KINDS:
            return None
        if spec.get(collective).mpi_call is None:
            return f"the MPI library has no {collective} here (its spec names no mpi_call)"
        if context.on_device:
            return f"the MPI library's {collective} runs on host buffers only (through mpi4py)"
        return None

    def reason(self, call, context=HOST, comm_index=0):
        from cython_ext import native

        return native.unsupported_reason(dtype_code(call.dtype), op_code(call.op), call.count)

    def nonblocking_reason(self, call, context):
        from cython_ext import nonblocking

        if call.collective not in nonblocking.KINDS:
            return (f"non-blocking mpi: MPI's non-blocking {call.collective} is not called here (only "
                    f"{', '.join(nonblocking.KINDS)})")
        if context.on_device and not context.gpu_aware.aware:
            return ("non-blocking mpi: staged MPI copies the buffers through host memory around the call; "
                    "only a GPU-aware MPI is posted on device buffers")
        return None

    def nonblocking(self, context, comm, collective, send, recv, count, dtype, op):
        from cython_ext.nonblocking import NonblockingCollective

        if context.on_device:
            from collectives.executors.device_ops import mpi_nonblocking

            return mpi_nonblocking(context, comm, collective, send, recv, count, dtype, op)
        return NonblockingCollective(comm, collective, host_address(send), host_address(recv), count,
                                     dtype_code(dtype), op_code(op), send is None, keepalive=(send, recv))

    def collective(self, context, comm, collective, send, recv, count, dtype, op):
        from cython_ext import native

        if collective not in native.KINDS:
            from cython_ext.core import PyCallOp

            return PyCallOp(comm, spec.get(collective).mpi_call(comm, send, recv, count, op), keepalive=(send, recv))
        if context.on_device:
            from collectives.executors.device_ops import mpi_collective

            return mpi_collective(context, comm, collective, send, recv, count, dtype, op)
        return native.NativeCollective(comm, collective, host_address(send), host_address(recv), count,
                                       dtype_code(dtype), op_code(op), send is None, keepalive=(send, recv))

    def moved_by(self, context, op=None):
        return context.mpi_transport

    def library(self, context):
        return mpi_library()
