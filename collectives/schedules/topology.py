"""Nodes and rails: the 2-D grid PCCL's hierarchical collectives run on.

Global rank = node * ranks_per_node + local rank. The intra-node communicator
holds one node's ranks; the rail (inter-node) communicator holds the ranks with
the same local rank on every node, one per NIC, all rails running at once.
On one host ``ranks_per_node`` cuts the ranks into virtual nodes so every
hierarchical path runs on a laptop or in CI.
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass, field

from collectives.schedules.resources import Resources, resources_of
from collectives.schedules.rows import COMM_INTER, COMM_INTRA, COMM_WORLD


class ShapeError(ValueError):
    """The requested node shape does not fit how the ranks are really placed."""


@dataclass(frozen=True)
class Grid:
    nranks: int
    ranks_per_node: int

    def __post_init__(self) -> None:
        if self.ranks_per_node < 1 or self.nranks % self.ranks_per_node:
            raise ShapeError(f"{self.nranks} ranks do not divide into nodes of {self.ranks_per_node}")

    @property
    def nnodes(self) -> int:
        return self.nranks // self.ranks_per_node

    def node(self, rank: int) -> int:
        return rank // self.ranks_per_node

    def local(self, rank: int) -> int:
        return rank % self.ranks_per_node

    def members(self, comm: int, rank: int) -> list[int]:
        """World ranks of ``rank``'s communicator ``comm`` (schedule index), in that communicator's order."""
        if comm == COMM_WORLD:
            return list(range(self.nranks))
        if comm == COMM_INTRA:
            first = self.node(rank) * self.ranks_per_node
            return list(range(first, first + self.ranks_per_node))
        if comm == COMM_INTER:
            return [n * self.ranks_per_node + self.local(rank) for n in range(self.nnodes)]
        raise ValueError(f"unknown communicator index {comm}")


@dataclass
class Topology:
    """A communicator with its node and rail sub-communicators (created collectively, once)."""

    comm: object
    node_comm: object
    rail_comm: object
    grid: Grid
    virtual_nodes: bool
    hosts: tuple[str, ...]
    #: ranks on each real node (the shared-memory split), whatever the virtual nodes
    ranks_per_host: int = 0
    #: the job's own state on this topology (the harness's memory contexts and clock), closed with it
    resources: Resources = field(default_factory=Resources, compare=False, repr=False)

    @property
    def comms(self) -> list:
        """In the order of the schedule's comm column."""
        return [self.comm, self.node_comm, self.rail_comm]

    def close(self) -> None:
        """Release what is open on this topology, before MPI finalizes: the job's own resources first
        (memory contexts: their NCCL/RCCL communicators), then the transports' state on the rail and
        node communicators it made (shm segment, UCX endpoints). The communicators stay (MPI frees
        them at finalize); what is used again opens again. ``comm`` is not its own: the caller closes
        ``resources_of(comm)``, which other topologies of it share. Each resource once."""
        self.resources.close()
        for sub in (self.rail_comm, self.node_comm):
            if sub is not None:
                resources_of(sub).close()


class _Topologies(dict):
    """The topologies made of one communicator, by ranks_per_node: its ``topologies`` resource."""

    def close(self) -> None:
        while self:
            _, made = self.popitem()
            made.close()


#: The topologies this process made, while something holds them (their communicator does): what a
#: question asked without a communicator consults (shm's reason for a whole communicator, decided
#: from the call alone). An index of the objects that hold the state, holding none itself.
_MADE: list[weakref.ref[Topology]] = []


def made_topologies() -> list[Topology]:
    """The topologies ``topology()`` made in this process that are still held, oldest first."""
    return [made for made in (ref() for ref in _MADE) if made is not None]


def _remember(made: Topology) -> None:
    _MADE[:] = [*(ref for ref in _MADE if ref() is not None), weakref.ref(made)]


def topology(comm, ranks_per_node: int | None = None) -> Topology:
    """The topology of ``comm``, kept on ``comm`` (its ``topologies`` resource). A collective call on
    first use for a shape.

    ``ranks_per_node=None`` takes the real placement (shared-memory split). Otherwise
    each real node is cut into virtual nodes of that many ranks; a shape that does
    not fit (uneven nodes, ranks not placed in blocks, a virtual node straddling two
    real nodes) raises ShapeError on every rank.
    """
    from mpi4py import MPI

    made = resources_of(comm).open("topologies", _Topologies)
    if ranks_per_node in made:
        return made[ranks_per_node]
    shared = comm.Split_type(MPI.COMM_TYPE_SHARED, key=comm.Get_rank())
    real_size, real_local = shared.Get_size(), shared.Get_rank()
    shared.Free()
    real, hosts = _placement(comm, real_size, real_local)
    per_node = ranks_per_node or real
    if real % per_node:
        raise ShapeError(f"ranks_per_node={per_node} does not divide the {real} ranks placed on each real node")
    grid = Grid(comm.Get_size(), per_node)
    rank = comm.Get_rank()
    node_comm = comm.Split(grid.node(rank), rank)
    rail_comm = comm.Split(grid.local(rank), rank)
    result = Topology(comm, node_comm, rail_comm, grid, per_node < real, hosts, real)
    made[ranks_per_node] = result
    _remember(result)
    return result


def _placement(comm, real_size: int, real_local: int) -> tuple[int, tuple[str, ...]]:
    """(ranks on each real node, the nodes' names in rank order), or ShapeError on every rank.

    Fixed-size exchanges, whatever the rank count: one all-reduce of three integers decides equal
    nodes and block placement; only the nodes' first ranks send their names (to rank 0, which
    broadcasts them), not every rank its own to every rank (60 p^2 bytes: 4 GB at 8192 ranks)."""
    import numpy as np
    from mpi4py import MPI

    rank = comm.Get_rank()
    mine = np.array([real_size, -real_size, int(real_local == rank % real_size)], dtype=np.int64)
    agreed = np.empty_like(mine)
    comm.Allreduce(mine, agreed, op=MPI.MIN)
    smallest, largest, blocks = int(agreed[0]), -int(agreed[1]), bool(agreed[2])
    if smallest != largest:
        raise ShapeError(f"nodes hold different numbers of ranks ({smallest} to {largest}); hierarchy needs equal "
                         "nodes")
    if not blocks:
        raise ShapeError("ranks are not placed in blocks per node (rank = node * ranks_per_node + local); "
                         "launch with block placement")
    leaders = comm.Split(0 if real_local == 0 else MPI.UNDEFINED, rank)
    names = None
    if leaders != MPI.COMM_NULL:
        names = leaders.gather(MPI.Get_processor_name(), root=0)
        leaders.Free()
    hosts = comm.bcast(tuple(dict.fromkeys(names)) if rank == 0 else None, root=0)
    return smallest, hosts


def as_topology(comm_or_topology, ranks_per_node: int | None = None) -> Topology:
    """Accept a Topology as is, or build (once) the one of a plain communicator."""
    if isinstance(comm_or_topology, Topology):
        return comm_or_topology
    return topology(comm_or_topology, ranks_per_node)
