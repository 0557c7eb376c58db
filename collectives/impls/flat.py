"""``pccl-flat``: one schedule (ring, ...) over the whole communicator, run by the context's executor."""

from __future__ import annotations

from collectives.call import CallSpec
from collectives.dtypes import numpy_dtype
from collectives.impls import Implementation, Provenance, register
from collectives.memory.context import HOST
from collectives.schedules import algorithms, tuning
from collectives.schedules.topology import as_topology
from collectives.version import library_version


@register("pccl-flat")
class FlatSchedule(Implementation):
    default_algorithm = "ring"
    no_progress = ("its executor (cython_ext/executor.pyx ScheduleOp) runs every step of the schedule inside the "
                   "call, on the calling thread, and returns when the last is done: no request outlives the call "
                   "and there is no progress thread, so nothing moves while the caller computes")

    def algorithm(self, call: CallSpec) -> str:
        name = call.algorithm or self.default_algorithm
        if name == tuning.AUTO:
            return tuning.choose(call.collective, self.name, call.nranks, call.nnodes, call.bytes_total,
                                 in_place=call.in_place)
        return name

    def unsupported_reason(self, call, context=HOST):
        try:
            return algorithms.unsupported_reason(call.collective, self.algorithm(call))
        except ValueError as error:
            return str(error)

    def build(self, topo, call, sendbuf, recvbuf, context=HOST):
        topo = as_topology(topo)
        schedule = algorithms.schedule_for(
            call.collective, self.algorithm(call), topo.grid.nranks, topo.comm.Get_rank(), call.count, call.in_place
        )
        scratch = context.backend.empty(schedule.scratch, numpy_dtype(call.dtype))
        return context.executor([topo.comm], schedule.steps, (sendbuf, recvbuf, scratch), call.dtype, call.op)

    def describe(self, call, context=HOST, op=None):
        return Provenance(context.mpi_transport, "pccl-bench", library_version(), self.algorithm(call))
