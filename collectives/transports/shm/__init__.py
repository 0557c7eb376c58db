"""``shm``: the node's shared memory, no MPI inside a call (collectives/transports/shm/ops.py, cython_ext/shm.pyx).

As the ``shm`` implementation the whole collective over a communicator on one host; as a
hierarchical phase the intra-node one (``intra: shm``), on the node communicator, real or
virtual. The ``transport`` column says which path ran: ``shm:ll``, ``shm:copy``, ``shm:cma``."""

from __future__ import annotations

from collectives.memory.context import HOST
from collectives.schedules.rows import COMM_WORLD
from collectives.transports import Transport, register
from collectives.transports.shm import ops as shm
from collectives.version import library_version


@register("shm")
class SharedMemory(Transport):
    roles = ("intra",)
    strided = True
    no_progress = ("every copy and reduction is done by the ranks' own CPUs inside the call (cython_ext/shm.pyx): "
                   "no other agent moves the data, so nothing progresses while the caller computes")

    def reason(self, call, context=HOST, comm_index=COMM_WORLD):
        return shm.unsupported_reason(call, context, comm_index)

    def collective(self, context, comm, collective, send, recv, count, dtype, op, pieces=1, stride=0):
        return shm.build(comm, collective, send, recv, count, dtype, op, pieces=pieces, stride=stride)

    def moved_by(self, context, op=None):
        return (op.moved_by if op is not None else "") or "shm"

    def library(self, context):
        return "pccl-bench", library_version()
