"""``rdma``: one-sided puts over UCX into pre-registered peer buffers (collectives/transports/rdma/ops.py).

As a hierarchical phase it runs the inter-node (rail) phase; as the ``rdma`` implementation
the whole collective. Buffers are mapped and rkeys exchanged when the op is built."""

from __future__ import annotations

from collectives.memory.context import HOST
from collectives.transports import Transport, register
from collectives.transports.rdma import ops as rdma


@register("rdma")
class OneSidedUcx(Transport):
    roles = ("inter",)
    no_progress = ("the one-sided collective progresses its UCX worker (ucp_worker_progress) inside the call until "
                   "its puts and flags have landed (cython_ext/rdma.pyx); with no progress thread nothing moves "
                   "while the caller computes")

    def reason(self, call, context=HOST, comm_index=0):
        reason = rdma.unsupported_reason(call.collective, rdma.ALGORITHMS[call.collective], call.nranks, call.count,
                                         call.dtype)
        if reason or not context.on_device:
            return reason
        return rdma.device_reason(context.device, context.backend)

    def collective(self, context, comm, collective, send, recv, count, dtype, op):
        # on the host UCX allocates the landing slots itself (backend None)
        backend = context.backend if context.on_device else None
        return rdma.build(comm, collective, send, recv, count, dtype, op, backend=backend)

    def moved_by(self, context, op=None):
        return (op.moved_by if op is not None else "") or "ucx"

    def library(self, context):
        return "UCX", "" if rdma.binding_reason() else rdma.ucx_library()[0]
