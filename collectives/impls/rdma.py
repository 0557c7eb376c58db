"""``rdma``: GDRAA-style one-sided collectives over UCX (puts into pre-registered peer buffers).

All-gather and reduce-scatter: ring, each step a put plus a flag. All-reduce (``gdraa``): the
segments scattered to their owners by put, reduced there, the reduced segment put to every
peer; two synchronisations per call. Buffers are mapped and rkeys exchanged once when the op
is built, never in the timed loop. Host memory here; CUDA memory where a GPU and a CUDA-enabled
UCX are present (see collectives/transports/rdma/ops.py; docs/RDMA.md).
"""

from __future__ import annotations

from dataclasses import replace

from collectives.call import CallSpec
from collectives.impls import LibraryCollective, register
from collectives.memory.context import HOST
from collectives.transports.rdma import ops as rdma

#: what ``algorithm: None`` means: ring for all-gather and reduce-scatter, gdraa for all-reduce
ONESIDED = "onesided"


@register("rdma")
class OneSided(LibraryCollective):
    transport = "rdma"
    default_algorithm = ONESIDED
    algorithms = (ONESIDED, "ring", "gdraa")

    def algorithm(self, call: CallSpec) -> str:
        name = call.algorithm or ONESIDED
        return rdma.ALGORITHMS.get(call.collective, name) if name == ONESIDED else name

    def algorithm_reason(self, call: CallSpec) -> str | None:
        wanted, name = rdma.ALGORITHMS[call.collective], self.algorithm(call)
        if name != wanted:
            return rdma.binding_reason() or f"the one-sided {call.collective} is {wanted!r}, not {name!r}"
        return None

    def describe(self, call, context=HOST, op=None):
        return replace(super().describe(call, context, op), resolved_algorithm=self.algorithm(call))
