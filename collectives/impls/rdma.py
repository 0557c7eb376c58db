"""``rdma``: GDRAA-style one-sided collectives over UCX (puts into pre-registered peer buffers).

All-gather and reduce-scatter: ring, each step a put plus a flag. All-reduce (``gdraa``): the
segments scattered to their owners by put, reduced there, the reduced segment put to every
peer; two synchronisations per call. Buffers are mapped and rkeys exchanged once when the op
is built, never in the timed loop. Host memory here; CUDA memory where a GPU and a CUDA-enabled
UCX are present (see collectives/rdma.py; docs/RDMA.md).
"""

from __future__ import annotations

from collectives import rdma
from collectives.call import CallSpec
from collectives.impls import Implementation, register
from collectives.topology import as_topology

#: what ``algorithm: None`` means: ring for all-gather and reduce-scatter, gdraa for all-reduce
ONESIDED = "onesided"


@register("rdma")
class OneSided(Implementation):
    default_algorithm = ONESIDED
    algorithms = (ONESIDED, "ring", "gdraa")

    def algorithm(self, call: CallSpec) -> str:
        name = call.algorithm or ONESIDED
        return rdma.ALGORITHMS[call.collective] if name == ONESIDED else name

    def unsupported_reason(self, call: CallSpec) -> str | None:
        return rdma.unsupported_reason(call.collective, self.algorithm(call), call.nranks, call.count, call.dtype)

    def build(self, topo, call, sendbuf, recvbuf):
        topo = as_topology(topo)
        return rdma.build(topo.comm, call.collective, sendbuf, recvbuf, call.count, call.dtype, call.op)

    def describe(self, call):
        """The transport UCX chose (from its lanes) once an op was built in this process, else ``ucx``."""
        version = ""
        if rdma.binding_reason() is None:
            version = rdma.ucx_library()[0]
        return {"transport": rdma.last_transport() or "ucx", "library": "UCX", "library_version": version,
                "resolved_algorithm": self.algorithm(call)}

    # -- device buffers ---------------------------------------------------------------

    def device_unsupported_reason(self, call: CallSpec, context) -> str | None:
        reason = self.unsupported_reason(call)
        if reason:
            return reason
        return rdma.device_reason(context.device, context.backend)

    def build_device(self, topo, call, sendbuf, recvbuf, context):
        topo = as_topology(topo)
        return rdma.build(topo.comm, call.collective, sendbuf, recvbuf, call.count, call.dtype, call.op,
                          backend=context.backend)

    def describe_device(self, call, context):
        return self.describe(call)
