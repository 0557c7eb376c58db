"""``xccl``: NCCL (CUDA) or RCCL (ROCm) collectives through ``cupy.cuda.nccl`` (the vendor baseline).

GPU buffers only. The communicator is made once per (MPI communicator, GPU), its unique
id broadcast over MPI; NCCL's in-place conventions are mapped to MPI's (collectives/gpu_ops.py).
"""

from __future__ import annotations

from collectives.call import CallSpec
from collectives.impls import Implementation, register
from collectives.schedule import COMM_WORLD
from collectives.topology import as_topology


@register("xccl")
class VendorLibrary(Implementation):
    default_algorithm = "native"
    algorithms = ("native",)
    host_buffers = False

    def _algorithm_reason(self, call: CallSpec) -> str | None:
        if self.algorithm(call) != "native":
            return f"xccl runs the library's own algorithm ('native'), not {call.algorithm!r}"
        return None

    def unsupported_reason(self, call: CallSpec) -> str | None:
        return self._algorithm_reason(call) or "xccl (NCCL/RCCL) runs on GPU buffers only (device: cuda or rocm)"

    def device_unsupported_reason(self, call: CallSpec, context) -> str | None:
        return self._algorithm_reason(call) or context.xccl_reason(COMM_WORLD) or None

    def build(self, topo, call, sendbuf, recvbuf):
        raise ValueError(self.unsupported_reason(call))

    def build_device(self, topo, call, sendbuf, recvbuf, context):
        from collectives.gpu_ops import xccl_collective

        topo = as_topology(topo)
        return xccl_collective(context, topo.comm, call.collective, sendbuf, recvbuf, call.count, call.dtype, call.op)

    def describe(self, call):
        return {"transport": "nccl", "library": "NCCL/RCCL", "library_version": "", "resolved_algorithm": "native"}

    def describe_device(self, call, context):
        return {"transport": context.xccl_transport, "library": context.xccl.library,
                "library_version": context.xccl.version, "resolved_algorithm": "native"}
