"""``mpi``: the MPI library's own collectives (the system-MPI baseline)."""

from __future__ import annotations

from collectives.call import CallSpec
from collectives.dtypes import dtype_code, op_code
from collectives.impls import Implementation, address, register
from collectives.mpiinfo import mpi_library
from collectives.topology import as_topology


@register("mpi")
class MPINative(Implementation):
    default_algorithm = "native"
    algorithms = ("native",)

    def unsupported_reason(self, call: CallSpec) -> str | None:
        from cython_ext import native

        if self.algorithm(call) != "native":
            return f"the mpi implementation runs the library's own algorithm ('native'), not {call.algorithm!r}"
        return native.unsupported_reason(dtype_code(call.dtype), op_code(call.op), call.count)

    def build(self, topo, call, sendbuf, recvbuf):
        from cython_ext.native import NativeCollective

        topo = as_topology(topo)

        return NativeCollective(
            topo.comm, call.collective, address(sendbuf), address(recvbuf), call.count,
            dtype_code(call.dtype), op_code(call.op), call.in_place, keepalive=(sendbuf, recvbuf),
        )

    def build_device(self, topo, call, sendbuf, recvbuf, context):
        from collectives.gpu_ops import mpi_collective

        topo = as_topology(topo)
        return mpi_collective(context, topo.comm, call.collective, sendbuf, recvbuf, call.count, call.dtype, call.op)

    def describe(self, call):
        name, version = mpi_library()
        return {"transport": "mpi", "library": name, "library_version": version, "resolved_algorithm": "native"}
