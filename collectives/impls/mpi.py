"""``mpi``: the MPI library's own collectives (the system-MPI baseline)."""

from __future__ import annotations

from collectives.impls import LibraryCollective, register


@register("mpi")
class MPINative(LibraryCollective):
    transport = "mpi"
