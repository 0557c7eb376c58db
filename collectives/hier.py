"""PCCL-style hierarchical collectives, composed from flat schedules.

All-gather: inter-node phase on the rail (each rank's chunk to the same local
rank of every node), then intra-node phase; the phases read and write the final
positions through strided blocks, so no permutation pass is needed.
Reduce-scatter: intra-node phase on strided source blocks (the "local permute"
folded into the messages) into a contiguous partial, then inter-node phase on
the rail into the result. All-reduce: both, plus a flat ring for the last
``count % p`` elements. A phase run by the MPI library (``mpi``) needs
contiguous buffers, so it costs the packing copies that PCCL itself does.

Phase names: any registered algorithm, any transport of collectives/transports (``mpi``,
``xccl``: NCCL/RCCL, GPU buffers only; ``rdma``: the rail phase by one-sided puts), whose
phases are library rows the transport runs (collectives/compose.py), or ``rs+ag`` pairs;
``rd`` for a reduce-scatter phase means its mirror ``rh`` (recursive halving) and vice versa.
"""

from __future__ import annotations

from functools import lru_cache

from collectives.algorithms import ALGORITHMS, phase_algorithm, supports
from collectives.schedule import (
    ACT_MPI_ALLGATHER,
    ACT_MPI_REDUCE_SCATTER,
    COMM_INTER,
    COMM_INTRA,
    COMM_WORLD,
    RECV,
    SCRATCH,
    SEND,
    Block,
    ContiguousLayout,
    Schedule,
    StepList,
    StridedLayout,
)
from collectives.spec import even_blocks, phases
from collectives.topology import Grid
from collectives.transports import TRANSPORTS

#: the algorithm name of library rows: one whole collective on the node or rail communicator,
#: run by the MPI library, or by the transport the phase names (collectives/transports)
MPI_PHASE = "mpi"


def schedule_algorithm(spec: str, phase: str) -> str:
    """The algorithm whose rows ``spec`` generates for ``phase``: library phases all give MPI_PHASE rows."""
    name = phase_algorithm(spec, phase)
    return MPI_PHASE if name in TRANSPORTS else name


def phase_problem(spec: str, phase: str) -> str | None:
    name = phase_algorithm(spec, phase)
    if name in TRANSPORTS:
        return None
    if name not in ALGORITHMS:
        return f"unknown phase algorithm {name!r} (known: {', '.join(sorted([*ALGORITHMS, *TRANSPORTS]))})"
    if not supports(name, phase):
        return f"algorithm {name!r} has no {phase} schedule"
    return None


def phases_needed(collective: str) -> tuple[str, ...]:
    return phases(collective)


def _merge(parts: list[Schedule]) -> Schedule:
    result = parts[0]
    for part in parts[1:]:
        result = result.then(part)
    return result


def allgather_phases(grid: Grid, rank: int, chunk: int, own: Block | None, intra: str, inter: str,
                     scratch_base: int) -> list[Schedule]:
    """Hierarchical all-gather into RECV (natural order, ``chunk`` per rank).

    ``own``: where this rank's chunk comes from (None: already in place in RECV)."""
    nnodes, per_node = grid.nnodes, grid.ranks_per_node
    node, local = grid.node(rank), grid.local(rank)
    final_own = Block(RECV, rank * chunk, chunk)
    # Where each node's chunk of this rail lands in the final buffer.
    rail_final = Block(RECV, local * chunk, chunk, nnodes, per_node * chunk)
    inter_name, intra_name = schedule_algorithm(inter, "allgather"), schedule_algorithm(intra, "allgather")
    parts: list[Schedule] = []
    contiguous_rail = intra_name == MPI_PHASE or inter_name == MPI_PHASE
    gathered = Block(SCRATCH, scratch_base, nnodes * chunk)  # the rail's chunks, contiguous
    after = scratch_base + nnodes * chunk
    head = StepList()
    if contiguous_rail:
        head.step(copy=(own or final_own, Block(SCRATCH, scratch_base + node * chunk, chunk)))
    elif own is not None:
        head.step(copy=(own, final_own))
    parts.append(head.build())
    if inter_name == MPI_PHASE:
        parts.append(StepList(COMM_INTER).mpi_collective(ACT_MPI_ALLGATHER, None, gathered, chunk).build())
    elif contiguous_rail:
        layout = ContiguousLayout(SCRATCH, (chunk,) * nnodes, scratch_base)
        parts.append(ALGORITHMS[inter_name].allgather(nnodes, node, layout, after).on(COMM_INTER))
    else:
        layout = StridedLayout(RECV, local * chunk, chunk, per_node * chunk)
        parts.append(ALGORITHMS[inter_name].allgather(nnodes, node, layout, scratch_base).on(COMM_INTER))
    if intra_name == MPI_PHASE:
        everything = Block(SCRATCH, after, per_node * nnodes * chunk)
        steps = StepList(COMM_INTRA).mpi_collective(ACT_MPI_ALLGATHER, gathered, everything, nnodes * chunk)
        unpermute = StepList()
        for peer in range(per_node):
            source = Block(SCRATCH, after + peer * nnodes * chunk, nnodes * chunk)
            unpermute.step(copy=(source, Block(RECV, peer * chunk, chunk, nnodes, per_node * chunk)))
        parts += [steps.build(), unpermute.build()]
        return parts
    if contiguous_rail:
        parts.append(StepList().step(copy=(gathered, rail_final)).build())
    layout = StridedLayout(RECV, 0, chunk, chunk, nchunks=nnodes, chunk_stride=per_node * chunk)
    parts.append(ALGORITHMS[intra_name].allgather(per_node, local, layout, after).on(COMM_INTRA))
    return parts


def reduce_scatter_phases(grid: Grid, rank: int, chunk: int, source_buf: int, result: Block, intra: str,
                          inter: str, scratch_base: int) -> list[Schedule]:
    """Hierarchical reduce-scatter of a natural-order source (``chunk`` per rank) into ``result``."""
    nnodes, per_node = grid.nnodes, grid.ranks_per_node
    node, local = grid.node(rank), grid.local(rank)
    inter_name, intra_name = schedule_algorithm(inter, "reduce_scatter"), schedule_algorithm(intra, "reduce_scatter")
    partial = Block(SCRATCH, scratch_base, nnodes * chunk)  # this node's sums for my local rank, by node
    after = scratch_base + nnodes * chunk
    parts: list[Schedule] = []
    if intra_name == MPI_PHASE:
        permute = StepList()
        for peer in range(per_node):
            permute.step(copy=(Block(source_buf, peer * chunk, chunk, nnodes, per_node * chunk),
                               Block(SCRATCH, after + peer * nnodes * chunk, nnodes * chunk)))
        packed = Block(SCRATCH, after, per_node * nnodes * chunk)
        steps = StepList(COMM_INTRA).mpi_collective(ACT_MPI_REDUCE_SCATTER, packed, partial, nnodes * chunk)
        parts += [permute.build(), steps.build()]
    else:
        layout = StridedLayout(source_buf, 0, chunk, chunk, nchunks=nnodes, chunk_stride=per_node * chunk)
        parts.append(ALGORITHMS[intra_name].reduce_scatter(per_node, local, layout, partial, after).on(COMM_INTRA))
    if inter_name == MPI_PHASE:
        parts.append(StepList(COMM_INTER).mpi_collective(ACT_MPI_REDUCE_SCATTER, partial, result, chunk).build())
    else:
        layout = ContiguousLayout(SCRATCH, (chunk,) * nnodes, scratch_base)
        parts.append(ALGORITHMS[inter_name].reduce_scatter(nnodes, node, layout, result, after).on(COMM_INTER))
    return parts


def _scratch_end(parts: list[Schedule]) -> int:
    return max((part.scratch for part in parts), default=0)


@lru_cache(maxsize=4096)
def hier_schedule(collective: str, grid: Grid, rank: int, count: int, in_place: bool,
                  intra: str, inter: str) -> Schedule:
    """One rank's whole hierarchical call as a single schedule over (world, node, rail)."""
    for phase in phases_needed(collective):
        for spec in (intra, inter):
            problem = phase_problem(spec, phase)
            if problem:
                raise ValueError(problem)
    source = RECV if in_place else SEND
    if collective == "allgather":
        own = None if in_place else Block(SEND, 0, count)
        return _merge(allgather_phases(grid, rank, count, own, intra, inter, 0))
    if collective == "reduce_scatter":
        return _merge(reduce_scatter_phases(grid, rank, count, source, Block(RECV, 0, count), intra, inter, 0))
    chunk = count // grid.nranks
    parts = reduce_scatter_phases(grid, rank, chunk, source, Block(RECV, rank * chunk, chunk), intra, inter, 0)
    parts += allgather_phases(grid, rank, chunk, None, intra, inter, 0)
    tail = count - chunk * grid.nranks
    if tail:
        # The last count % p elements: a flat ring all-reduce over the whole communicator.
        counts = even_blocks(tail, grid.nranks)
        done = chunk * grid.nranks
        layout = ContiguousLayout(RECV, counts, done)
        ring = ALGORITHMS["ring"]
        base = _scratch_end(parts)
        parts.append(ring.reduce_scatter(grid.nranks, rank, ContiguousLayout(source, counts, done),
                                         layout.block(rank), base).on(COMM_WORLD))
        parts.append(ring.allgather(grid.nranks, rank, layout, base).on(COMM_WORLD))
    return _merge(parts)
