"""Transports: who runs a whole collective on a communicator.

The flat library implementations (``mpi``, ``xccl``, ``rdma``) are one transport's collective
over the whole communicator; a hierarchical phase named after a transport (``intra: xccl``,
``inter: rdma``) is that transport's collective on the node or rail communicator: the
schedule's library rows (``ACT_MPI_*``) are cut out and run by it (collectives/executors/compose.py).
pccl-hier and the suite validation iterate this registry. Adding a transport is one module
here with ``@register`` plus its import line at the bottom. A transport runs the collectives it
has a call for (``collectives``); any other is declined by name, never run as another.
"""

from __future__ import annotations

from typing import ClassVar

from collectives.call import CallSpec
from collectives.registry import lookup
from collectives.schedules.rows import COMM_WORLD


class Transport:
    name: ClassVar[str]
    #: the schedule executors run this transport's library rows themselves (nothing is cut out)
    in_executor: ClassVar[bool] = False
    #: its calls queue on the rank's device stream, so nothing needs waiting for before them
    stream_ordered: ClassVar[bool] = False
    #: the hierarchical roles it can run
    roles: ClassVar[tuple[str, ...]] = ("intra", "inter")
    #: it takes the ranks' blocks interleaved (``collective(..., pieces=, stride=)``: a hierarchical
    #: phase in place, no packing; collectives/schedules/rows.py, StepList.mpi_collective)
    strided: ClassVar[bool] = False
    #: the collectives it has a call for
    collectives: ClassVar[tuple[str, ...]] = ("allgather", "reduce_scatter", "allreduce")

    def collective_reason(self, collective: str, context) -> str | None:
        """Why it has no call for ``collective`` on the context's buffers, or None (asked before ``reason``)."""
        if collective in self.collectives:
            return None
        return f"{self.name} has no {collective} (it runs {', '.join(self.collectives)})"

    def reason(self, call: CallSpec, context, comm_index: int = COMM_WORLD) -> str | None:
        """Why it cannot run ``call`` (a whole collective, or a phase on a sub-communicator) on the
        context's buffers, or None. The same answer on every rank (decided before any communication)."""
        return None

    #: why a non-blocking call of its collective would move nothing while the caller computes
    no_progress: ClassVar[str] = "its collective runs whole inside the call, on the calling thread"

    def nonblocking_reason(self, call: CallSpec, context) -> str | None:
        """Why it cannot post ``call`` and let it progress while the caller computes, or None
        (``nonblocking`` builds it then)."""
        return f"non-blocking {self.name}: {self.no_progress}"

    def nonblocking(self, context, comm, collective: str, send, recv, count: int, dtype: str, op: str):
        """``collective`` posted and waited for: an op whose call is post then wait, and that the
        context's ``overlapped`` splits with a compute between them (only where no reason refuses it)."""
        raise NotImplementedError(f"non-blocking {self.name}: {self.no_progress}")

    def collective(self, context, comm, collective: str, send, recv, count: int, dtype: str, op: str):
        """An op that runs ``collective`` on these buffers of ``context.backend`` (``send`` None: in
        place, MPI semantics); collective over ``comm`` (communicators are made here on first use).
        A ``strided`` transport also takes ``pieces`` and ``stride`` (the ranks' blocks interleaved)."""
        raise NotImplementedError

    def moved_by(self, context, op=None) -> str:
        """The ``transport`` column: what moves the bytes (``mpi``, ``mpi-staged``, ``nccl``, ``ucx:cma``).
        ``op``: the op this transport built, once there is one: where the choice is made when it is
        built (shm's path, UCX's lanes), the op's own ``moved_by`` says it; before, the transport's name."""
        raise NotImplementedError

    def library(self, context) -> tuple[str, str]:
        """(library, library_version) of the library behind it."""
        raise NotImplementedError


TRANSPORTS: dict[str, Transport] = {}


def register(name: str):
    def wrap(cls: type[Transport]) -> type[Transport]:
        cls.name = name
        TRANSPORTS[name] = cls()
        return cls

    return wrap


def get(name: str) -> Transport:
    return lookup(TRANSPORTS, name, "transport")


from collectives.transports import mpi, rdma, shm, xccl  # noqa: E402,F401,I001  (registers)
