"""``pccl-hier``: hierarchical all-gather / reduce-scatter / all-reduce over (node, rail).

A phase is any registered schedule (run by the context's executor) or a transport from
collectives/transports (its collective on the node or rail communicator)."""

from __future__ import annotations

from collectives import transports
from collectives.call import CallSpec
from collectives.dtypes import numpy_dtype
from collectives.executors.compose import phase_ops, schedule_op
from collectives.impls import Implementation, Provenance, register
from collectives.memory.context import HOST
from collectives.schedules import tuning
from collectives.schedules.hier import (
    composition_problem,
    hier_schedule,
    phase_algorithm,
    phases_needed,
    tail_phases,
)
from collectives.schedules.rows import COMM_INTER, COMM_INTRA, LIBRARY_ACTION_OF
from collectives.schedules.topology import as_topology
from collectives.version import library_version

ROLES = (("intra", COMM_INTRA), ("inter", COMM_INTER))


@register("pccl-hier")
class Hierarchical(Implementation):
    default_algorithm = "hier"
    algorithms = ("hier",)
    default_intra = "ring"
    default_inter = "rd"
    no_progress = ("its phases run one after another inside the call, on the calling thread (each a schedule "
                   "executor or a transport's whole collective): no request outlives the call and there is no "
                   "progress thread, so nothing moves while the caller computes")

    def phases(self, call: CallSpec) -> tuple[str, str]:
        """(intra, inter); ``auto`` ones come from the tuning table's ``inter/intra`` choice."""
        intra, inter = call.intra or self.default_intra, call.inter or self.default_inter
        if tuning.AUTO in (intra, inter):
            tuned_inter, _, tuned_intra = tuning.choose(
                call.collective, self.name, call.nranks, call.nnodes, call.bytes_total, in_place=call.in_place
            ).partition("/")
            intra = tuned_intra if intra == tuning.AUTO else intra
            inter = tuned_inter if inter == tuning.AUTO else inter
        return intra, inter

    def phase_plan(self, call: CallSpec) -> list[tuple[str, int, str, str]]:
        """(role, communicator index, phase, algorithm or transport) of every phase the call runs."""
        intra, inter = self.phases(call)
        specs = {"intra": intra, "inter": inter}
        return [(role, comm, phase, phase_algorithm(specs[role], phase))
                for phase in phases_needed(call.collective) for role, comm in ROLES] + [
                ("intra", COMM_INTRA, phase, intra) for phase in tail_phases(call.collective, intra)]

    def _shape_reason(self, call: CallSpec) -> str | None:
        if self.algorithm(call) != "hier":
            return f"pccl-hier composes phases (intra/inter), it has no algorithm {call.algorithm!r}"
        try:
            intra, inter = self.phases(call)
        except ValueError as error:
            return str(error)
        return composition_problem(call.collective, intra, inter)

    @staticmethod
    def phase_call(call: CallSpec, role: str, phase: str) -> CallSpec:
        """A phase as a call of its own on the node (intra) or rail (inter) communicator."""
        per_node = call.nranks // max(call.nnodes, 1)
        chunk = call.count // call.nranks if call.collective == "allreduce" else call.count
        if role == "inter":
            return CallSpec(phase, call.nnodes, chunk, call.dtype, call.op)
        return CallSpec(phase, per_node, call.nnodes * chunk, call.dtype, call.op)

    def _transport_reason(self, call: CallSpec, context) -> str | None:
        for role, comm, phase, name in self.phase_plan(call):
            transport = transports.TRANSPORTS.get(name)
            if transport is None:
                continue
            if role not in transport.roles:
                return f"{role} phase by {name}: it runs the {'/'.join(transport.roles)} phase only"
            reason = transport.collective_reason(phase, context) or transport.reason(
                self.phase_call(call, role, phase), context, comm)
            if reason:
                return f"{role} phase by {name}: {reason}"
        return None

    def unsupported_reason(self, call, context=HOST):
        return self._shape_reason(call) or self._transport_reason(call, context)

    def build(self, topo, call, sendbuf, recvbuf, context=HOST):
        topo = as_topology(topo)
        intra, inter = self.phases(call)
        schedule = hier_schedule(call.collective, topo.grid, topo.comm.Get_rank(), call.count, call.in_place,
                                 intra, inter)
        cuts = {(comm, LIBRARY_ACTION_OF[phase]): transports.TRANSPORTS[name]
                for _, comm, phase, name in self.phase_plan(call) if name in transports.TRANSPORTS}
        scratch = context.backend.empty(schedule.scratch, numpy_dtype(call.dtype))
        return schedule_op(context, topo.comms, schedule.steps, (sendbuf, recvbuf, scratch), call.dtype, call.op,
                           cuts)

    def describe(self, call, context=HOST, op=None):
        """transport: the inter-node phase's, then the intra-node phase's when they differ (``ucx:cma/mpi``,
        ``mpi-staged/nccl``); schedule phases move their bytes by the executor's MPI. With the op, each
        transport phase says what its own ops moved (``shm:ll+shm:copy`` where sizes differ), and a phase
        that built none (an all-reduce below one element per rank has no phases) is not named."""
        intra, inter = self.phases(call)
        by_role: dict[str, list[str]] = {"inter": [], "intra": []}
        for role, comm, phase, name in self.phase_plan(call):
            transport = transports.TRANSPORTS.get(name)
            if transport is None or transport.in_executor:
                moved = [context.mpi_transport if transport is None else transport.moved_by(context)]
            elif op is None:
                moved = [transport.moved_by(context)]
            else:
                moved = [transport.moved_by(context, part) for part in phase_ops(op, comm, LIBRARY_ACTION_OF[phase])]
            by_role[role].extend(way for way in moved if way not in by_role[role])
        roles = ["+".join(by_role["inter"]), "+".join(by_role["intra"])]
        return Provenance("/".join(dict.fromkeys(role for role in roles if role)), "pccl-bench", library_version(),
                          f"{inter}/{intra}")
