"""Implementation registry: who performs a collective call.

Adding one = a module here with ``@register("name")`` on an Implementation subclass, plus
its import line at the bottom. One interface for host and device buffers: the ``context``
(collectives/memory/context.py: ``HOST``, or a GPU job's DeviceContext) says where the buffers
live and gives the executor, the chaining and the library facts that depend on it.
``unsupported_reason`` must give the same answer on every rank (it decides before any
communication).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from collectives import transports
from collectives.call import CallSpec
from collectives.memory.context import HOST
from collectives.registry import lookup
from collectives.schedules.topology import as_topology

IMPLEMENTATIONS: dict[str, type[Implementation]] = {}


@dataclass(frozen=True)
class Provenance:
    """What performs a call, as its row records it. Asked of the implementation before the op
    exists (an unsupported cell still says what would have run) and again with the op, whose
    own facts (shm's path, UCX's lanes) are the truth once it is built."""

    transport: str  # what moves the bytes: mpi, mpi-staged, nccl, shm:ll, ucx:cma, ucx:tcp/shm:copy
    library: str
    library_version: str
    resolved_algorithm: str

    def columns(self) -> dict[str, str]:
        return dict(vars(self))  # its fields are strings: asdict's deep copy cost ~35 us a cell, twice


def register(name: str):
    def wrap(cls: type[Implementation]) -> type[Implementation]:
        cls.name = name
        IMPLEMENTATIONS[name] = cls
        return cls

    return wrap


def get(name: str) -> Implementation:
    return lookup(IMPLEMENTATIONS, name, "implementation")()


class Implementation:
    name: ClassVar[str]
    #: what ``algorithm: None`` means for this implementation
    default_algorithm: ClassVar[str]
    #: algorithms this implementation accepts (None: any registered schedule)
    algorithms: ClassVar[tuple[str, ...] | None] = None
    #: False for implementations that run on device buffers only (NCCL/RCCL)
    host_buffers: ClassVar[bool] = True
    #: why a non-blocking call of it would move nothing while its caller computes (None: it can progress)
    no_progress: ClassVar[str | None] = None

    def algorithm(self, call: CallSpec) -> str:
        return call.algorithm or self.default_algorithm

    def unsupported_reason(self, call: CallSpec, context=HOST) -> str | None:
        return None

    def nonblocking_reason(self, call: CallSpec, context=HOST) -> str | None:
        """Why ``call``, non-blocking, cannot be posted and progress while the caller computes (None:
        it can, or the call is blocking). Asked before ``unsupported_reason``; a cell it refuses is
        ``unsupported`` with this reason, never timed as if it overlapped."""
        if not call.nonblocking or self.no_progress is None:
            return None
        return f"non-blocking {self.name}: {self.no_progress}"

    def build(self, topo, call: CallSpec, sendbuf, recvbuf, context=HOST):
        """An op that performs ``call`` on these buffers of ``context.backend`` when invoked (a
        cython_ext CollOp on the host, a callable on a device). ``topo``: a collectives.schedules.topology.Topology
        or a communicator."""
        raise NotImplementedError

    def describe(self, call: CallSpec, context=HOST, op=None) -> Provenance:
        """What performs ``call`` (``op``: the op ``build`` made for it, once there is one)."""
        raise NotImplementedError


class LibraryCollective(Implementation):
    """A library's own collective over the whole communicator: one transport's, from the registry."""

    transport: ClassVar[str]
    default_algorithm = "native"
    algorithms = ("native",)

    def algorithm_reason(self, call: CallSpec) -> str | None:
        if self.algorithm(call) != "native":
            return f"{self.name} runs the library's own algorithm ('native'), not {call.algorithm!r}"
        return None

    def nonblocking_reason(self, call, context=HOST):
        return transports.get(self.transport).nonblocking_reason(call, context) if call.nonblocking else None

    def unsupported_reason(self, call, context=HOST):
        transport = transports.get(self.transport)
        return (transport.collective_reason(call.collective, context) or self.algorithm_reason(call)
                or transport.reason(call, context))

    def build(self, topo, call, sendbuf, recvbuf, context=HOST):
        transport = transports.get(self.transport)
        make = transport.nonblocking if call.nonblocking else transport.collective
        return make(context, as_topology(topo).comm, call.collective, sendbuf, recvbuf, call.count, call.dtype,
                    call.op)

    def describe(self, call, context=HOST, op=None):
        transport = transports.get(self.transport)
        library, version = transport.library(context)
        return Provenance(transport.moved_by(context, op), library, version, "native")


from collectives.impls import flat, hier, mpi, rdma, shm, xccl  # noqa: E402,F401  (registers)
