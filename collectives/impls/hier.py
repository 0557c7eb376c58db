"""``pccl-hier``: hierarchical all-gather / reduce-scatter / all-reduce over (node, rail)."""

from __future__ import annotations

import numpy as np

from collectives import tuning
from collectives.call import CallSpec
from collectives.dtypes import dtype_code, itemsize, numpy_dtype, op_code
from collectives.hier import MPI_PHASE, hier_schedule, phase_algorithm, phase_problem, phases_needed
from collectives.impls import Implementation, address, register
from collectives.topology import as_topology
from collectives.version import library_version


@register("pccl-hier")
class Hierarchical(Implementation):
    default_algorithm = "hier"
    algorithms = ("hier",)
    default_intra = "ring"
    default_inter = "rd"

    def phases(self, call: CallSpec) -> tuple[str, str]:
        """(intra, inter); ``auto`` ones come from the tuning table's ``inter/intra`` choice."""
        intra, inter = call.intra or self.default_intra, call.inter or self.default_inter
        if tuning.AUTO in (intra, inter):
            tuned_inter, _, tuned_intra = tuning.choose(
                call.collective, self.name, call.nranks, call.nnodes, call.bytes_total).partition("/")
            intra = tuned_intra if intra == tuning.AUTO else intra
            inter = tuned_inter if inter == tuning.AUTO else inter
        return intra, inter

    def unsupported_reason(self, call: CallSpec) -> str | None:
        if self.algorithm(call) != "hier":
            return f"pccl-hier composes phases (intra/inter), it has no algorithm {call.algorithm!r}"
        try:
            intra, inter = self.phases(call)
        except ValueError as error:
            return str(error)
        for phase in phases_needed(call.collective):
            for role, spec in (("intra", intra), ("inter", inter)):
                problem = phase_problem(spec, phase)
                if problem:
                    return f"{role} phase: {problem}"
                if phase_algorithm(spec, phase) == MPI_PHASE:
                    from cython_ext import native

                    reason = native.unsupported_reason(dtype_code(call.dtype), op_code(call.op), call.count)
                    if reason:
                        return f"{role} phase by MPI: {reason}"
        return None

    def build(self, topo, call, sendbuf, recvbuf):
        from cython_ext.executor import ScheduleOp

        topo = as_topology(topo)

        intra, inter = self.phases(call)
        rank = topo.comm.Get_rank()
        schedule = hier_schedule(call.collective, topo.grid, rank, call.count, call.in_place, intra, inter)
        scratch = np.empty(schedule.scratch, dtype=numpy_dtype(call.dtype))
        return ScheduleOp(
            topo.comms, schedule.steps, address(sendbuf), address(recvbuf), address(scratch),
            itemsize(call.dtype), dtype_code(call.dtype), op_code(call.op),
            keepalive=(sendbuf, recvbuf, scratch, schedule),
        )

    def describe(self, call):
        intra, inter = self.phases(call)
        return {"transport": "mpi", "library": "pccl-bench", "library_version": library_version(),
                "resolved_algorithm": f"{inter}/{intra}"}
