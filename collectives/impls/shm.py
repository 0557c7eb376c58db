"""``shm``: the whole collective through the node's shared memory (LL, copy-in pipeline, or cma)."""

from __future__ import annotations

from collectives.impls import LibraryCollective, register


@register("shm")
class SharedMemory(LibraryCollective):
    transport = "shm"
