"""``pccl-hier``: hierarchical all-gather / reduce-scatter / all-reduce over (node, rail)."""

from __future__ import annotations

import numpy as np

from collectives import tuning
from collectives.call import CallSpec
from collectives.dtypes import dtype_code, itemsize, numpy_dtype, op_code
from collectives.hier import (
    MPI_PHASE,
    RDMA_PHASE,
    XCCL_PHASE,
    hier_schedule,
    phase_algorithm,
    phase_problem,
    phases_needed,
)
from collectives.impls import Implementation, address, register
from collectives.schedule import ACT_MPI_ALLGATHER, ACT_MPI_REDUCE_SCATTER, COMM_INTER, COMM_INTRA
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

    def phase_plan(self, call: CallSpec) -> list[tuple[str, int, str, str]]:
        """(role, communicator index, phase, algorithm) of every phase the call runs."""
        intra, inter = self.phases(call)
        return [(role, comm, phase, phase_algorithm(spec, phase))
                for phase in phases_needed(call.collective)
                for role, comm, spec in (("intra", COMM_INTRA, intra), ("inter", COMM_INTER, inter))]

    def _shape_reason(self, call: CallSpec) -> str | None:
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
        return None

    def _library_reason(self, call: CallSpec, xccl_reason) -> str | None:
        for role, comm, phase, name in self.phase_plan(call):
            if name == MPI_PHASE:
                from cython_ext import native

                reason = native.unsupported_reason(dtype_code(call.dtype), op_code(call.op), call.count)
                if reason:
                    return f"{role} phase by MPI: {reason}"
            if name == XCCL_PHASE:
                reason = xccl_reason(comm)
                if reason:
                    return f"{role} phase by xccl: {reason}"
            if name == RDMA_PHASE:
                reason = self._rdma_reason(call, role, phase)
                if reason:
                    return f"{role} phase by rdma: {reason}"
        return None

    @staticmethod
    def _rdma_reason(call: CallSpec, role: str, phase: str) -> str | None:
        if role != "inter":
            return "the one-sided path runs the inter-node (rail) phase only"
        from collectives import rdma

        chunk = call.count // call.nranks if call.collective == "allreduce" else call.count
        return rdma.unsupported_reason(phase, "ring", call.nnodes, chunk, call.dtype)

    def _uses_rdma(self, call: CallSpec) -> bool:
        return any(name == RDMA_PHASE for _, _, _, name in self.phase_plan(call))

    def unsupported_reason(self, call: CallSpec) -> str | None:
        return self._shape_reason(call) or self._library_reason(
            call, lambda comm: "NCCL/RCCL run on GPU buffers only (device: cuda or rocm)")

    def device_unsupported_reason(self, call: CallSpec, context) -> str | None:
        return self._shape_reason(call) or self._library_reason(call, context.xccl_reason)

    def build(self, topo, call, sendbuf, recvbuf):
        from cython_ext.executor import ScheduleOp

        topo = as_topology(topo)

        intra, inter = self.phases(call)
        rank = topo.comm.Get_rank()
        schedule = hier_schedule(call.collective, topo.grid, rank, call.count, call.in_place, intra, inter)
        scratch = np.empty(schedule.scratch, dtype=numpy_dtype(call.dtype))
        if self._uses_rdma(call):
            from collectives import rdma

            return rdma.schedule_op(topo.comms, schedule.steps, (address(sendbuf), address(recvbuf), address(scratch)),
                                    call.dtype, call.op, keepalive=(sendbuf, recvbuf, scratch, schedule))
        return ScheduleOp(
            topo.comms, schedule.steps, address(sendbuf), address(recvbuf), address(scratch),
            itemsize(call.dtype), dtype_code(call.dtype), op_code(call.op),
            keepalive=(sendbuf, recvbuf, scratch, schedule),
        )

    def build_device(self, topo, call, sendbuf, recvbuf, context):
        from collectives.gpu_executor import DeviceScheduleOp

        topo = as_topology(topo)
        intra, inter = self.phases(call)
        schedule = hier_schedule(call.collective, topo.grid, topo.comm.Get_rank(), call.count, call.in_place,
                                 intra, inter)
        actions = {"allgather": ACT_MPI_ALLGATHER, "reduce_scatter": ACT_MPI_REDUCE_SCATTER}
        libraries = {(comm, actions[phase]): XCCL_PHASE
                     for _, comm, phase, name in self.phase_plan(call) if name == XCCL_PHASE}
        scratch = context.backend.empty(schedule.scratch, numpy_dtype(call.dtype))
        return DeviceScheduleOp(context, topo.comms, schedule.steps, (sendbuf, recvbuf, scratch), call.dtype,
                                call.op, libraries)

    def describe(self, call):
        intra, inter = self.phases(call)
        transport = "mpi"
        if self._uses_rdma(call):
            from collectives import rdma

            transport = f"{rdma.last_transport() or 'ucx'}/mpi"  # rail phase / intra-node phase
        return {"transport": transport, "library": "pccl-bench", "library_version": library_version(),
                "resolved_algorithm": f"{inter}/{intra}"}

    def describe_device(self, call, context):
        """transport: inter-node phase's, then intra-node phase's when they differ (``mpi-staged/nccl``)."""
        by_role: dict[str, list[str]] = {"inter": [], "intra": []}
        for role, _, _, name in self.phase_plan(call):
            moved = context.xccl_transport if name == XCCL_PHASE else context.mpi_transport
            if moved not in by_role[role]:
                by_role[role].append(moved)
        roles = ["+".join(by_role["inter"]), "+".join(by_role["intra"])]
        return {**self.describe(call), "transport": "/".join(dict.fromkeys(roles))}
