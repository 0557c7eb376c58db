"""What is opened on a communicator, kept on it: the way NCCL keeps its state on the ncclComm_t.

A ``Resources`` holds named entries, each opened once on first use and released by ``close()``:
a transport's typed state on one communicator (``shm``: the segment and the CMA verdict; ``rdma``:
the UCX endpoints and what UCX moves puts with), the topologies made of a communicator, and a
job's own state on its Topology (the harness's memory contexts and clock).

``resources_of(comm)`` is the one cached on an MPI communicator itself (MPI attribute caching):
it follows the handle whatever Python object wraps it, and MPI drops it when the communicator is
freed, so a recycled handle never finds a freed communicator's state (as a dict keyed by handle
would). A Topology owns one for the job and closes its sub-communicators' with it
(collectives/schedules/topology.py). Generic on purpose: it sits below the transports, which put
their own entries into it.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import TypeVar

Entry = TypeVar("Entry")


class Resources:
    """Named entries opened on one communicator (or one job), released last opened first."""

    def __init__(self) -> None:
        self._entries: dict[str, object] = {}

    def __contains__(self, name: str) -> bool:
        return name in self._entries

    def names(self) -> list[str]:
        """The open entries' names, in the order they were opened."""
        return list(self._entries)

    def get(self, name: str):
        """The entry ``name``, or None when it is not open."""
        return self._entries.get(name)

    def open(self, name: str, make: Callable[[], Entry]) -> Entry:
        """The entry ``name``, made by ``make()`` on first use. ``make`` is often collective (every rank
        opens the same names in the same order); when it raises, nothing is kept and the next use retries."""
        if name not in self._entries:
            self._entries[name] = make()
        return self._entries[name]

    def close(self) -> None:
        """Release every entry, the last opened first (one opened on top of another goes before it):
        its ``close()`` where it has one, then the reference. Each once: a second close finds nothing."""
        while self._entries:
            _, entry = self._entries.popitem()  # popped before closing: one that raises is not closed again
            close = getattr(entry, "close", None)
            if close is not None:
                close()


@functools.cache
def _keyval() -> int:
    """The process's attribute key for ``Resources`` on communicators (made once, like MPI's own keyvals).
    No copy function: a duplicated communicator starts with nothing open, as any new one."""
    from mpi4py import MPI

    return MPI.Comm.Create_keyval()


def resources_of(comm) -> Resources:
    """The resources kept on the MPI communicator ``comm`` (empty on first use)."""
    found = comm.Get_attr(_keyval())
    if found is None:
        found = Resources()
        comm.Set_attr(_keyval(), found)
    return found
