"""``pccl-flat``: one schedule (ring, ...) over the whole communicator, run by the Cython executor."""

from __future__ import annotations

import numpy as np

from collectives import algorithms, tuning
from collectives.call import CallSpec
from collectives.dtypes import dtype_code, itemsize, numpy_dtype, op_code
from collectives.impls import Implementation, address, register
from collectives.topology import as_topology
from collectives.version import library_version


@register("pccl-flat")
class FlatSchedule(Implementation):
    default_algorithm = "ring"

    def algorithm(self, call: CallSpec) -> str:
        name = call.algorithm or self.default_algorithm
        if name == tuning.AUTO:
            return tuning.choose(call.collective, self.name, call.nranks, call.nnodes, call.bytes_total)
        return name

    def unsupported_reason(self, call: CallSpec) -> str | None:
        try:
            return algorithms.unsupported_reason(call.collective, self.algorithm(call))
        except ValueError as error:
            return str(error)

    def build(self, topo, call, sendbuf, recvbuf):
        from cython_ext.executor import ScheduleOp

        topo = as_topology(topo)

        schedule = algorithms.schedule_for(
            call.collective, self.algorithm(call), topo.grid.nranks, topo.comm.Get_rank(), call.count, call.in_place
        )
        scratch = np.empty(schedule.scratch, dtype=numpy_dtype(call.dtype))
        return ScheduleOp(
            [topo.comm], schedule.steps, address(sendbuf), address(recvbuf), address(scratch),
            itemsize(call.dtype), dtype_code(call.dtype), op_code(call.op),
            keepalive=(sendbuf, recvbuf, scratch, schedule),
        )

    def build_device(self, topo, call, sendbuf, recvbuf, context):
        from collectives.gpu_executor import DeviceScheduleOp

        topo = as_topology(topo)
        schedule = algorithms.schedule_for(
            call.collective, self.algorithm(call), topo.grid.nranks, topo.comm.Get_rank(), call.count, call.in_place
        )
        scratch = context.backend.empty(schedule.scratch, numpy_dtype(call.dtype))
        return DeviceScheduleOp(context, [topo.comm], schedule.steps, (sendbuf, recvbuf, scratch), call.dtype, call.op)

    def describe(self, call):
        return {"transport": "mpi", "library": "pccl-bench", "library_version": library_version(),
                "resolved_algorithm": self.algorithm(call)}
